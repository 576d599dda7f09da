package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
)

// desired is a pod's runtime state computed from its Topology.
type desired struct {
	request *meshnetv1.ApplyPodRequest
	// managed is, per link uid, the spec fields the request applies.
	managed map[int][]string
	// routesManaged is true when the request carries spec.routes.
	routesManaged bool
	// heldDown is, per link uid, the peer pod whose Topology keeps a link
	// down that this one wants up.
	heldDown map[int]string
	// waiting is, per link uid, what the link waits for on its peer's side
	// before it can be wired, in a user's words; absent when nothing there
	// holds it up.
	waiting map[int]string
	// faults is, per link uid, the LinkFaults holding it now, at either
	// end.
	faults map[int][]string
	// farEnds is, per link uid, the link's far end as its node's view
	// told it when the status was computed (Reconciler.farEnds); absent
	// when unknown.
	farEnds map[int]v1beta1.FarEnd
}

// desiredState computes the ApplyPod request for pod. Fields the spec sets are
// sent and so converged exactly; a field the controller applied before and the
// spec dropped is undone (state back up, netem cleared, routes removed); a
// field the spec never had is left to runtime callers.
//
// A link is one cable with a state in both ends' Topologies: it is down when
// either says down, as a cable pulled at one end is. peers holds the
// Topologies of the pods at the other ends, by name; without it the two
// daemons would each push their own view to both VXLAN ends, and the link
// would flap at every resync.
//
// held is what LinkFaults do to links now (v1beta1.Holding): they overlay
// the Topologies, at this end and at the peer's, for their windows, and
// what they applied is undone at the end as a dropped field is.
//
// sent is, per link uid, the fields this controller sent for the pod in its
// last ApplyPod, which status.managed may not say yet (its write still on
// its way to the cache): a fault deleted right after its window began must
// still be undone.
func desiredState(topo *v1beta1.Topology, pod *corev1.Pod, peers map[string]*v1beta1.Topology, held map[v1beta1.FaultLink]v1beta1.FaultHold, sent map[int][]string) (desired, error) {
	before := topo.Status.Managed.ByUID()
	for uid, fields := range sent {
		for _, f := range fields {
			if !slices.Contains(before[uid], f) {
				before[uid] = append(before[uid], f)
			}
		}
	}
	d := desired{
		request: &meshnetv1.ApplyPodRequest{
			Namespace:  topo.Namespace,
			Pod:        topo.Name,
			PodUid:     string(pod.UID),
			Generation: topo.Generation,
		},
		managed:  map[int][]string{},
		heldDown: map[int]string{},
		waiting:  map[int]string{},
		faults:   map[int][]string{},
	}
	ix := uidIndex{}
	for i, l := range topo.Spec.Links {
		peer := peers[l.PeerPod]
		pl := ix.link(peer, l.UID)
		if why := waitingFor(topo, l, peer, pl); why != "" {
			d.waiting[l.UID] = why
		}
		own := held[v1beta1.FaultLink{Pod: topo.Name, Interface: l.LocalIntf}]
		var far v1beta1.FaultHold
		if l.HasPodPeer() {
			far = held[v1beta1.FaultLink{Pod: l.PeerPod, Interface: l.PeerIntf}]
		}
		if by := append(slices.Clone(own.By), far.By...); len(by) > 0 {
			d.faults[l.UID] = by
		}
		l = overlay(l, own, far.Down)
		spec := &meshnetv1.LinkSpec{Interface: l.LocalIntf}
		var managed []string
		held := heldByPeer(topo.Name, l, pl)
		switch {
		case l.State != nil:
			state := *l.State
			if state == v1beta1.LinkUp && held {
				state = v1beta1.LinkDown
				d.heldDown[l.UID] = l.PeerPod
			}
			spec.State = state.Proto().Enum()
			managed = append(managed, v1beta1.ManagedState)
		case slices.Contains(before[l.UID], v1beta1.ManagedState) && !held:
			// Left to the peer when it holds the link down: its apply
			// brings both ends up once it lets go.
			spec.State = meshnetv1.LinkState_LINK_STATE_UP.Enum()
		}
		if l.MTU != nil {
			mtu := uint32(*l.MTU)
			spec.Mtu = &mtu
			managed = append(managed, v1beta1.ManagedMTU)
		}
		switch {
		case l.Netem != nil:
			s, err := netemconv.FromTopology(l.Netem)
			if err != nil {
				var msgs []string
				field := fmt.Sprintf("spec.links[%d].netem", i)
				if own.Netem != nil {
					field = fmt.Sprintf("LinkFault %s: spec.netem", own.NetemBy)
				}
				for _, fe := range netemconv.Fields(err) {
					msgs = append(msgs, fmt.Sprintf("%s.%s: %s", field, fe.Field, fe.Reason))
				}
				return desired{}, fmt.Errorf("link uid %d: %s", l.UID, strings.Join(msgs, "; "))
			}
			spec.Netem = netemconv.ToProto(s)
			managed = append(managed, v1beta1.ManagedNetem)
		case slices.Contains(before[l.UID], v1beta1.ManagedNetem):
			spec.Netem = &meshnetv1.NetemSpec{}
		}
		d.request.Links = append(d.request.Links, spec)
		if len(managed) > 0 {
			d.managed[l.UID] = managed
		}
	}
	switch {
	case len(topo.Spec.Routes) > 0:
		set := &meshnetv1.RouteSet{}
		for _, r := range topo.Spec.Routes {
			set.Routes = append(set.Routes, &meshnetv1.Route{Dst: r.Dst, Gw: r.Gw, Dev: r.Dev})
		}
		d.request.Routes = set
		d.routesManaged = true
	case topo.Status.RoutesManaged:
		d.request.Routes = &meshnetv1.RouteSet{}
	}
	return d, nil
}

