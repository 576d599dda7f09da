package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

func topology(links ...v1beta1.Link) *v1beta1.Topology {
	t := &v1beta1.Topology{Spec: v1beta1.TopologySpec{Links: links}}
	t.Namespace, t.Name, t.Generation = "lab", "r1", 3
	return t
}

func TestDesiredSendsOnlyWhatTheSpecSets(t *testing.T) {
	topo := topology(
		v1beta1.Link{UID: 1, LocalIntf: "eth1", State: ptr.To(v1beta1.LinkDown), MTU: ptr.To[int32](9000),
			Netem: &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("50ms")}},
		v1beta1.Link{UID: 2, LocalIntf: "eth2"},
	)
	pod := &corev1.Pod{}
	pod.UID = "u1"
	d, err := desiredState(topo, pod, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.request.GetGeneration() != 3 || d.request.GetPodUid() != "u1" || len(d.request.GetLinks()) != 2 {
		t.Fatalf("request = %v", d.request)
	}
	eth1, eth2 := d.request.Links[0], d.request.Links[1]
	if eth1.GetState() != meshnetv1.LinkState_LINK_STATE_DOWN || eth1.GetMtu() != 9000 || eth1.GetNetem().GetDelay().AsDuration().Milliseconds() != 50 {
		t.Errorf("eth1 = %v", eth1)
	}
	if eth2.State != nil || eth2.Mtu != nil || eth2.Netem != nil {
		t.Errorf("eth2 sets fields its spec does not have: %v", eth2)
	}
	if d.request.Routes != nil {
		t.Errorf("routes sent although the spec has none and never had: %v", d.request.Routes)
	}
	if got := d.managed[1]; len(got) != 3 {
		t.Errorf("managed[1] = %v, want state, mtu, netem", got)
	}
}

