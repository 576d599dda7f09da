// Package linkwatch follows the kernel state of the links of this node's
// pods and hands every change, in order, to its watchers: the WatchLinks
// stream, and through it the controller, which writes Topology status.
//
// It learns of changes from rtnetlink notifications in each pod's network
// namespace and from the pod store (a pod wired, re-wired or torn down), not
// from polls. A notification only says that a pod changed; the watcher then
// reads the pod again with the one kernel reader it is given and sends the
// differences, so dropped or merged notifications lose nothing.
package linkwatch

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/util/workqueue"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// Snapshot is a pod as the kernel has it: its link ends, ordered by
// interface, and its meshnet-managed routes.
type Snapshot struct {
	Links  []*meshnetv1.LinkStatus
	Routes []*meshnetv1.Route
}

// Config is what a Watcher follows.
type Config struct {
	// Pods is the node's pod store.
	Pods *podstore.Store
	// Read reads a pod back from the kernel.
	Read func(podstore.Pod) (Snapshot, error)
	// Settle is how long a notification waits for the ones that follow it
	// (a link change brings address and route changes) before the pod is
	// read: one read for a burst. Zero means 5ms.
	Settle time.Duration
	// Buffer is how many events a watcher may fall behind before it is
	// ended (ErrTooSlow). Zero means 4096.
	Buffer int
	// Log receives a record per failed read; nil discards them.
	Log *slog.Logger
}

// ErrTooSlow ends a watch whose reader fell more than Config.Buffer events
// behind; it watches again to get the current state.
var ErrTooSlow = errors.New("watcher fell too far behind")

// Watcher follows the pods of the store. It is safe for concurrent use.
type Watcher struct {
	cfg   Config
	log   *slog.Logger
	queue workqueue.TypedDelayingInterface[podstore.Key]

	mu   sync.Mutex // guards what follows, and orders events
	rev  uint64
	pods map[podstore.Key]*pod
	subs map[*Watch]struct{}
	// held counts the changes in progress per pod (Hold); deferred marks
	// the held pods that were touched meanwhile.
	held     map[podstore.Key]int
	deferred map[podstore.Key]bool

	reading sync.Map // podstore.Key -> *sync.Mutex: one read of a pod at a time
}

// pod is what the watcher last sent of one pod, and its subscription.
type pod struct {
	netns  string
	events *links.Events
	links  map[string]*meshnetv1.LinkStatus
	routes []*meshnetv1.Route
	// cost is how long the last read took: the next waits at least
	// readSpacing times as long after a notification, so that a pod of
	// thousands of links changing for a while (after a change, the kernel
	// reports operstate, IPv6 address and route changes over a second or
	// two) is read at most a fifth of the time, not back to back.
	cost time.Duration
	// touches counts the pod's Touches; covered is what it was when the
	// last read began. A read covers every Touch before it began, so a
	// queued read with nothing after that (the notifications of an
	// ApplyPod's own changes, which its Refresh read) is skipped.
	touches, covered uint64
	// read is set by the first read's publish: a watch's listing
	// includes the pod from then on.
	read bool
}

// readSpacing is how many times its last read's cost a pod waits before
// it is read again after a notification: a 1,024-link pod, read in about
// 100 ms, is read at most every 0.4 s; a small one at Settle.
const readSpacing = 4

// New returns a Watcher; Run starts it.
func New(cfg Config) *Watcher {
	if cfg.Settle == 0 {
		cfg.Settle = 5 * time.Millisecond
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 4096
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, log: log, queue: workqueue.NewTypedDelayingQueue[podstore.Key](),
		pods: map[podstore.Key]*pod{}, subs: map[*Watch]struct{}{}, held: map[podstore.Key]int{}, deferred: map[podstore.Key]bool{}}
	cfg.Pods.Notify(w.Touch)
	return w
}

// Run reads the pods whose namespaces or records changed until ctx ends,
// then closes every subscription and watch.
func (w *Watcher) Run(ctx context.Context) {
	for _, p := range w.cfg.Pods.List() {
		w.queue.Add(p.Key())
	}
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				k, quit := w.queue.Get()
				if quit {
					return
				}
				if w.readSince(k) || w.deferIfHeld(k) {
					w.queue.Done(k)
					continue
				}
				if _, _, err := w.Refresh(k); err != nil {
					w.log.Warn("pod not read back", "pod", k.String(), "error", err)
				}
				w.queue.Done(k)
			}
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pods {
		if p.events != nil {
			p.events.Close()
		}
	}
	for s := range w.subs {
		s.end(context.Canceled)
	}
}

// Touch has the pod read again shortly: its record or its kernel state
// changed.
func (w *Watcher) Touch(k podstore.Key) {
	settle := w.cfg.Settle
	w.mu.Lock()
	if p := w.pods[k]; p != nil {
		settle = max(settle, readSpacing*p.cost)
		p.touches++
	}
	w.mu.Unlock()
	w.queue.AddAfter(k, settle)
}

// readSince reports whether a read of the pod began after its last Touch:
// that read covered it.
func (w *Watcher) readSince(k podstore.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[k]
	return p != nil && p.touches == p.covered
}

