package controller

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestKeepZeroValuesAppliesFalseCarrier checks that a link without carrier
// is applied as carrier: false, not left out (which would keep meshnetd's
// value from the CNI ADD).
func TestKeepZeroValuesAppliesFalseCarrier(t *testing.T) {
	st := v1beta1.TopologyStatus{Links: []v1beta1.LinkStatus{{UID: 1, LocalIntf: "eth1", State: v1beta1.LinkDown}}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1beta1.Topology{Status: st})
	if err != nil {
		t.Fatal(err)
	}
	keepZeroValues(u, st)
	status := u["status"].(map[string]any)
	l := status["links"].([]any)[0].(map[string]any)
	if c, ok := l["carrier"]; !ok || c != false {
		t.Errorf("carrier = %v (present %v), want false", c, ok)
	}
	if e, ok := l["last_error"]; !ok || e != "" {
		t.Errorf("last_error = %v (present %v), want empty", e, ok)
	}
	if d, ok := status["down_links"]; !ok || d != int64(0) {
		t.Errorf("down_links = %v (present %v), want 0", d, ok)
	}
}

// TestUnchangedSkipsOnlyWritesThatChangeNothing checks the resync case (the
// kernel as the status says: no write) and that a change of a link or of a
// condition is written.
func TestUnchangedSkipsOnlyWritesThatChangeNothing(t *testing.T) {
	topo := topology(v1beta1.Link{UID: 1, LocalIntf: "eth1", State: ptr.To(v1beta1.LinkDown)})
	pod := &corev1.Pod{}
	pod.UID, pod.Spec.NodeName = "u1", "node-0"
	d, err := desiredState(topo, pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	kernel := func(state meshnetv1.LinkState, lastError string) map[string]*meshnetv1.LinkStatus {
		return map[string]*meshnetv1.LinkStatus{"eth1": {
			Interface: "eth1", Kind: meshnetv1.LinkKind_LINK_KIND_VETH, AdminState: state, Mtu: 1500, LastError: lastError,
		}}
	}
	topo.Status = convergedStatus(topo, pod, d, kernel(meshnetv1.LinkState_LINK_STATE_DOWN, ""), nil)
	topo.Status.SrcIP, topo.Status.ContainerID = "10.0.0.1", "c1" // meshnetd's, not the controller's
	if st := convergedStatus(topo, pod, d, kernel(meshnetv1.LinkState_LINK_STATE_DOWN, ""), nil); !unchanged(topo, st) {
		t.Errorf("the same kernel state again is a change:\nhave %+v\nnew  %+v", topo.Status, st)
	}
	if st := convergedStatus(topo, pod, d, kernel(meshnetv1.LinkState_LINK_STATE_UP, ""), nil); unchanged(topo, st) {
		t.Error("a link found up is no change")
	}
	if st := convergedStatus(topo, pod, d, kernel(meshnetv1.LinkState_LINK_STATE_DOWN, "busy"), nil); unchanged(topo, st) {
		t.Error("Ready turning False is no change")
	}
}

// TestConditionsOfWidePodsFitTheAPIServer: a pod of 10,000 links, all
// waiting for their peer, gets a Ready condition whose message names the
// first ones and counts the rest, within the API server's 32,768
// characters (named one by one, "not wired yet" each, it was 327,782, and the
// API server refused the status).
func TestConditionsOfWidePodsFitTheAPIServer(t *testing.T) {
	topo := &v1beta1.Topology{}
	topo.Generation = 1
	for i := range v1beta1.MaxLinks {
		topo.Spec.Links = append(topo.Spec.Links, v1beta1.Link{UID: i + 1, PeerPod: "r2", LocalIntf: "e" + strconv.Itoa(i), PeerIntf: "e" + strconv.Itoa(i)})
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}}
	st := convergedStatus(topo, pod, desired{}, nil, nil)
	for _, c := range st.Conditions {
		if len(c.Message) > 32768 {
			t.Errorf("%s: message of %d characters, past the API server's 32,768", c.Type, len(c.Message))
		}
		if c.Type == v1beta1.ConditionReady && !strings.HasSuffix(c.Message, "; and 9980 more links wait") {
			t.Errorf("Ready: %.200s ... %s, want the first 20 named and the rest counted", c.Message, c.Message[max(0, len(c.Message)-60):])
		}
	}
}
