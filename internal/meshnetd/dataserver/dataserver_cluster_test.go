//go:build cluster

package dataserver_test

import (
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver/dataservertest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// emptyLinkServer is node-a's real LinkService with no pods wired on it:
// it answers ListLinks, with nothing.
func emptyLinkServer(t *testing.T) meshnetv1.LinkServiceServer {
	store, err := podstore.Open(filepath.Join(t.TempDir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := podlinks.New(podlinks.Config{NodeName: "node-a", NodeIP: netip.MustParseAddr("127.0.0.1"), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.LinkServer()
}

// TestClusterNodeGraph serves a lab of three pods on two nodes from a real
// API server's cache and follows it through a pod deletion and a link going
// down; node-b's meshnetd is down throughout.
func TestClusterNodeGraph(t *testing.T) {
	h := dataservertest.Start(t, "node-a", emptyLinkServer(t))
	h.Daemon("node-b", "192.0.2.2", dataservertest.ClosedAddr(t))

	h.Pod("r1", "node-a", "198.51.100.1")
	h.Pod("r2", "node-a", "198.51.100.1")
	h.Pod("r3", "node-b", "198.51.100.2")
	h.Topology("r1", "node-a", []v1beta1.Link{
		{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"},
		{UID: 2, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth1"},
	}, []v1beta1.LinkStatus{dataservertest.Up(1, "eth1", v1beta1.LinkKindVeth, 1500), dataservertest.Up(2, "eth2", v1beta1.LinkKindVXLAN, 1450)})
	h.Topology("r2", "node-a", []v1beta1.Link{{UID: 1, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1"}},
		[]v1beta1.LinkStatus{dataservertest.Up(1, "eth1", v1beta1.LinkKindVeth, 1500)})
	h.Topology("r3", "node-b", []v1beta1.Link{
		{UID: 2, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth2"},
		{UID: 3, PeerPod: "sw1", LocalIntf: "eth2", PeerIntf: "Ethernet1", LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "192.0.2.50", VNI: 5001}},
	}, []v1beta1.LinkStatus{dataservertest.Up(2, "eth1", v1beta1.LinkKindVXLAN, 1450), dataservertest.Up(3, "eth2", v1beta1.LinkKindPhy, 1450)})
	for _, name := range []string{"r1", "r2", "r3"} {
		var topo v1beta1.Topology
		if err := h.Env.Client.Get(h.Ctx, objectKey(name), &topo); err != nil {
			t.Fatal(err)
		}
		h.Synced(&topo)
		var pod corev1.Pod
		if err := h.Env.Client.Get(h.Ctx, objectKey(name), &pod); err != nil {
			t.Fatal(err)
		}
		h.Synced(&pod)
	}

	nodes, edges := h.Graph()
	if len(nodes) != 4 || len(edges) != 3 {
		t.Fatalf("nodes %v edges %v, want r1 r2 r3 physical:sw1 and one edge per link", keys2(nodes), keys2(edges))
	}
	for id, n := range nodes {
		if n["color"] != "green" {
			t.Errorf("node %s colour %v, want green", id, n["color"])
		}
	}
	if n := nodes["r3"]; n["subtitle"] != "node-b" || n["detail__vtep"] != "198.51.100.2" || n["detail__phase"] != "Running" {
		t.Errorf("r3 = %v", n)
	}
	veth := edges["r1:eth1--r2:eth1"]
	if veth["detail__kind"] != "veth" || veth["detail__mtu"] != 1500.0 || veth["color"] != "green" || veth["detail__error"] != "" {
		t.Errorf("veth = %v", veth)
	}
	// r3's end is on node-b, whose meshnetd is down: no counters, said so,
	// and the frame is still served.
	phy := edges["r3:eth2--physical:sw1:Ethernet1"]
	msg, _ := phy["detail__error"].(string)
	if !strings.Contains(msg, "no live counters") || !strings.Contains(msg, "node-b") {
		t.Errorf("edge from node-b: detail__error %q, want it to say node-b's meshnetd did not answer", msg)
	}
	t.Logf("edge from node-b: detail__error %q", msg)

	// A link set down turns its edge red at the next refresh.
	var r1 v1beta1.Topology
	if err := h.Env.Client.Get(h.Ctx, objectKey("r1"), &r1); err != nil {
		t.Fatal(err)
	}
	r1.Status.Links[1].State = v1beta1.LinkDown
	if err := h.Env.Client.Status().Update(h.Ctx, &r1); err != nil {
		t.Fatal(err)
	}
	h.Synced(&r1)
	_, edges = h.Graph()
	if e := edges["r1:eth2--r3:eth1"]; e["color"] != "red" || e["detail__state"] != "down" || e["strokeDasharray"] != "5,5" {
		t.Errorf("edge after the link went down = %v, want red, down, dashed", e)
	}

	// Deleting a pod turns its node red.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r2", Namespace: "lab"}}
	// At once: envtest runs no kubelet to finish a graceful deletion.
	if err := h.Env.Client.Delete(h.Ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	h.Gone(pod)
	nodes, edges = h.Graph()
	if n := nodes["r2"]; n["color"] != "red" || n["arc__down"] != 1.0 || n["detail__phase"] != "Missing" || n["highlighted"] != true {
		t.Errorf("r2 after its pod was deleted = %v, want red with arc__down 1", n)
	}
	if e := edges["r1:eth1--r2:eth1"]; e["color"] == "green" {
		t.Errorf("link to the deleted pod = %v, want not green", e)
	}
}

func objectKey(name string) client.ObjectKey { return client.ObjectKey{Namespace: "lab", Name: name} }

func keys2(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestClusterListTopologies(t *testing.T) {
	h := dataservertest.Start(t, "node-a", nil)
	h.Topology("r1", "node-a", []v1beta1.Link{{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1", LocalIP: "10.0.0.1/30"}},
		[]v1beta1.LinkStatus{dataservertest.Up(1, "eth1", v1beta1.LinkKindVeth, 1500)})
	h.Topology("r0", "node-a", nil, nil)
	var r1 v1beta1.Topology
	if err := h.Env.Client.Get(h.Ctx, objectKey("r1"), &r1); err != nil {
		t.Fatal(err)
	}
	h.Synced(&r1)
	h.Eventually("r0 in the cache", func() bool {
		return h.Cache.Get(h.Ctx, objectKey("r0"), &v1beta1.Topology{}) == nil
	})

	got := h.Get("/v1/namespaces/lab/topologies", http.StatusOK)
	list, _ := got["topologies"].([]any)
	if len(list) != 2 {
		t.Fatalf("topologies = %v, want r0 and r1", got)
	}
	first, second := list[0].(map[string]any), list[1].(map[string]any)
	if first["metadata"].(map[string]any)["name"] != "r0" || second["metadata"].(map[string]any)["name"] != "r1" {
		t.Errorf("topologies not ordered by name: %v", list)
	}
	if second["apiVersion"] != "networkop.co.uk/v1beta1" || second["kind"] != "Topology" {
		t.Errorf("r1 apiVersion %v kind %v", second["apiVersion"], second["kind"])
	}
	spec := second["spec"].(map[string]any)["links"].([]any)[0].(map[string]any)
	status := second["status"].(map[string]any)["links"].([]any)[0].(map[string]any)
	if spec["local_ip"] != "10.0.0.1/30" || spec["uid"] != 1.0 || status["kind"] != "veth" || status["mtu"] != 1500.0 {
		t.Errorf("r1 spec link %v status link %v: want the object's own field names and values", spec, status)
	}
	if _, ok := second["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("managedFields served")
	}

	h.Get("/v1/namespaces/Not_A_Namespace/graph", http.StatusBadRequest)
	if g := h.Get("/v1/namespaces/empty/graph", http.StatusOK); len(g["nodes"].([]any)) != 0 || len(g["edges"].([]any)) != 0 {
		t.Errorf("graph of an empty namespace = %v, want empty frames", g)
	}
}