// Hold defers the pod's reads until release: a change in progress (an
// ApplyPod, a batch of far ends) would have it read again and again half
// done. release has it read once, if it was touched meanwhile.
func (w *Watcher) Hold(k podstore.Key) (release func()) {
	w.mu.Lock()
	w.held[k]++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.held[k]--
			again := w.held[k] == 0 && w.deferred[k]
			if w.held[k] == 0 {
				delete(w.held, k)
				delete(w.deferred, k)
			}
			w.mu.Unlock()
			if again {
				w.Touch(k)
			}
		})
	}
}

// deferIfHeld reports whether the pod is held, and if so marks it for a
// read at its release.
func (w *Watcher) deferIfHeld(k podstore.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[k] == 0 {
		return false
	}
	w.deferred[k] = true
	return true
}

// Refresh reads the pod now, sends what changed since the last read, and
// returns the state read with its revision: every event of a higher
// revision was read later.
func (w *Watcher) Refresh(k podstore.Key) (Snapshot, uint64, error) {
	l, _ := w.reading.LoadOrStore(k, &sync.Mutex{})
	mu := l.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()

	// This read covers what any earlier notification deferred by Hold was
	// about; a notification from now on defers another.
	w.mu.Lock()
	delete(w.deferred, k)
	w.mu.Unlock()
	rec, ok := w.cfg.Pods.Get(k)
	if !ok {
		return Snapshot{}, w.forget(k), nil
	}
	w.subscribe(k, rec)
	var touches uint64
	w.mu.Lock()
	if p := w.pods[k]; p != nil { // subscribe made it
		touches = p.touches
	}
	w.mu.Unlock()
	start := time.Now()
	snap, err := w.cfg.Read(rec)
	if err != nil {
		return Snapshot{}, 0, err
	}
	return snap, w.publish(k, snap, time.Since(start), touches), nil
}

// subscribe makes sure the pod's namespace is followed; a new sandbox
// (another netns) replaces the subscription of the old one. A pod with no
// links (every pod of the node is recorded, most have none) is not
// followed until it has some: the store tells when it does.
func (w *Watcher) subscribe(k podstore.Key, rec podstore.Pod) {
	w.mu.Lock()
	p := w.pods[k]
	if p != nil && p.netns == rec.Netns && (p.events != nil || len(rec.Links) == 0) {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	var events *links.Events
	if len(rec.Links) == 0 {
		// Nothing to follow.
	} else if ns, err := links.OpenNetns(rec.Netns); err != nil {
		w.log.Warn("pod namespace not followed", "pod", k.String(), "netns", rec.Netns, "error", err)
	} else {
		events, err = ns.Subscribe()
		ns.Close()
		if err != nil {
			w.log.Warn("pod namespace not followed", "pod", k.String(), "netns", rec.Netns, "error", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p = w.pods[k]; p == nil {
		p = &pod{links: map[string]*meshnetv1.LinkStatus{}}
		w.pods[k] = p
	}
	if p.events != nil {
		p.events.Close()
	}
	p.netns, p.events = rec.Netns, events
	if events != nil {
		go func() {
			for events.Wait() == nil {
				w.Touch(k)
			}
		}()
	}
}

// forget sends the removal of every link of a pod no longer on this node.
func (w *Watcher) forget(k podstore.Key) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[k]
	if p == nil {
		return w.rev
	}
	if p.events != nil {
		p.events.Close()
	}
	delete(w.pods, k)
	now := timestamppb.Now()
	var evs []*meshnetv1.WatchLinksResponse
	for _, intf := range slices.Sorted(maps.Keys(p.links)) {
		evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED, k, now, p.links[intf], nil))
	}
	if len(p.routes) > 0 {
		evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES, k, now, nil, nil))
	}
	w.sendAll(evs)
	return w.rev
}

// publish sends the differences between snap and what was last sent of
// the pod; the read began when the pod had had touches Touches.
func (w *Watcher) publish(k podstore.Key, snap Snapshot, cost time.Duration, touches uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[k]
	if p == nil {
		p = &pod{links: map[string]*meshnetv1.LinkStatus{}}
		w.pods[k] = p
	}
	p.cost, p.covered, p.read = cost, max(p.covered, touches), true
	now := timestamppb.Now()
	var evs []*meshnetv1.WatchLinksResponse
	seen := map[string]bool{}
	for _, l := range snap.Links {
		seen[l.GetInterface()] = true
		old, had := p.links[l.GetInterface()]
		switch {
		case !had:
			evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, k, now, l, nil))
		case !sameLink(old, l):
			evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, k, now, l, nil))
		}
		p.links[l.GetInterface()] = l
	}
	for _, intf := range slices.Sorted(maps.Keys(p.links)) {
		if !seen[intf] {
			evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED, k, now, p.links[intf], nil))
			delete(p.links, intf)
		}
	}
	if !slices.EqualFunc(p.routes, snap.Routes, func(a, b *meshnetv1.Route) bool { return proto.Equal(a, b) }) {
		evs = append(evs, event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES, k, now, nil, snap.Routes))
		p.routes = snap.Routes
	}
	w.sendAll(evs)
	return w.rev
}

