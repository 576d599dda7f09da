package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

// A Topology's peers: the Topologies at the other ends of its links, which a
// pass reads for the far ends' state and wakes when it changed their end.

// refreshPeers has a peer reconciled when this pass changed its end of a
// VXLAN link: only the peer's own pass reads that end back into its status.
// A pass that found the far end as wanted wakes nobody, so two ends that
// both hold a link down settle instead of waking each other.
func (r *Reconciler) refreshPeers(topo *v1beta1.Topology, peers map[string]*v1beta1.Topology, resp *meshnetv1.ApplyPodResponse) {
	woken := map[string]bool{}
	peerOf := map[int]string{}
	for _, l := range topo.Spec.Links {
		peerOf[l.UID] = l.PeerPod
	}
	for _, res := range resp.GetResults() {
		peer := peers[peerOf[int(res.GetUid())]]
		if !res.GetPeerEndChanged() || peer == nil || woken[peer.Name] {
			continue // unchanged, no Topology (no status to refresh), or woken already
		}
		woken[peer.Name] = true
		select {
		case r.stale <- event.GenericEvent{Object: peer}:
		default: // full: the peer's resync reads it back
		}
	}
}

// farEndsSet is what an ApplyPod reports of the far ends it set: its
// response, or, when it failed, the response in the error's details.
func farEndsSet(resp *meshnetv1.ApplyPodResponse, err error) *meshnetv1.ApplyPodResponse {
	if err == nil {
		return resp
	}
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*meshnetv1.ApplyPodResponse); ok {
			return r
		}
	}
	return nil
}

// peerTopologies returns the Topologies of the pods at the other ends of
// topo's links, by name; a peer without one is left out.
func (r *Reconciler) peerTopologies(ctx context.Context, topo *v1beta1.Topology) (map[string]*v1beta1.Topology, error) {
	peers := map[string]*v1beta1.Topology{}
	for _, l := range topo.Spec.Links {
		if _, seen := peers[l.PeerPod]; seen || !l.HasPodPeer() {
			continue
		}
		peer := &v1beta1.Topology{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: topo.Namespace, Name: l.PeerPod}, peer); {
		case apierrors.IsNotFound(err):
			peer = nil
		case err != nil:
			return nil, fmt.Errorf("read peer Topology %s/%s: %w", topo.Namespace, l.PeerPod, err)
		}
		peers[l.PeerPod] = peer
	}
	return peers, nil
}

// peersOf maps a Topology to the Topologies of its links' peer pods.
func peersOf(_ context.Context, o client.Object) []reconcile.Request {
	t := o.(*v1beta1.Topology)
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for _, l := range t.Spec.Links {
		if l.HasPodPeer() && !seen[l.PeerPod] {
			seen[l.PeerPod] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: l.PeerPod}})
		}
	}
	return reqs
}

// peersOfChangedStates enqueues, for a Topology event, the peers at the
// other ends of the links whose spec.state it changed: such a link's state
// is both Topologies' to say (desiredState), so the peer converges too,
// unless its own spec holds the link down whatever this one says.
func (r *Reconciler) peersOfChangedStates() handler.Funcs {
	peer := func(ctx context.Context, key types.NamespacedName) (*v1beta1.Topology, error) {
		t := &v1beta1.Topology{}
		return t, r.Client.Get(ctx, key, t)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueuePeers(ctx, q, nil, e.Object.(*v1beta1.Topology), peer)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueuePeers(ctx, q, e.ObjectOld.(*v1beta1.Topology), e.ObjectNew.(*v1beta1.Topology), peer)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if topo, ok := e.Object.(*v1beta1.Topology); ok {
				enqueuePeers(ctx, q, topo, nil, peer)
			}
		},
	}
}

func enqueuePeers(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], old, cur *v1beta1.Topology,
	peer func(context.Context, types.NamespacedName) (*v1beta1.Topology, error)) {
	oldStates, curStates := linkStates(old), linkStates(cur)
	// Each peer is read once, however many of its links changed: a
	// Topology of thousands of links to one peer is one cache read, not
	// thousands of copies of the peer.
	decided := map[string]bool{}
	type read struct {
		topo *v1beta1.Topology
		err  error
	}
	peers := map[string]read{}
	ix := uidIndex{}
	for _, t := range []*v1beta1.Topology{old, cur} {
		if t == nil {
			continue
		}
		for _, l := range t.Spec.Links {
			if !l.HasPodPeer() || decided[l.PeerPod] || oldStates[l.UID] == curStates[l.UID] {
				continue
			}
			key := types.NamespacedName{Namespace: t.Namespace, Name: l.PeerPod}
			pr, ok := peers[l.PeerPod]
			if !ok {
				pr.topo, pr.err = peer(ctx, key)
				peers[l.PeerPod] = pr
			}
			p, perr := pr.topo, pr.err
			switch {
			case apierrors.IsNotFound(perr): // no Topology: its creation reconciles it
				decided[l.PeerPod] = true
			case perr == nil && heldByPeer(t.Name, l, ix.link(p, l.UID)): // its own spec holds the link down
			default:
				decided[l.PeerPod] = true
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
	}
}

// linkStates is the spec state of each link of t by uid ("" for none).
func linkStates(t *v1beta1.Topology) map[int]v1beta1.LinkState {
	if t == nil {
		return nil
	}
	out := make(map[int]v1beta1.LinkState, len(t.Spec.Links))
	for _, l := range t.Spec.Links {
		if l.State != nil {
			out[l.UID] = *l.State
		} else {
			out[l.UID] = ""
		}
	}
	return out
}
