package podlinks

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/shaping"
)

func TestIfname(t *testing.T) {
	for name, ok := range map[string]bool{
		"eth1": true, "e1-1.100": true, "abcdefghijklmno": true,
		"": false, "abcdefghijklmnop": false, ".": false, "..": false, "eth/1": false, "eth:1": false,
		"eth 1": false, "eth\n1": false, "ethé": false,
	} {
		var v violations
		v.ifname("interface", name)
		if (len(v) == 0) != ok {
			t.Errorf("ifname %q: violations %v, want valid %v", name, v, ok)
		}
	}
}

func TestViolationsStatus(t *testing.T) {
	var v violations
	v.namespace("")
	v.pod("pod", "/var/run/netns/x")
	v.state("state", meshnetv1.LinkState_LINK_STATE_UNSPECIFIED)
	v.mtu("mtu", 67)
	err := v.err()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code %v, want InvalidArgument", st.Code())
	}
	for _, f := range []string{"namespace: required", "pod:", "state:", "mtu: 67 is outside 68..65535"} {
		if !strings.Contains(st.Message(), f) {
			t.Errorf("message %q lacks %q", st.Message(), f)
		}
	}
	if len(st.Details()) != 1 || len(st.Details()[0].(*errdetails.BadRequest).GetFieldViolations()) != 4 {
		t.Fatalf("details %v, want a BadRequest with 4 violations", st.Details())
	}
	if (violations{}).err() != nil {
		t.Fatal("no violations must be no error")
	}
}

func TestNetemSpecNamesAPIFields(t *testing.T) {
	ms := func(n int) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		spec *meshnetv1.NetemSpec
		want []string
	}{
		{&meshnetv1.NetemSpec{LossPercent: 101}, []string{"netem.loss_percent"}},
		{&meshnetv1.NetemSpec{Jitter: ms(1)}, []string{"netem.jitter: needs delay"}},
		{&meshnetv1.NetemSpec{Delay: ms(-1)}, []string{"netem.delay: -1ms is negative"}},
		{&meshnetv1.NetemSpec{Delay: &durationpb.Duration{Seconds: 1, Nanos: -1}}, []string{"netem.delay"}},
		{&meshnetv1.NetemSpec{ReorderPercent: 5, Gap: 3}, []string{"netem.reorder_percent: needs delay"}},
		{&meshnetv1.NetemSpec{Gap: 3}, []string{"netem.gap: needs reorder_percent"}},
		{&meshnetv1.NetemSpec{Delay: ms(10), Distribution: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETO}, []string{"netem.distribution"}},
		{&meshnetv1.NetemSpec{Distribution: 9}, []string{"netem.distribution: unknown value 9"}},
		{&meshnetv1.NetemSpec{RateBps: 7, CorruptCorrelationPercent: 5}, []string{"netem.rate_bps", "netem.corrupt_correlation_percent: needs corrupt_percent"}},
	} {
		var v violations
		v.netemSpec("netem", tc.spec)
		msg := status.Convert(v.err()).Message()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: %q lacks %q", tc.spec, msg, w)
			}
		}
	}
	var v violations
	got := v.netemSpec("netem", &meshnetv1.NetemSpec{Delay: ms(30), Jitter: ms(5), Distribution: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL,
		LossPercent: 1.5, RateBps: 8000, LimitPackets: 500})
	want := shaping.Spec{Delay: 30 * time.Millisecond, Jitter: 5 * time.Millisecond, Distribution: shaping.DistributionNormal, Loss: 1.5, RateBps: 8000, Limit: 500}
	if len(v) != 0 || got != want {
		t.Fatalf("valid spec: %+v (%v), want %+v", got, v, want)
	}
}

func TestSameNetem(t *testing.T) {
	want := shaping.Spec{Delay: 10 * time.Millisecond, Reorder: 5, Distribution: shaping.DistributionNormal}
	kernel := shaping.Spec{Delay: 10 * time.Millisecond, Reorder: 5, Gap: 1, Limit: shaping.DefaultLimit(want)}
	if !sameNetem(kernel, want) {
		t.Fatal("kernel read-back with defaults resolved must equal the spec")
	}
	kernel.Loss = 1
	if sameNetem(kernel, want) {
		t.Fatal("a loss the spec does not have must differ")
	}
}