// sameLink compares two reads of a link end but for what changes without
// an event: counters, the qdisc's drops and the time of the read.
// b is the fresh read, not shared yet: it borrows a's values of those fields
// for the comparison and gets its own back, rather than both messages being
// cloned (a pod of thousands of links is compared link by link at every
// read). a was sent to watchers and may be marshalled meanwhile: it is only
// read.
func sameLink(a, b *meshnetv1.LinkStatus) bool {
	c, t, d := b.Counters, b.ReadTime, b.QdiscDrops
	b.Counters, b.ReadTime, b.QdiscDrops = a.Counters, a.ReadTime, a.QdiscDrops
	same := proto.Equal(a, b)
	b.Counters, b.ReadTime, b.QdiscDrops = c, t, d
	return same
}

func event(t meshnetv1.LinkEventType, k podstore.Key, now *timestamppb.Timestamp, l *meshnetv1.LinkStatus, routes []*meshnetv1.Route) *meshnetv1.WatchLinksResponse {
	return &meshnetv1.WatchLinksResponse{Type: t, Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: k.Name}, Link: l, Routes: routes, Time: now}
}

// sendAll sends the events of one read of a pod, all but the last marked
// as followed by more. w.mu is held.
func (w *Watcher) sendAll(evs []*meshnetv1.WatchLinksResponse) {
	for i, ev := range evs {
		ev.More = i < len(evs)-1
		w.send(ev)
	}
}

// send numbers an event and hands it to the watches that select its pod.
// w.mu is held.
func (w *Watcher) send(ev *meshnetv1.WatchLinksResponse) {
	w.rev++
	ev.Revision = w.rev
	k := podstore.Key{Namespace: ev.GetPod().GetNamespace(), Name: ev.GetPod().GetName()}
	for s := range w.subs {
		if s.selects(k) {
			s.push(ev)
		}
	}
}

// Watch is one watcher's stream of events.
type Watch struct {
	namespace, pod string
	events         chan *meshnetv1.WatchLinksResponse
	done           chan struct{}
	once           sync.Once
	err            error
	w              *Watcher
}

// Watch starts a watch of the pods of namespace (every namespace when
// empty), or of one pod. Its first events list the current state of every
// pod it selects, then SYNCED, then every change. Stop it when done.
func (w *Watcher) Watch(namespace, pod string) *Watch {
	s := &Watch{namespace: namespace, pod: pod, w: w, done: make(chan struct{})}
	w.readUnread(s)
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]podstore.Key, 0, len(w.pods))
	listing := 1 // SYNCED
	for k, p := range w.pods {
		if s.selects(k) {
			keys = append(keys, k)
			listing += len(p.links) + 1
		}
	}
	// Room for the whole listing, whatever the pods' size, and then for
	// Buffer changes.
	s.events = make(chan *meshnetv1.WatchLinksResponse, listing+w.cfg.Buffer)
	slices.SortFunc(keys, func(a, b podstore.Key) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	now := timestamppb.Now()
	for _, k := range keys {
		p := w.pods[k]
		for _, intf := range slices.Sorted(maps.Keys(p.links)) {
			ev := event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, k, now, p.links[intf], nil)
			ev.Revision = w.rev
			s.push(ev)
		}
		if len(p.routes) > 0 {
			ev := event(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES, k, now, nil, p.routes)
			ev.Revision = w.rev
			s.push(ev)
		}
	}
	s.push(&meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED, Revision: w.rev, Time: now})
	w.subs[s] = struct{}{}
	return s
}

// readUnread reads the pods of the store that s selects and that were
// never read: just after meshnetd starts, Run's first reads are still
// going, and a listing without them would say SYNCED with pods missing.
func (w *Watcher) readUnread(s *Watch) {
	for _, p := range w.cfg.Pods.List() {
		k := p.Key()
		if !s.selects(k) {
			continue
		}
		w.mu.Lock()
		read := w.pods[k] != nil && w.pods[k].read
		w.mu.Unlock()
		if read {
			continue
		}
		if _, _, err := w.Refresh(k); err != nil {
			w.log.Warn("pod not read back", "pod", k.String(), "error", err)
		}
	}
}

func (s *Watch) selects(k podstore.Key) bool {
	return (s.namespace == "" || s.namespace == k.Namespace) && (s.pod == "" || s.pod == k.Name)
}

// push queues an event, or ends a watch that fell too far behind. The
// watcher's lock is held.
func (s *Watch) push(ev *meshnetv1.WatchLinksResponse) {
	select {
	case s.events <- ev:
	default:
		delete(s.w.subs, s)
		s.end(ErrTooSlow)
	}
}

func (s *Watch) end(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// Next returns the next event, or an error when ctx ends, the watch was
// stopped, or it fell too far behind (ErrTooSlow).
func (s *Watch) Next(ctx context.Context) (*meshnetv1.WatchLinksResponse, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-s.events:
		return ev, nil
	case <-s.done:
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stop ends the watch.
func (s *Watch) Stop() {
	s.w.mu.Lock()
	delete(s.w.subs, s)
	s.w.mu.Unlock()
	s.end(context.Canceled)
}
