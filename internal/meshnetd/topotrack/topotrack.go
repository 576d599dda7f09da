// Package topotrack watches the Topologies of the pods wired on one node,
// one watch a pod selected by name, as the kubelet watches the Secrets and
// ConfigMaps its pods use. meshnetd thus decodes the edits and status
// writes of its own pods' Topologies, not of every Topology in the cluster:
// with one watch of them all, every daemon decoded every status write the
// controller made anywhere.
package topotrack

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// Tracker holds one informer per tracked Topology. It is safe for
// concurrent use.
type Tracker struct {
	client client.WithWatch
	base   context.Context
	stop   context.CancelFunc

	mu      sync.Mutex
	tracked map[client.ObjectKey]*tracked
	// onDelete is told of each tracked Topology deleted (OnDelete).
	onDelete func(client.ObjectKey)
}

type tracked struct {
	informer toolscache.SharedIndexInformer
	cancel   context.CancelFunc
}

// New returns a Tracker that lists and watches through c, whose scheme
// knows v1beta1.
func New(c client.WithWatch) *Tracker {
	base, stop := context.WithCancel(context.Background())
	return &Tracker{client: c, base: base, stop: stop, tracked: map[client.ObjectKey]*tracked{}}
}

// Close stops every watch.
func (t *Tracker) Close() {
	t.stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.tracked)
}

// Follow tracks the Topology of every pod in s, now and as s gains and
// loses pods.
func (t *Tracker) Follow(s *podstore.Store) {
	s.Notify(func(k podstore.Key) {
		t.mu.Lock()
		defer t.mu.Unlock()
		// Read under t.mu, so that of two notifications racing for one
		// pod the later sees the store's latest state.
		if _, ok := s.Get(k); ok {
			t.trackLocked(objectKey(k))
		} else {
			t.untrackLocked(objectKey(k))
		}
	})
	for _, p := range s.List() {
		t.Track(objectKey(p.Key()))
	}
}

// OnDelete has f called with the name of each tracked Topology its watch
// sees deleted, of those tracked now and later; call it once. f must not
// block: the watch waits for it.
func (t *Tracker) OnDelete(f func(client.ObjectKey)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onDelete = f
	for k, tr := range t.tracked {
		t.tellDeletes(k, tr.informer)
	}
}

// tellDeletes hands the deletes inf sees of Topology k to t.onDelete.
func (t *Tracker) tellDeletes(k client.ObjectKey, inf toolscache.SharedIndexInformer) {
	if t.onDelete == nil {
		return
	}
	f := t.onDelete
	// An informer stopped already (untracked) has nothing more to tell.
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { f(k) }})
}

// Track starts watching the Topology named k, which need not exist yet.
func (t *Tracker) Track(k client.ObjectKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trackLocked(k)
}

// Untrack stops watching the Topology named k.
func (t *Tracker) Untrack(k client.ObjectKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.untrackLocked(k)
}

// Tracked returns the names of the watched Topologies, sorted.
func (t *Tracker) Tracked() []client.ObjectKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]client.ObjectKey, 0, len(t.tracked))
	for k := range t.tracked {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b client.ObjectKey) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return keys
}

// Get copies the Topology named key into obj, a *v1beta1.Topology. It is
// NotFound when the Topology is not tracked, its watch has not listed it
// yet, or it does not exist: a caller that must know confirms a miss with
// the API server.
//
// With client.UnsafeDisableDeepCopy, as a controller-runtime cache does,
// obj shares the cached Topology's links, maps and pointers rather than
// copying them, and the caller must not change them: a pod's far-end
// calls, one per link and all in flight at once, each held a copy of the
// pod's whole Topology, so n of them held n² links (a 1,024-link pod's
// peer node peaked at 348 MiB).
func (t *Tracker) Get(_ context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	out, ok := obj.(*v1beta1.Topology)
	if !ok {
		return fmt.Errorf("topotrack: Get of %T: only Topologies are tracked", obj)
	}
	notFound := apierrors.NewNotFound(v1beta1.GroupVersion.WithResource("topologies").GroupResource(), key.Name)
	t.mu.Lock()
	tr, ok := t.tracked[key]
	t.mu.Unlock()
	if !ok || !tr.informer.HasSynced() {
		return notFound
	}
	item, exists, err := tr.informer.GetStore().GetByKey(key.String())
	if err != nil {
		return fmt.Errorf("topotrack: Topology %s: %w", key, err)
	}
	if !exists {
		return notFound
	}
	cached := item.(*v1beta1.Topology)
	if o := (&client.GetOptions{}).ApplyOptions(opts); o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy {
		*out = *cached
		return nil
	}
	cached.DeepCopyInto(out)
	return nil
}

func (t *Tracker) trackLocked(k client.ObjectKey) {
	if _, ok := t.tracked[k]; ok || t.base.Err() != nil {
		return
	}
	byName := fields.OneTermEqualSelector("metadata.name", k.Name).String()
	options := func(o metav1.ListOptions) *client.ListOptions {
		o.FieldSelector = byName
		return &client.ListOptions{Namespace: k.Namespace, Raw: &o}
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &v1beta1.TopologyList{}
			err := t.client.List(ctx, list, options(o))
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return t.client.Watch(ctx, &v1beta1.TopologyList{}, options(o))
		},
		DisableChunking: true,
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &v1beta1.Topology{}, toolscache.SharedIndexInformerOptions{})
	t.tellDeletes(k, inf)
	ctx, cancel := context.WithCancel(t.base)
	go inf.RunWithContext(ctx)
	t.tracked[k] = &tracked{informer: inf, cancel: cancel}
}

func (t *Tracker) untrackLocked(k client.ObjectKey) {
	if tr, ok := t.tracked[k]; ok {
		tr.cancel()
		delete(t.tracked, k)
	}
}

func objectKey(k podstore.Key) client.ObjectKey {
	return client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
}