// overlay is l as LinkFaults leave it: down when a fault holding it (own)
// or its far end (farDown) pulls its cable, shaped by own's netem in place
// of its own.
func overlay(l v1beta1.Link, own v1beta1.FaultHold, farDown bool) v1beta1.Link {
	if own.Down || farDown {
		down := v1beta1.LinkDown
		l.State = &down
	}
	if own.Netem != nil {
		l.Netem = own.Netem
	}
	return l
}

// uidIndex finds Topologies' links by uid, indexing each Topology once: a
// pass over a pod of thousands of links to one peer must not scan the
// peer's links once per link.
type uidIndex map[*v1beta1.Topology]map[int]*v1beta1.Link

// link is t's link uid; nil when t is nil or has none.
func (ix uidIndex) link(t *v1beta1.Topology, uid int) *v1beta1.Link {
	if t == nil {
		return nil
	}
	m, ok := ix[t]
	if !ok {
		m = make(map[int]*v1beta1.Link, len(t.Spec.Links))
		for i := range t.Spec.Links {
			m[t.Spec.Links[i].UID] = &t.Spec.Links[i]
		}
		ix[t] = m
	}
	return m[uid]
}

// waitingFor says what link l of topo waits for on its peer's side: the
// peer's Topology, its end of the link (pl, the peer's link of l's uid), or
// its pod; "" when the peer side is ready (or l has no pod peer). A link is
// made once both ends' Topologies list it and both pods run.
func waitingFor(topo *v1beta1.Topology, l v1beta1.Link, peer *v1beta1.Topology, pl *v1beta1.Link) string {
	if !l.HasPodPeer() {
		return ""
	}
	ref := topo.Namespace + "/" + l.PeerPod
	switch {
	case peer == nil:
		return fmt.Sprintf("waiting for Topology %s: peer pod %s has none", ref, l.PeerPod)
	case pl == nil:
		return fmt.Sprintf("waiting for Topology %s to list link uid %d: both ends must list it", ref, l.UID)
	case pl.PeerPod != topo.Name || pl.PeerIntf != l.LocalIntf || pl.LocalIntf != l.PeerIntf:
		return fmt.Sprintf("Topology %s lists link uid %d as %s to %s:%s, this one as %s to %s:%s: the ends must match",
			ref, l.UID, pl.LocalIntf, pl.PeerPod, pl.PeerIntf, l.LocalIntf, l.PeerPod, l.PeerIntf)
	case peer.Status.ContainerID == "":
		return fmt.Sprintf("waiting for peer pod %s to start: meshnet has not wired its sandbox yet", ref)
	}
	return ""
}

// heldByPeer reports whether pl, the link of l's uid in the Topology of
// l's peer pod, sets the same link down.
func heldByPeer(pod string, l v1beta1.Link, pl *v1beta1.Link) bool {
	if !l.HasPodPeer() {
		return false
	}
	return pl != nil && pl.PeerPod == pod && pl.State != nil && *pl.State == v1beta1.LinkDown
}
