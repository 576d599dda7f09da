package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// TestKernelViewDecidesWhatToApply: a pass applies again unless the same
// request was applied within the resync, the node's stream has the pod,
// and no link that was pending then is wired now (its spec is still to
// apply).
func TestKernelViewDecidesWhatToApply(t *testing.T) {
	k := newKernel(nil, nil, make(chan event.GenericEvent, 16))
	key := types.NamespacedName{Namespace: "lab", Name: "r1"}
	req := &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: "r1", Generation: 2}
	eth1 := &meshnetv1.LinkStatus{Interface: "eth1"}
	resp := &meshnetv1.ApplyPodResponse{Revision: 5, Links: []*meshnetv1.LinkStatus{eth1}, Results: []*meshnetv1.LinkResult{
		{Interface: "eth1", Phase: meshnetv1.LinkPhase_LINK_PHASE_READY},
		{Interface: "eth2", Phase: meshnetv1.LinkPhase_LINK_PHASE_PENDING},
	}}

	k.answered("node-a", key, req, resp)
	if _, ok := k.current("node-a", key, req, time.Minute); ok {
		t.Fatal("no stream of node-a yet: a pass must apply")
	}
	k.nodes["node-a"] = &nodeView{}
	k.synced("node-a", map[types.NamespacedName]*podView{})
	k.answered("node-a", key, req, resp)
	if _, ok := k.current("node-a", key, req, time.Minute); !ok {
		t.Fatal("the same request, applied just now, the pod in the stream: a pass must not apply")
	}
	if _, ok := k.current("node-a", key, &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: "r1", Generation: 3}, time.Minute); ok {
		t.Error("a new generation must be applied")
	}
	if _, ok := k.current("node-a", key, req, 0); ok {
		t.Error("past the resync, a pass must apply")
	}
	apply(k.nodes["node-a"].pods, key, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, Revision: 6,
		Link: &meshnetv1.LinkStatus{Interface: "eth2"}})
	if _, ok := k.current("node-a", key, req, time.Minute); ok {
		t.Error("eth2 was pending and is wired now: a pass must apply its spec")
	}
	stale := &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED, Revision: 4, Link: eth1}
	apply(k.nodes["node-a"].pods, key, stale)
	if kl, _ := k.links("node-a", key); kl["eth1"] == nil {
		t.Error("an event older than the answer's read must not change the view")
	}
}

// TestNodeSyncedWakesTheFarEnds: a node's stream, once synced, wakes its
// pods and the pods at the far ends of their links, on other nodes, whose
// statuses say from then on what those far ends are (not at their next
// resync).
func TestNodeSyncedWakesTheFarEnds(t *testing.T) {
	changed := make(chan event.GenericEvent, 16)
	k := newKernel(nil, nil, changed)
	k.nodes["node-b"] = &nodeView{}
	r3 := types.NamespacedName{Namespace: "lab", Name: "r3"}
	k.synced("node-b", map[types.NamespacedName]*podView{r3: {links: map[string]*meshnetv1.LinkStatus{
		"eth1": {Interface: "eth1", Peer: &meshnetv1.Peer{Peer: &meshnetv1.Peer_Pod{Pod: &meshnetv1.PodPeer{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r1"}, Interface: "eth2"}}}},
	}}})
	woken := map[string]bool{}
	for len(changed) > 0 {
		ev := <-changed
		woken[ev.Object.GetNamespace()+"/"+ev.Object.GetName()] = true
	}
	if !woken["lab/r3"] || !woken["lab/r1"] || len(woken) != 2 {
		t.Errorf("woken %v, want lab/r3 and, at its link's far end, lab/r1", woken)
	}
}