func TestRoutes(t *testing.T) {
	devs := map[string]links.Interface{"eth1": {}, "eth2": {}}
	var v violations
	got := v.routes("routes", []*meshnetv1.Route{
		{Dst: "10.9.0.1/24", Gw: "10.0.0.2"}, {Dst: "fd00::/64", Dev: "eth2"}, {Dst: "0.0.0.0/0", Gw: "::ffff:10.0.0.2"},
	}, devs)
	if len(v) != 0 || len(got) != 3 || got[0].Dst.String() != "10.9.0.0/24" || got[2].Gw.String() != "10.0.0.2" {
		t.Fatalf("routes %+v, violations %v", got, v)
	}
	v = nil
	v.routes("routes", []*meshnetv1.Route{
		{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}, {Dst: "10.9.0.0/24", Dev: "eth1"}, {Dst: "x"}, {Dst: "10.1.0.0/16", Dev: "eth3"},
		{Dst: "10.2.0.0/16", Gw: "fd00::1"}, {Dst: "10.3.0.0/16"},
	}, devs)
	msg := v.err().Error()
	for _, w := range []string{"routes[1].dst: 10.9.0.0/24 is also routes[0]'s", "routes[2].dst", "routes[3].dev: pod has no interface eth3",
		"routes[4].gw", "routes[5]: needs gw or dev"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q lacks %q", msg, w)
		}
	}
}

// TestListsBoundedByTheCRD: ApplyPod and SetRoutes refuse more links or
// routes than a Topology holds, naming the field, before they touch
// anything (this server has no pods and no kernel).
func TestListsBoundedByTheCRD(t *testing.T) {
	s := linkServer{rc: &Reconciler{}}
	apply := &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: "r1", Routes: &meshnetv1.RouteSet{}}
	for range v1beta1.MaxLinks + 1 {
		apply.Links = append(apply.Links, &meshnetv1.LinkSpec{Interface: "eth1"})
	}
	for range v1beta1.MaxRoutes + 1 {
		apply.Routes.Routes = append(apply.Routes.Routes, &meshnetv1.Route{Dst: "192.0.2.0/24"})
	}
	_, err := s.ApplyPod(t.Context(), apply)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "links: 10001 items; a Topology has at most 10000") ||
		!strings.Contains(err.Error(), "routes.routes: 257 items; a Topology has at most 256") {
		t.Errorf("ApplyPod of too many links and routes: %v", err)
	}
	_, err = s.SetRoutes(t.Context(), &meshnetv1.SetRoutesRequest{Namespace: "lab", Pod: "r1", Routes: apply.Routes.Routes})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "routes: 257 items") {
		t.Errorf("SetRoutes of too many routes: %v", err)
	}
}

// TestPeerStateIsUpOrDown: a peer node's SetRemoteState(s) with an admin
// state that is neither up nor down is refused, naming the field, before
// the pod is looked up: the daemon's one form of a state is up or not, and
// an unknown value must not read as down.
func TestPeerStateIsUpOrDown(t *testing.T) {
	s := peerServer{rc: &Reconciler{}}
	end := &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r1"}, Interface: "eth1", Uid: 1}
	for _, state := range []meshnetv1.LinkState{meshnetv1.LinkState_LINK_STATE_UNSPECIFIED, meshnetv1.LinkState(7)} {
		_, err := s.SetRemoteState(t.Context(), &meshnetv1.SetRemoteStateRequest{End: end, State: state})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "state:") {
			t.Errorf("SetRemoteState with state %v: %v, want InvalidArgument naming state", state, err)
		}
		resp, err := s.SetRemoteStates(t.Context(), &meshnetv1.SetRemoteStatesRequest{Ends: []*meshnetv1.SetRemoteStateRequest{{End: end, State: state}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetResults()[0].GetError(); !strings.Contains(got, "state:") {
			t.Errorf("SetRemoteStates with state %v: result error %q, want one naming state", state, got)
		}
	}
}
