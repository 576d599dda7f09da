package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	d, err := desiredState(topo, pod, nil, nil, nil)
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

// TestStatusOfWidePodsListsTheLinksNotUp: a Topology that would take more
// than 1 MiB with every link listed lists only the links not up as specified
// (with every link listed, 10,000 links' status and spec passed the API
// server's 2 MiB to etcd, and the status was never written), counts the
// rest, and keeps which fields the controller applied for every link.
func TestStatusOfWidePodsListsTheLinksNotUp(t *testing.T) {
	wide := func(n int) (*v1beta1.Topology, desired, map[string]*meshnetv1.LinkStatus) {
		var ls []v1beta1.Link
		kernel := map[string]*meshnetv1.LinkStatus{}
		for i := range n {
			intf := "e" + strconv.Itoa(i)
			ls = append(ls, v1beta1.Link{UID: i + 1, PeerPod: "r2", LocalIntf: intf, PeerIntf: intf, MTU: ptr.To[int32](1400)})
			kernel[intf] = &meshnetv1.LinkStatus{Interface: intf, Uid: uint32(i + 1), Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN,
				AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1400}
		}
		topo := topology(ls...)
		d, err := desiredState(topo, &corev1.Pod{}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return topo, d, kernel
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}}

	topo, d, kernel := wide(v1beta1.MaxLinks)
	delete(kernel, "e10")                                          // not wired yet
	kernel["e20"].AdminState = meshnetv1.LinkState_LINK_STATE_DOWN // down
	kernel["e30"].Carrier = false                                  // no carrier
	kernel["e40"].LastError = "set mtu 1400 on e40: device busy"   // failed
	st := convergedStatus(topo, pod, d, kernel, nil)
	var listed []string
	for _, l := range st.Links {
		listed = append(listed, l.LocalIntf)
	}
	if strings.Join(listed, ",") != "e10,e20,e30,e40" || st.OmittedLinks != v1beta1.MaxLinks-4 {
		t.Errorf("10,000 links, 4 not up: listed %v and %d omitted, want e10,e20,e30,e40 and 9996", listed, st.OmittedLinks)
	}
	if st.LinkCount != v1beta1.MaxLinks || st.DownLinks != 1 || len(st.Skipped) != 1 {
		t.Errorf("link_count %d, down_links %d, skipped %d: want 10000, 1, 1", st.LinkCount, st.DownLinks, len(st.Skipped))
	}
	if st.Managed == nil || len(st.Managed.MTU) != v1beta1.MaxLinks {
		t.Errorf("managed: %d links' mtu, want all 10,000", len(st.Managed.MTU))
	}
	topo.Status = st
	if !topo.AsSpecified(1) || topo.AsSpecified(11) || !slices.Equal(topo.LinkManagedFields(9999), []string{v1beta1.ManagedMTU}) {
		t.Errorf("AsSpecified(1) %v, AsSpecified(11) %v, managed fields of 9999 %v: want true, false, [mtu]",
			topo.AsSpecified(1), topo.AsSpecified(11), topo.LinkManagedFields(9999))
	}
	if data, _ := json.Marshal(st); len(data) > 100_000 {
		t.Errorf("status of 10,000 links, 4 not up: %d bytes, want under 100 kB", len(data))
	}

	// None wired yet: the first 1,024 listed, no link counted as specified.
	st = convergedStatus(topo, pod, d, nil, nil)
	if len(st.Links) != v1beta1.MaxListedUnconverged || len(st.Skipped) != v1beta1.MaxListedUnconverged || st.OmittedLinks != v1beta1.MaxLinks-v1beta1.MaxListedUnconverged {
		t.Errorf("10,000 links waiting: %d listed, %d skipped, %d omitted; want 1024, 1024, 8976", len(st.Links), len(st.Skipped), st.OmittedLinks)
	}
	topo.Status = st
	if topo.AsSpecified(v1beta1.MaxLinks) {
		t.Error("with 1,024 links listed, a link left out is said to be as specified")
	}

	// 4,096 links with addresses: the spec with every link listed stays
	// within 1 MiB; with the managedFields the API server records (every
	// field of every link named), it does not, and only the links not up
	// are listed.
	topo, d, kernel = wide(v1beta1.MaxLinksWithLinkLocal)
	fields := map[string]any{}
	for i := range topo.Spec.Links {
		l := &topo.Spec.Links[i]
		l.LocalIP, l.PeerIP = fmt.Sprintf("10.%d.%d.1/30", i/64, i%64*4), fmt.Sprintf("10.%d.%d.2/30", i/64, i%64*4)
		fields[fmt.Sprintf(`k:{"uid":%d}`, l.UID)] = map[string]any{".": struct{}{}, "f:uid": struct{}{}, "f:peer_pod": struct{}{},
			"f:local_intf": struct{}{}, "f:peer_intf": struct{}{}, "f:local_ip": struct{}{}, "f:peer_ip": struct{}{}, "f:mtu": struct{}{}}
	}
	if st := convergedStatus(topo, pod, d, kernel, nil); len(st.Links) != v1beta1.MaxLinksWithLinkLocal || st.OmittedLinks != 0 {
		t.Errorf("4,096 links, no managedFields: %d listed, %d omitted; want all listed", len(st.Links), st.OmittedLinks)
	}
	raw, err := json.Marshal(map[string]any{"f:spec": map[string]any{"f:links": fields}})
	if err != nil {
		t.Fatal(err)
	}
	topo.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}
	if st := convergedStatus(topo, pod, d, kernel, nil); len(st.Links) != 0 || st.OmittedLinks != v1beta1.MaxLinksWithLinkLocal {
		t.Errorf("4,096 links, managedFields of %d bytes: %d listed, %d omitted; want none listed, all omitted", len(raw), len(st.Links), st.OmittedLinks)
	}
}

