package dataserver

import (
	"testing"

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

func TestThickness(t *testing.T) {
	for rate, want := range map[float64]float64{-1: 1, 0: 1, 500: 1, 1e3: 1, 1e4: 2.5, 1e6: 5.5, 1e9: 10, 1e12: 10} {
		if got := thickness(rate); got != want {
			t.Errorf("thickness(%v B/s) = %v, want %v", rate, got, want)
		}
	}
}
