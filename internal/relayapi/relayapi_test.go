package relayapi_test

import (
	"strings"
	"testing"

	"github.com/meshnet/meshnet/internal/relayapi"
	"github.com/meshnet/meshnet/internal/restapi"
)

// TestCaptureIsMeshnetdsPathBelowProxy: below the pod's proxy subresource
// a capture's path is meshnetd's own REST path.
func TestCaptureIsMeshnetdsPathBelowProxy(t *testing.T) {
	if !strings.HasSuffix(restapi.CapturePath, "/pods/{pod}/"+relayapi.ProxiedCapture) {
		t.Errorf("meshnetd's capture path %s does not end in /pods/{pod}/%s", restapi.CapturePath, relayapi.ProxiedCapture)
	}
	want := "/apis/meshnet.networkop.co.uk/v1alpha1/namespaces/lab/pods/r1/proxy/links/eth1/capture"
	if got := relayapi.CapturePath("lab", "r1", "eth1"); got != want {
		t.Errorf("CapturePath(lab, r1, eth1) = %s, want %s", got, want)
	}
}