// TestFarEndMissingIsNotReady: a VXLAN end has carrier whatever its far
// side has, so the far end's own node decides: a link whose far end that
// node does not have is pending, not Ready, and says so; one whose far end
// is up (or whose node cannot be read now) is as it was.
func TestFarEndMissingIsNotReady(t *testing.T) {
	topo := topology(v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth2"})
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}}
	d, err := desiredState(topo, pod, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kernel := map[string]*meshnetv1.LinkStatus{"eth1": {Interface: "eth1", Uid: 1, Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN,
		AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1450}}
	for _, c := range []struct {
		far   v1beta1.FarEnd
		ready metav1.ConditionStatus
	}{{v1beta1.FarEndMissing, metav1.ConditionFalse}, {v1beta1.FarEndUp, metav1.ConditionTrue}, {v1beta1.FarEndDown, metav1.ConditionTrue}, {"", metav1.ConditionTrue}} {
		d.farEnds = map[int]v1beta1.FarEnd{}
		if c.far != "" {
			d.farEnds[1] = c.far
		}
		st := convergedStatus(topo, pod, d, kernel, nil)
		ready := meta.FindStatusCondition(st.Conditions, v1beta1.ConditionReady)
		if ready.Status != c.ready || st.Links[0].FarEnd != c.far {
			t.Errorf("far end %q: Ready %s (%s), link far_end %q; want Ready %s", c.far, ready.Status, ready.Message, st.Links[0].FarEnd, c.ready)
		}
		if c.far == v1beta1.FarEndMissing && (ready.Reason != v1beta1.ReasonLinksPending || !strings.Contains(ready.Message, "eth1 (uid 1): its far end r2:eth2 is not made yet")) {
			t.Errorf("far end missing: Ready %s: %s, want LinksPending naming the far end", ready.Reason, ready.Message)
		}
	}
}

// TestFarEndChangedWakesThePeer: an end that comes, goes or changes its
// admin state wakes the pod at its far end, whose status says what its far
// end is; a change of anything else (carrier, counters, netem) does not.
func TestFarEndChangedWakesThePeer(t *testing.T) {
	end := func(state meshnetv1.LinkState, carrier bool) *meshnetv1.LinkStatus {
		return &meshnetv1.LinkStatus{Interface: "eth1", Uid: 1, AdminState: state, Carrier: carrier,
			Peer: &meshnetv1.Peer{Peer: &meshnetv1.Peer_Pod{Pod: &meshnetv1.PodPeer{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r2"}, Interface: "eth2"}}}}
	}
	up, down := meshnetv1.LinkState_LINK_STATE_UP, meshnetv1.LinkState_LINK_STATE_DOWN
	prev := &podView{links: map[string]*meshnetv1.LinkStatus{"eth1": end(up, true)}}
	for _, c := range []struct {
		name string
		prev *podView
		ev   *meshnetv1.WatchLinksResponse
		wake bool
	}{
		{"added", nil, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, Link: end(up, true)}, true},
		{"deleted", prev, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED, Link: end(up, true)}, true},
		{"taken down", prev, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, Link: end(down, false)}, true},
		{"carrier only", prev, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, Link: end(up, false)}, false},
		{"routes", prev, &meshnetv1.WatchLinksResponse{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES}, false},
	} {
		peer, wake := farEndChanged(c.prev, c.ev)
		if wake != c.wake || (wake && peer.String() != "lab/r2") {
			t.Errorf("%s: wakes %v (%s), want %v", c.name, wake, peer, c.wake)
		}
	}
}

