package controller

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/partition"
)

// kernel is what every node's meshnetd says its pods' links are, kept from
// one WatchLinks stream per node: the status is written from it, so it
// follows whatever changed the kernel (the controller, a runtime call, the
// CNI, a process inside the pod), and an edit whose ApplyPod changed
// nothing costs no call. It also remembers what was applied to each pod,
// so that a pass whose desired state was applied already only rewrites the
// status.
type kernel struct {
	daemons *partition.Resolver
	pool    *daemonclient.Pool
	// changed receives the pods whose links changed.
	changed chan<- event.GenericEvent

	mu      sync.Mutex
	nodes   map[string]*nodeView
	applied map[types.NamespacedName]appliedState
}

// nodeView is one node's pods as its stream last told them.
type nodeView struct {
	// synced is set once the stream's listing arrived; until then, and
	// after it broke, the node's pods have no view and passes apply.
	synced bool
	pods   map[types.NamespacedName]*podView
}

// podView is one pod's links.
type podView struct {
	rev    uint64
	links  map[string]*meshnetv1.LinkStatus
	routes []*meshnetv1.Route
}

// appliedState is the last ApplyPod that converged a pod.
type appliedState struct {
	node    string
	request *meshnetv1.ApplyPodRequest
	results []*meshnetv1.LinkResult
	at      time.Time
}

func newKernel(daemons *partition.Resolver, pool *daemonclient.Pool, changed chan<- event.GenericEvent) *kernel {
	return &kernel{daemons: daemons, pool: pool, changed: changed,
		nodes: map[string]*nodeView{}, applied: map[types.NamespacedName]appliedState{}}
}

// follow starts following node's pods, unless it is followed already.
func (k *kernel) follow(ctx context.Context, node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.nodes[node]; ok {
		return
	}
	k.nodes[node] = &nodeView{}
	go k.watch(ctx, node)
}

