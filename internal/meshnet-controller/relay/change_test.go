package relay

import (
	"testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/access"
)

// TestRelayedShareAccess: the relay authorizes a change before reading its
// body, by changeAccess's rule, so every relayed call must have that rule
// in meshnetd's policy, and nothing else may be relayed.
func TestRelayedShareAccess(t *testing.T) {
	policy := access.Policy(false)
	want, ok := policy[changeAccess]
	if !ok {
		t.Fatalf("%s is not in meshnetd's policy", changeAccess)
	}
	for _, m := range meshnetv1.LinkService_ServiceDesc.Methods {
		method := "/" + meshnetv1.LinkService_ServiceDesc.ServiceName + "/" + m.MethodName
		got := policy[method]
		if relayed(method) && (got.Verb != want.Verb || got.Group != want.Group || got.Resource != want.Resource ||
			got.Subresource != want.Subresource || got.Authenticated != want.Authenticated) {
			t.Errorf("%s is relayed with access %s %s/%s, want %s %s/%s as %s", method, got.Verb, got.Group, got.Resource, want.Verb, want.Group, want.Resource, changeAccess)
		}
	}
	for _, m := range []string{meshnetv1.LinkService_ApplyPod_FullMethodName, meshnetv1.LinkService_GetLink_FullMethodName, meshnetv1.LinkService_CaptureLink_FullMethodName} {
		if relayed(m) {
			t.Errorf("%s is relayed as a runtime change", m)
		}
	}
}