// TestSegmentReadyOnlyWhenEveryPortIsInItsBridge: a pod with spec.bridge is
// Ready when the kernel has each of its link ends in the bridge, at one
// MTU; an end outside it, or ports of two MTUs, keep it pending, naming
// them.
func TestSegmentReadyOnlyWhenEveryPortIsInItsBridge(t *testing.T) {
	topo := topology(
		v1beta1.Link{UID: 1, PeerPod: "h1", LocalIntf: "p1", PeerIntf: "eth1"},
		v1beta1.Link{UID: 2, PeerPod: "h2", LocalIntf: "p2", PeerIntf: "eth1"})
	topo.Spec.Bridge = &v1beta1.Bridge{}
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}}
	d, err := desiredState(topo, pod, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	end := func(intf string, uid uint32, kind meshnetv1.LinkKind, mtu uint32, bridge string) *meshnetv1.LinkStatus {
		return &meshnetv1.LinkStatus{Interface: intf, Uid: uid, Kind: kind, AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: mtu, Bridge: bridge}
	}
	veth, vxlan := meshnetv1.LinkKind_LINK_KIND_VETH, meshnetv1.LinkKind_LINK_KIND_VXLAN
	for _, c := range []struct {
		name    string
		kernel  map[string]*meshnetv1.LinkStatus
		ready   metav1.ConditionStatus
		message string
	}{
		{"every port in br0", map[string]*meshnetv1.LinkStatus{"p1": end("p1", 1, veth, 1400, "br0"), "p2": end("p2", 2, vxlan, 1400, "br0")}, metav1.ConditionTrue, "2 links as specified"},
		{"a port outside", map[string]*meshnetv1.LinkStatus{"p1": end("p1", 1, veth, 1400, "br0"), "p2": end("p2", 2, vxlan, 1400, "")}, metav1.ConditionFalse, "p2 (uid 2): not a port of bridge br0 yet"},
		{"two MTUs", map[string]*meshnetv1.LinkStatus{"p1": end("p1", 1, veth, 1500, "br0"), "p2": end("p2", 2, vxlan, 1450, "br0")}, metav1.ConditionFalse, "the ports of bridge br0 differ in MTU (p2 1450, p1 1500)"},
	} {
		st := convergedStatus(topo, pod, d, c.kernel, nil)
		ready := meta.FindStatusCondition(st.Conditions, v1beta1.ConditionReady)
		if ready.Status != c.ready || !strings.Contains(ready.Message, c.message) {
			t.Errorf("%s: Ready %s: %s; want %s naming %q", c.name, ready.Status, ready.Message, c.ready, c.message)
		}
	}
}

// TestKernelBusyIsNotADaemonAway: meshnetd's UNAVAILABLE with the kernel
// busy ErrorInfo is told apart from one of a daemon that did not answer
// (a connection refused has no details).
func TestKernelBusyIsNotADaemonAway(t *testing.T) {
	busy, err := grpcstatus.New(codes.Unavailable, "apply pod lab/r1: results may be incomplete or inconsistent").
		WithDetails(&errdetails.ErrorInfo{Domain: meshnetv1.ErrorDomain, Reason: meshnetv1.ReasonKernelBusy})
	if err != nil {
		t.Fatal(err)
	}
	if !kernelBusy(busy.Err()) {
		t.Error("a busy kernel's UNAVAILABLE is not told as one")
	}
	if kernelBusy(grpcstatus.Error(codes.Unavailable, "connection refused")) {
		t.Error("a daemon away is told as a busy kernel")
	}
}

// TestWrittenStatusMatchesItsReadBack: the status the controller writes,
// and remembers writing, is the one the API server gives back (condition
// times to the second): a resync that finds the kernel as it was computes
// it again equal to both, and writes nothing. With transitions timed to
// the nanosecond, every Topology's status was written again at each
// resync (BenchmarkKernelSteadyState: 155 writes in a quiet minute of 200).
func TestWrittenStatusMatchesItsReadBack(t *testing.T) {
	topo := topology(v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth2"})
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-1"}}
	d, err := desiredState(topo, pod, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kernel := map[string]*meshnetv1.LinkStatus{"eth1": {Interface: "eth1", Uid: 1, Kind: meshnetv1.LinkKind_LINK_KIND_VETH,
		AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1500}}
	written := convergedStatus(topo, pod, d, kernel, nil)
	data, err := json.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &topo.Status); err != nil {
		t.Fatal(err)
	}
	again := convergedStatus(topo, pod, d, kernel, nil)
	if !sameStatus(written, again) || !sameStatus(topo.Status, again) {
		t.Errorf("the status recomputed from its read-back differs from the one written:\n%+v\n%+v", written.Conditions, again.Conditions)
	}
}
