package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

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
	d, err := desiredState(topo, pod)
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
	topo.Status.Links = []v1beta1.LinkStatus{{UID: 1, LocalIntf: "eth1", Managed: []string{managedState, managedNetem}}}
	topo.Status.RoutesManaged = true
	d, err := desiredState(topo, &corev1.Pod{})
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
	d, err := desiredState(topo, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if r := d.request.GetRoutes().GetRoutes(); len(r) != 1 || r[0].GetDst() != "10.10.0.0/16" || r[0].GetGw() != "10.0.0.2" || !d.routesManaged {
		t.Errorf("routes = %v managed=%v", r, d.routesManaged)
	}
}