// watch keeps a WatchLinks stream to node's meshnetd until ctx ends.
func (k *kernel) watch(ctx context.Context, node string) {
	logger := log.FromContext(ctx).WithValues("node", node)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := k.stream(ctx, node)
		k.lost(node)
		if status.Code(err) == codes.Unimplemented {
			logger.Info("meshnetd has no WatchLinks; statuses follow applies and resyncs only")
			return
		}
		if ctx.Err() != nil {
			return
		}
		logger.V(1).Info("link watch ended; watching again", "error", err, "after", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stream runs one WatchLinks call.
func (k *kernel) stream(ctx context.Context, node string) error {
	addr, err := k.daemons.DaemonFor(ctx, node)
	if err != nil {
		return err
	}
	conn, err := k.pool.Conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := meshnetv1.NewLinkServiceClient(conn).WatchLinks(ctx, &meshnetv1.WatchLinksRequest{})
	if err != nil {
		return err
	}
	listing := map[types.NamespacedName]*podView{}
	peers := map[types.NamespacedName]bool{}
	for {
		ev, err := s.Recv()
		if err != nil {
			return err
		}
		key := types.NamespacedName{Namespace: ev.GetPod().GetNamespace(), Name: ev.GetPod().GetName()}
		if ev.GetType() == meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED {
			k.synced(node, listing)
			listing = nil
			continue
		}
		if listing != nil {
			apply(listing, key, ev)
			continue
		}
		k.mu.Lock()
		if n := k.nodes[node]; n != nil {
			if peer, ok := farEndChanged(n.pods[key], ev); ok {
				peers[peer] = true
			}
			apply(n.pods, key, ev)
		}
		k.mu.Unlock()
		if !ev.GetMore() {
			// The last event of the read: one pass for the whole change,
			// not one on a half-told one; and one for each pod at the
			// other end of a link that came, went or changed its admin
			// state, whose status says what its far end is.
			k.notify(key)
			for peer := range peers {
				k.notify(peer)
			}
			clear(peers)
		}
	}
}

// farEndChanged reports the pod at the far end of ev's link, in the same
// namespace, when ev makes that pod's far end come, go, or change its admin
// state; prev is the pod's view before ev.
func farEndChanged(prev *podView, ev *meshnetv1.WatchLinksResponse) (types.NamespacedName, bool) {
	peer := ev.GetLink().GetPeer().GetPod().GetPod()
	if peer.GetName() == "" {
		return types.NamespacedName{}, false
	}
	key := types.NamespacedName{Namespace: peer.GetNamespace(), Name: peer.GetName()}
	switch ev.GetType() {
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED:
		return key, true
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED:
		var was *meshnetv1.LinkStatus
		if prev != nil {
			was = prev.links[ev.GetLink().GetInterface()]
		}
		return key, was == nil || was.GetAdminState() != ev.GetLink().GetAdminState()
	}
	return types.NamespacedName{}, false
}

// apply records one event in a node's pods.
func apply(pods map[types.NamespacedName]*podView, key types.NamespacedName, ev *meshnetv1.WatchLinksResponse) {
	p := pods[key]
	if p == nil {
		p = &podView{links: map[string]*meshnetv1.LinkStatus{}}
		pods[key] = p
	}
	if ev.GetRevision() < p.rev {
		return // an ApplyPod's answer read the pod later
	}
	p.rev = ev.GetRevision()
	switch ev.GetType() {
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED:
		p.links[ev.GetLink().GetInterface()] = ev.GetLink()
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED:
		delete(p.links, ev.GetLink().GetInterface())
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES:
		p.routes = ev.GetRoutes()
	}
}

// synced installs a node's listing. What was applied on the node is
// applied again at the pods' next passes: a stream that (re)starts may
// follow a meshnetd that restarted. The pods at the far ends of the
// node's links are woken too: what their status says of those far ends
// is known from now on, not from their next resync.
func (k *kernel) synced(node string, listing map[types.NamespacedName]*podView) {
	k.mu.Lock()
	n := k.nodes[node]
	if n == nil {
		k.mu.Unlock()
		return
	}
	touched := map[types.NamespacedName]bool{}
	for _, pods := range []map[types.NamespacedName]*podView{n.pods, listing} {
		for key, p := range pods {
			touched[key] = true
			for _, l := range p.links {
				if peer := l.GetPeer().GetPod().GetPod(); peer.GetName() != "" {
					touched[types.NamespacedName{Namespace: peer.GetNamespace(), Name: peer.GetName()}] = true
				}
			}
		}
	}
	n.synced, n.pods = true, listing
	for key, a := range k.applied {
		if a.node == node {
			delete(k.applied, key)
		}
	}
	k.mu.Unlock()
	for key := range touched {
		k.notify(key)
	}
}

// lost forgets a node's pods when its stream ends.
func (k *kernel) lost(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := k.nodes[node]; n != nil {
		n.synced, n.pods = false, nil
	}
}

func (k *kernel) notify(key types.NamespacedName) {
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case k.changed <- event.GenericEvent{Object: topo}:
	default: // full: the pod's resync reads it
	}
}

// links returns a pod's links on node as last told, and whether the node's
// stream has a view of the pod at all.
func (k *kernel) links(node string, key types.NamespacedName) (map[string]*meshnetv1.LinkStatus, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.nodes[node]
	if n == nil || !n.synced {
		return nil, false
	}
	p := n.pods[key]
	if p == nil {
		return nil, false
	}
	out := make(map[string]*meshnetv1.LinkStatus, len(p.links))
	for intf, l := range p.links {
		out[intf] = l
	}
	return out, true
}

// farEnd is end intf (link uid) of pod key on node as the node's stream
// last told it; ok is false when the node's stream has no view (not
// followed yet, or broken): the far end is then unknown, not missing. A
// pod the view does not list has no end there (its sandbox is not wired,
// or has no links).
func (k *kernel) farEnd(node string, key types.NamespacedName, intf string, uid int) (end v1beta1.FarEnd, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.nodes[node]
	if n == nil || !n.synced {
		return "", false
	}
	var l *meshnetv1.LinkStatus
	if p := n.pods[key]; p != nil {
		l = p.links[intf]
	}
	switch {
	case l == nil || l.GetUid() != uint32(uid) || l.GetAdminState() == meshnetv1.LinkState_LINK_STATE_UNSPECIFIED:
		// Not there, another link's, or recorded but gone from the
		// namespace (read without a kernel state).
		return v1beta1.FarEndMissing, true
	case l.GetAdminState() == meshnetv1.LinkState_LINK_STATE_UP:
		return v1beta1.FarEndUp, true
	}
	return v1beta1.FarEndDown, true
}

// answered records an ApplyPod's answer: the links it read back, unless
// the stream told of a later read already, and what was applied.
func (k *kernel) answered(node string, key types.NamespacedName, req *meshnetv1.ApplyPodRequest, resp *meshnetv1.ApplyPodResponse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if req.GetApplyAt() != nil { // made at its moment; the same state after
		req = proto.Clone(req).(*meshnetv1.ApplyPodRequest)
		req.ApplyAt = nil
	}
	k.applied[key] = appliedState{node: node, request: req, results: resp.GetResults(), at: time.Now()}
	n := k.nodes[node]
	if n == nil || !n.synced || resp.GetRevision() == 0 {
		return
	}
	p := n.pods[key]
	if p == nil {
		p = &podView{}
		n.pods[key] = p
	}
	if resp.GetRevision() < p.rev {
		return
	}
	p.rev, p.routes = resp.GetRevision(), resp.GetRoutes()
	p.links = make(map[string]*meshnetv1.LinkStatus, len(resp.GetLinks()))
	for _, l := range resp.GetLinks() {
		p.links[l.GetInterface()] = l
	}
}

// unapplied forgets what was applied to a pod: its next pass applies.
func (k *kernel) unapplied(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.applied, key)
}

// current returns what was applied to a pod on node when it is req and
// younger than maxAge, and the node's stream has the pod: then a pass has
// nothing to apply and writes the status from the stream.
func (k *kernel) current(node string, key types.NamespacedName, req *meshnetv1.ApplyPodRequest, maxAge time.Duration) (appliedState, bool) {
	k.mu.Lock()
	a, ok := k.applied[key]
	k.mu.Unlock()
	if !ok || a.node != node || time.Since(a.at) >= maxAge || !proto.Equal(a.request, req) {
		return appliedState{}, false
	}
	kl, ok := k.links(node, key)
	if !ok {
		return appliedState{}, false
	}
	for _, r := range a.results {
		if _, wired := kl[r.GetInterface()]; wired && r.GetPhase() == meshnetv1.LinkPhase_LINK_PHASE_PENDING {
			return appliedState{}, false // wired since: its state, MTU and netem are still to apply
		}
	}
	return a, true
}