func TestDesiredUndoesWhatTheSpecDropped(t *testing.T) {
	topo := topology(v1beta1.Link{UID: 1, LocalIntf: "eth1"})
	topo.Status.Managed = &v1beta1.ManagedLinks{State: []int{1}, Netem: []int{1}}
	topo.Status.RoutesManaged = true
	d, err := desiredState(topo, &corev1.Pod{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	eth1 := d.request.Links[0]
	if eth1.GetState() != meshnetv1.LinkState_LINK_STATE_UP {
		t.Errorf("dropped state: sent %v, want up", eth1.State)
	}
	if eth1.Netem == nil || eth1.GetNetem().GetDelay() != nil || eth1.GetNetem().GetLossPercent() != 0 {
		t.Errorf("dropped netem: sent %v, want an empty spec (clear)", eth1.Netem)
	}
	if d.request.Routes == nil || len(d.request.Routes.Routes) != 0 {
		t.Errorf("dropped routes: sent %v, want an empty set", d.request.Routes)
	}
	if len(d.managed) != 0 || d.routesManaged {
		t.Errorf("still managed after the spec dropped them: %v %v", d.managed, d.routesManaged)
	}
}

func TestDesiredRoutes(t *testing.T) {
	topo := topology()
	topo.Spec.Routes = []v1beta1.Route{{Dst: "10.10.0.0/16", Gw: "10.0.0.2"}}
	d, err := desiredState(topo, &corev1.Pod{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := d.request.GetRoutes().GetRoutes(); len(r) != 1 || r[0].GetDst() != "10.10.0.0/16" || r[0].GetGw() != "10.0.0.2" || !d.routesManaged {
		t.Errorf("routes = %v managed=%v", r, d.routesManaged)
	}
}

// TestDesiredLinkDownWhenEitherEndSaysDown checks that a link's state is
// both ends' to say: down wins, as a cable pulled at one end.
func TestDesiredLinkDownWhenEitherEndSaysDown(t *testing.T) {
	down, up := ptr.To(v1beta1.LinkDown), ptr.To(v1beta1.LinkUp)
	r2 := &v1beta1.Topology{Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{
		{UID: 1, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1", State: down},
		{UID: 2, PeerPod: "r1", LocalIntf: "eth2", PeerIntf: "eth2", State: down},
		{UID: 3, PeerPod: "r1", LocalIntf: "eth3", PeerIntf: "eth3", State: down},
		{UID: 4, PeerPod: "r1", LocalIntf: "eth4", PeerIntf: "eth4", State: up},
		{UID: 5, PeerPod: "r9", LocalIntf: "eth5", PeerIntf: "eth5", State: down}, // uid 5 of another link
	}}}
	r2.Name = "r2"
	topo := topology(
		v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", State: up},
		v1beta1.Link{UID: 2, PeerPod: "r2", LocalIntf: "eth2"},
		v1beta1.Link{UID: 3, PeerPod: "r2", LocalIntf: "eth3"},
		v1beta1.Link{UID: 4, PeerPod: "r2", LocalIntf: "eth4", State: down},
		v1beta1.Link{UID: 5, PeerPod: "r2", LocalIntf: "eth5", State: up},
		v1beta1.Link{UID: 6, PeerPod: v1beta1.PeerHost, LocalIntf: "eth6", PeerIntf: "eth0", State: up},
	)
	topo.Status.Managed = &v1beta1.ManagedLinks{State: []int{2}}
	d, err := desiredState(topo, &corev1.Pod{}, map[string]*v1beta1.Topology{"r2": r2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		state   *meshnetv1.LinkState
		managed bool
		held    bool
	}{
		{meshnetv1.LinkState_LINK_STATE_DOWN.Enum(), true, true}, // up here, down there
		{nil, false, false}, // dropped here while the peer holds it down: the peer's to undo
		{nil, false, false}, // never set here: the peer's apply takes both ends down
		{meshnetv1.LinkState_LINK_STATE_DOWN.Enum(), true, false},
		{meshnetv1.LinkState_LINK_STATE_UP.Enum(), true, false}, // r2's uid 5 joins r9
		{meshnetv1.LinkState_LINK_STATE_UP.Enum(), true, false}, // macvlan: no peer Topology
	}
	for i, w := range want {
		l, uid := d.request.Links[i], i+1
		if (l.State == nil) != (w.state == nil) || (l.State != nil && l.GetState() != *w.state) {
			t.Errorf("uid %d: state %v, want %v", uid, l.State, w.state)
		}
		if got := len(d.managed[uid]) > 0; got != w.managed {
			t.Errorf("uid %d: managed %v, want %v", uid, d.managed[uid], w.managed)
		}
		if _, got := d.heldDown[uid]; got != w.held {
			t.Errorf("uid %d: held down %v, want %v (%v)", uid, got, w.held, d.heldDown)
		}
	}
}

// TestDesiredOverlaysFaults: a LinkFault at this end or the far end pulls
// the cable, a fault's netem replaces the Topology's, the links say which
// faults hold them, and once the faults let go what they applied is undone
// as a dropped field is, also before status.managed says it was applied.
func TestDesiredOverlaysFaults(t *testing.T) {
	own := &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("50ms")}
	fault := &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("300ms")}
	topo := topology(
		v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"},
		v1beta1.Link{UID: 2, PeerPod: "r2", LocalIntf: "eth2", PeerIntf: "eth2", Netem: own},
		v1beta1.Link{UID: 3, PeerPod: "r2", LocalIntf: "eth3", PeerIntf: "eth3"},
	)
	held := map[v1beta1.FaultLink]v1beta1.FaultHold{
		{Pod: "r1", Interface: "eth1"}: {By: []string{"cut"}, Down: true},
		{Pod: "r1", Interface: "eth2"}: {By: []string{"slow"}, Netem: fault, NetemBy: "slow"},
		{Pod: "r2", Interface: "eth3"}: {By: []string{"far"}, Down: true},
	}
	d, err := desiredState(topo, &corev1.Pod{}, nil, held, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := d.request.Links
	if l[0].GetState() != meshnetv1.LinkState_LINK_STATE_DOWN || l[2].GetState() != meshnetv1.LinkState_LINK_STATE_DOWN {
		t.Errorf("eth1 %v, eth3 %v: want both down (a fault here, a fault at the far end)", l[0].GetState(), l[2].GetState())
	}
	if got := l[1].GetNetem().GetDelay().AsDuration().Milliseconds(); got != 300 || l[1].State != nil {
		t.Errorf("eth2: delay %d ms, state %v; want the fault's 300 ms and no state", got, l[1].State)
	}
	if !slices.Equal(d.faults[1], []string{"cut"}) || !slices.Equal(d.faults[2], []string{"slow"}) || !slices.Equal(d.faults[3], []string{"far"}) {
		t.Errorf("faults by uid %v", d.faults)
	}
	// The faults deleted before the status saying what was applied
	// reached the cache: what was sent is undone all the same.
	d, err = desiredState(topo, &corev1.Pod{}, nil, nil, d.managed)
	if err != nil {
		t.Fatal(err)
	}
	l = d.request.Links
	if l[0].GetState() != meshnetv1.LinkState_LINK_STATE_UP || l[2].GetState() != meshnetv1.LinkState_LINK_STATE_UP {
		t.Errorf("after the faults: eth1 %v, eth3 %v; want both back up", l[0].GetState(), l[2].GetState())
	}
	if got := l[1].GetNetem().GetDelay().AsDuration().Milliseconds(); got != 50 {
		t.Errorf("after the fault: eth2 delay %d ms, want its Topology's 50 ms", got)
	}
	if len(d.faults) != 0 {
		t.Errorf("after the faults: faults by uid %v, want none", d.faults)
	}
	held = map[v1beta1.FaultLink]v1beta1.FaultHold{{Pod: "r1", Interface: "eth2"}: {By: []string{"bad"},
		Netem: &v1beta1.Netem{Jitter: ptr.To[v1beta1.Duration]("5ms")}, NetemBy: "bad"}}
	if _, err := desiredState(topo, &corev1.Pod{}, nil, held, nil); err == nil || !strings.Contains(err.Error(), "LinkFault bad: spec.netem.jitter") {
		t.Errorf("a fault's bad netem: %v, want an error naming LinkFault bad: spec.netem.jitter", err)
	}
}

// TestPeersOfChangedStates checks which peers a Topology event wakes: those
// of links whose spec.state changed, unless the peer holds the link down
// itself or has no Topology; a peer that cannot be read is woken.
func TestPeersOfChangedStates(t *testing.T) {
	old := topology(
		v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1"},
		v1beta1.Link{UID: 2, PeerPod: "r3", LocalIntf: "eth2", State: ptr.To(v1beta1.LinkDown)},
		v1beta1.Link{UID: 3, PeerPod: v1beta1.PeerHost, LocalIntf: "eth3"},
		v1beta1.Link{UID: 4, PeerPod: "r4", LocalIntf: "eth4"},
		v1beta1.Link{UID: 5, PeerPod: "r5", LocalIntf: "eth5"},
		v1beta1.Link{UID: 6, PeerPod: "r6", LocalIntf: "eth6"},
	)
	cur := old.DeepCopy()
	for _, i := range []int{0, 2, 3, 4, 5} {
		cur.Spec.Links[i].State = ptr.To(v1beta1.LinkDown)
	}
	cur.Spec.Links[1].MTU = ptr.To[int32](1400)
	peers := map[string]*v1beta1.Topology{
		"r2": topology(v1beta1.Link{UID: 1, PeerPod: "r1", LocalIntf: "eth1", State: ptr.To(v1beta1.LinkUp)}),
		"r3": topology(v1beta1.Link{UID: 2, PeerPod: "r1", LocalIntf: "eth1"}),
		"r4": topology(v1beta1.Link{UID: 4, PeerPod: "r1", LocalIntf: "eth1", State: ptr.To(v1beta1.LinkDown)}),
		// r5 has no Topology; r6's cannot be read
	}
	woken := func(old, cur *v1beta1.Topology) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		enqueuePeers(context.Background(), q, old, cur, func(_ context.Context, k types.NamespacedName) (*v1beta1.Topology, error) {
			if p, ok := peers[k.Name]; ok {
				return p, nil
			}
			if k.Name == "r6" {
				return nil, errors.New("the cache is not synced")
			}
			return nil, apierrors.NewNotFound(v1beta1.GroupVersion.WithResource("topologies").GroupResource(), k.Name)
		})
		var names []string
		for q.Len() > 0 {
			r, _ := q.Get()
			names = append(names, r.Namespace+"/"+r.Name)
		}
		slices.Sort(names)
		return names
	}
	for _, c := range []struct {
		name     string
		old, cur *v1beta1.Topology
		want     []string
	}{
		{"update", old, cur, []string{"lab/r2", "lab/r6"}}, // r4 holds uid 4 down itself
		{"create", nil, old, []string{"lab/r3"}},
		{"delete", cur, nil, []string{"lab/r2", "lab/r3", "lab/r6"}},
		{"no state change", old, old.DeepCopy(), nil},
	} {
		if got := woken(c.old, c.cur); !slices.Equal(got, c.want) {
			t.Errorf("%s: woke %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRefreshPeersOnlyWhereTheFarEndChanged checks that a pass wakes the
// peers whose end it changed, and no others: two ends holding one link down
// must not wake each other for ever.
func TestRefreshPeersOnlyWhereTheFarEndChanged(t *testing.T) {
	topo := topology(
		v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1"},
		v1beta1.Link{UID: 2, PeerPod: "r3", LocalIntf: "eth2"},
		v1beta1.Link{UID: 3, PeerPod: "r4", LocalIntf: "eth3"},
	)
	peer := func(name string) *v1beta1.Topology {
		p := topology()
		p.Name = name
		return p
	}
	peers := map[string]*v1beta1.Topology{"r2": peer("r2"), "r3": peer("r3")} // r4 has no Topology
	resp := &meshnetv1.ApplyPodResponse{Results: []*meshnetv1.LinkResult{
		{Uid: 1, Interface: "eth1", PeerEndChanged: true},
		{Uid: 2, Interface: "eth2"},
		{Uid: 3, Interface: "eth3", PeerEndChanged: true},
		{Uid: 9, Interface: "eth9", PeerEndChanged: true}, // not in the spec (any more)
	}}
	r := &Reconciler{stale: make(chan event.GenericEvent, 8)}
	r.refreshPeers(topo, peers, resp)
	close(r.stale)
	var woken []string
	for e := range r.stale {
		woken = append(woken, e.Object.GetName())
	}
	if !slices.Equal(woken, []string{"r2"}) {
		t.Fatalf("woken %v, want [r2]", woken)
	}
}

// TestFarEndsSetOfAFailedApply checks that the far ends a failed ApplyPod
// changed are still found, in its error's details.
func TestFarEndsSetOfAFailedApply(t *testing.T) {
	changed := &meshnetv1.ApplyPodResponse{Results: []*meshnetv1.LinkResult{{Uid: 1, Interface: "eth1", PeerEndChanged: true}}}
	failed, err := status.New(codes.Internal, "apply pod lab/r1: eth2: mtu").WithDetails(changed)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		resp *meshnetv1.ApplyPodResponse
		err  error
		want *meshnetv1.ApplyPodResponse
	}{
		{"success", changed, nil, changed},
		{"failure with far ends", nil, failed.Err(), changed},
		{"failure without", nil, status.Error(codes.Unavailable, "connection refused"), nil},
	} {
		if got := farEndsSet(c.resp, c.err); !proto.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
