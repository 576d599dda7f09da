package dataserver

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// TestPolicyCoversEveryMethod: the auth interceptor refuses a method missing
// from every policy.
func TestPolicyCoversEveryMethod(t *testing.T) {
	methods := meshnetv1.File_meshnet_v1_data_proto.Services().ByName("DataService").Methods()
	for _, open := range []bool{true, false} {
		p := Policy(open)
		if len(p) != methods.Len() {
			t.Errorf("Policy(%t) has %d methods, DataService %d", open, len(p), methods.Len())
		}
		for i := range methods.Len() {
			name := "/meshnet.v1.DataService/" + string(methods.Get(i).Name())
			a, ok := p[name]
			switch {
			case !ok:
				t.Errorf("Policy(%t) lacks %s", open, name)
			case open && a.Verb != "":
				t.Errorf("Policy(true)[%s] = %+v, want open", name, a)
			case !open && (a.Verb != "list" || a.Resource != "topologies" || a.Namespace(&meshnetv1.GetNodeGraphRequest{Namespace: "lab"}) != "lab"):
				t.Errorf("Policy(false)[%s] = %+v, want list topologies in the request's namespace", name, a)
			}
		}
	}
}

func TestTCWords(t *testing.T) {
	for _, tc := range []struct {
		spec *meshnetv1.NetemSpec
		want string
	}{
		{&meshnetv1.NetemSpec{}, ""},
		{&meshnetv1.NetemSpec{LossPercent: 1}, "loss 1%"},
		{&meshnetv1.NetemSpec{Delay: durationpb.New(40 * time.Millisecond), Jitter: durationpb.New(5 * time.Millisecond),
			DelayCorrelationPercent: 25, Distribution: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL,
			LossPercent: 0.5, LossCorrelationPercent: 10, DuplicatePercent: 1, CorruptPercent: 0.1,
			ReorderPercent: 25, Gap: 5, RateBps: 1e9},
			"delay 40ms 5ms 25% distribution normal loss 0.5% 10% duplicate 1% corrupt 0.1% reorder 25% gap 5 rate 1gbit"},
	} {
		if got := tcWords(tc.spec); got != tc.want {
			t.Errorf("tcWords(%v) = %q, want %q", tc.spec, got, tc.want)
		}
	}
}

func TestThickness(t *testing.T) {
	for rate, want := range map[float64]float64{-1: 1, 0: 1, 500: 1, 1e3: 1, 1e4: 2.5, 1e6: 5.5, 1e9: 10, 1e12: 10} {
		if got := thickness(rate); got != want {
			t.Errorf("thickness(%v B/s) = %v, want %v", rate, got, want)
		}
	}
}
