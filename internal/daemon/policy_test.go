package daemon

import (
	"testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// TestPeerPolicyBatchNamespace: a batch of far ends is authorised in its
// ends' one namespace; ends of several namespaces need access in all of
// them, so that access in one cannot reach pods of another.
func TestPeerPolicyBatchNamespace(t *testing.T) {
	ns := PeerPolicy()[meshnetv1.PeerService_SetRemoteStates_FullMethodName].Namespace
	end := func(namespace string) *meshnetv1.SetRemoteStateRequest {
		return &meshnetv1.SetRemoteStateRequest{End: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: namespace, Name: "r2"}}}
	}
	for _, c := range []struct {
		ends []*meshnetv1.SetRemoteStateRequest
		want string
	}{
		{[]*meshnetv1.SetRemoteStateRequest{end("lab"), end("lab")}, "lab"},
		{[]*meshnetv1.SetRemoteStateRequest{end("lab"), end("prod")}, ""},
		{nil, ""},
	} {
		if got := ns(&meshnetv1.SetRemoteStatesRequest{Ends: c.ends}); got != c.want {
			t.Errorf("namespace of %v: %q, want %q", c.ends, got, c.want)
		}
	}
}
