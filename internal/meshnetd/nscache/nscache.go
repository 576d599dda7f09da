// Package nscache reads Kubernetes objects through informer caches that
// exist only for the namespaces being read. A namespace's first read starts
// its informers (of the types read, as a controller-runtime cache does); a
// namespace nobody has read for Config.Idle is dropped with them. A node
// agent that serves a read API for any namespace (meshnetd's data API) thus
// watches the namespaces someone is looking at, not the whole cluster.
package nscache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// DefaultIdle is how long a namespace nobody reads keeps its informers
// when Config.Idle is zero: longer than any dashboard's refresh interval.
const DefaultIdle = 10 * time.Minute

// DefaultMaxNamespaces bounds the namespaces with informers when
// Config.MaxNamespaces is zero, so that reads of many names (mistyped ones
// too) cannot start watches without end.
const DefaultMaxNamespaces = 100

// ErrNoNamespace is returned for a List across namespaces, which would
// need every namespace's informers.
var ErrNoNamespace = errors.New("nscache: a List must name its namespace")

// ErrStopped is returned for a read after Run has returned.
var ErrStopped = errors.New("nscache: stopped")

// Config says how each namespace's cache is made.
type Config struct {
	Rest   *rest.Config
	Scheme *runtime.Scheme
	// ByObject are per-type options of every namespace's cache, such as a
	// Transform that trims objects to the fields the reader uses.
	ByObject map[client.Object]cache.ByObject
	// Idle is how long a namespace nobody reads keeps its informers;
	// zero means DefaultIdle.
	Idle time.Duration
	// MaxNamespaces bounds the namespaces with informers: a read of one
	// more drops the least recently read. Zero means DefaultMaxNamespaces.
	MaxNamespaces int
}

// Reader is a client.Reader over per-namespace informer caches. It is safe
// for concurrent use.
type Reader struct {
	cfg  Config
	base context.Context
	stop context.CancelFunc
	// http and mapper are shared by every namespace's cache, as a
	// manager's caches share them: one connection pool, one discovery.
	http   *http.Client
	mapper meta.RESTMapper

	mu     sync.Mutex
	spaces map[string]*space
}

// space is one namespace's cache.
type space struct {
	cache  cache.Cache
	cancel context.CancelFunc
	used   time.Time
}

var _ client.Reader = (*Reader)(nil)

// New returns a Reader that starts informers on first read; Run drops idle
// namespaces and, when it returns, stops every informer.
func New(cfg Config) (*Reader, error) {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.MaxNamespaces <= 0 {
		cfg.MaxNamespaces = DefaultMaxNamespaces
	}
	hc, err := rest.HTTPClientFor(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("namespace caches: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg.Rest, hc)
	if err != nil {
		return nil, fmt.Errorf("namespace caches: %w", err)
	}
	base, stop := context.WithCancel(context.Background())
	return &Reader{cfg: cfg, base: base, stop: stop, http: hc, mapper: mapper, spaces: map[string]*space{}}, nil
}

// Get reads obj from the cache of key's namespace, starting it if needed.
func (r *Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c, err := r.cache(key.Namespace)
	if err != nil {
		return err
	}
	return c.Get(ctx, key, obj, opts...)
}

// List reads list from the cache of the namespace the options name,
// starting it if needed.
func (r *Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	ns := (&client.ListOptions{}).ApplyOptions(opts).Namespace
	if ns == "" {
		return ErrNoNamespace
	}
	c, err := r.cache(ns)
	if err != nil {
		return err
	}
	return c.List(ctx, list, opts...)
}

// Namespaces returns the namespaces whose informers run, sorted.
func (r *Reader) Namespaces() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.spaces))
}

// Run drops the namespaces nobody has read for Config.Idle, until ctx ends;
// then it stops every namespace's informers and later reads fail.
func (r *Reader) Run(ctx context.Context) {
	defer r.stop()
	tick := time.NewTicker(max(r.cfg.Idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			r.dropIdle(now)
		}
	}
}

func (r *Reader) dropIdle(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ns, s := range r.spaces {
		if now.Sub(s.used) >= r.cfg.Idle {
			r.dropLocked(ns)
		}
	}
}

// dropLeastRecentLocked drops the namespace read longest ago.
func (r *Reader) dropLeastRecentLocked() {
	var oldest string
	for ns, s := range r.spaces {
		if oldest == "" || s.used.Before(r.spaces[oldest].used) {
			oldest = ns
		}
	}
	r.dropLocked(oldest)
}

// dropLocked stops namespace ns's informers and forgets its cache.
func (r *Reader) dropLocked(ns string) {
	if s, ok := r.spaces[ns]; ok {
		s.cancel()
		delete(r.spaces, ns)
	}
}

// cache returns namespace ns's cache, made and started on first use.
func (r *Reader) cache(ns string) (cache.Cache, error) {
	if r.base.Err() != nil {
		return nil, ErrStopped
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.spaces[ns]; ok {
		s.used = time.Now()
		return s.cache, nil
	}
	if len(r.spaces) >= r.cfg.MaxNamespaces {
		r.dropLeastRecentLocked()
	}
	c, err := cache.New(r.cfg.Rest, cache.Options{
		HTTPClient:        r.http,
		Mapper:            r.mapper,
		Scheme:            r.cfg.Scheme,
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject:          maps.Clone(r.cfg.ByObject),
	})
	if err != nil {
		return nil, fmt.Errorf("cache of namespace %s: %w", ns, err)
	}
	ctx, cancel := context.WithCancel(r.base)
	go c.Start(ctx) //nolint:errcheck // it fails only when started twice
	// Reads of a cache not started yet fail; with no informers yet, this
	// waits for Start alone.
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, ErrStopped
	}
	r.spaces[ns] = &space{cache: c, cancel: cancel, used: time.Now()}
	return c, nil
}
