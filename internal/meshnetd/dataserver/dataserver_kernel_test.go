//go:build kernel

package dataserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver/dataservertest"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// TestKernelLiveCounters wires real veth pairs on two emulated nodes, each
// with its own meshnetd LinkService, and reads the Node Graph from node-a's
// DataService: node-a's counters in process, node-b's over gRPC found through
// its EndpointSlice, node-c's meshnetd down. Traffic thickens an edge; a
// cable pull turns it red at the next refresh.
func TestKernelLiveCounters(t *testing.T) {
	labA, labB := podlinkstest.NewLab(t), podlinkstest.NewLab(t)
	labA.Veth("lab", 1, podlinkstest.End{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, podlinkstest.End{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	labB.Veth("lab", 2, podlinkstest.End{Pod: "r3", Intf: "eth1", Addr: "10.0.1.1/30"}, podlinkstest.End{Pod: "r4", Intf: "eth1", Addr: "10.0.1.2/30"})
	stackA := podlinkstest.Start(t, podlinkstest.Options{Pods: labA.Store, Node: "node-a"})
	stackB := podlinkstest.Start(t, podlinkstest.Options{Pods: labB.Store, Node: "node-b"})

	h := dataservertest.Start(t, "node-a", stackA.Links.LinkServer())
	h.Daemon("node-b", "192.0.2.2", stackB.GRPCAddr)
	h.Daemon("node-c", "192.0.2.3", dataservertest.ClosedAddr(t))
	for _, p := range []struct{ pod, node, peer string }{
		{"r1", "node-a", "r2"}, {"r2", "node-a", "r1"}, {"r3", "node-b", "r4"}, {"r4", "node-b", "r3"},
		{"r5", "node-c", "r6"}, {"r6", "node-c", "r5"},
	} {
		h.Pod(p.pod, p.node, "198.51.100.1")
		uid := map[string]int{"r1": 1, "r2": 1, "r3": 2, "r4": 2, "r5": 3, "r6": 3}[p.pod]
		h.Topology(p.pod, p.node, []v1beta1.Link{{UID: uid, PeerPod: p.peer, LocalIntf: "eth1", PeerIntf: "eth1"}},
			[]v1beta1.LinkStatus{dataservertest.Up(uid, "eth1", v1beta1.LinkKindVeth, 1500)})
	}
	h.Eventually("pods and topologies in the cache", func() bool {
		var pods corev1.PodList
		var topos v1beta1.TopologyList
		return h.Cache.List(h.Ctx, &pods, client.InNamespace(dataservertest.Namespace)) == nil && h.Cache.List(h.Ctx, &topos, client.InNamespace(dataservertest.Namespace)) == nil &&
			len(pods.Items) == 6 && len(topos.Items) == 6 && len(topos.Items[5].Status.Links) == 1
	})

	r1, r3 := labA.Pod("lab", "r1"), labB.Pod("lab", "r3")
	for n, dst := range map[*links.Netns]string{r1: "10.0.0.2", r3: "10.0.1.2"} {
		if ok, out := podlinkstest.Ping(n, dst, 3); !ok {
			t.Fatalf("ping %s: %s", dst, out)
		}
	}
	_, edges := h.Graph()
	kernel, err := links.ReadLink(r1, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	local, remote, down := edges["r1:eth1--r2:eth1"], edges["r3:eth1--r4:eth1"], edges["r5:eth1--r6:eth1"]
	if tx := local["detail__tx_bytes"].(float64); tx == 0 || tx > float64(kernel.Counters.TxBytes) || local["detail__tx_packets"].(float64) < 3 {
		t.Errorf("node-a edge: tx %v bytes %v packets, want the kernel's (now %d bytes)", tx, local["detail__tx_packets"], kernel.Counters.TxBytes)
	}
	if remote["detail__tx_bytes"].(float64) == 0 || remote["detail__rx_packets"].(float64) < 3 || remote["detail__error"] != "" {
		t.Errorf("node-b edge (over gRPC): %v, want node-b's kernel counters", remote)
	}
	if msg, _ := down["detail__error"].(string); msg == "" || local["detail__error"] != "" {
		t.Errorf("node-c edge detail__error %q (node-a's %q): want node-c's silence reported on its edge only", msg, local["detail__error"])
	}
	t.Logf("node-a edge: tx %v rx %v bytes; node-b edge: tx %v bytes; node-c edge: %q",
		local["detail__tx_bytes"], local["detail__rx_bytes"], remote["detail__tx_bytes"], down["detail__error"])

	// A clicked edge: both ends as their kernels have them, the far one
	// over gRPC from node-b; the id's colons travel in the REST path as is
	// and percent-encoded (as the page's encodeURIComponent sends them).
	for _, path := range []string{"/v1/namespaces/lab/graph/edges/r3:eth1--r4:eth1", "/v1/namespaces/lab/graph/edges/r3%3Aeth1--r4%3Aeth1"} {
		detail := h.Get(path, http.StatusOK)
		ends, _ := detail["ends"].([]any)
		if len(ends) != 2 {
			t.Fatalf("GET %s: %v, want the edge and 2 ends", path, detail)
		}
		for i, want := range []string{"10.0.1.1/30", "10.0.1.2/30"} {
			end := ends[i].(map[string]any)
			link, _ := end["link"].(map[string]any)
			if addrs, _ := link["addresses"].([]any); len(addrs) != 1 || addrs[0] != want || end["node"] != "node-b" || end["error"] != "" {
				t.Errorf("GET %s: end %d = %v, want node-b's kernel reading with %s", path, i, end, want)
			}
		}
	}
	h.Get("/v1/namespaces/lab/graph/edges/r3:eth9--r4:eth9", http.StatusNotFound)

	// Traffic thickens the edge (a rate between two readings, after the
	// first one's cache time).
	start := time.Now()
	if out, err := netnstest.Run(r1.Path(), "ping", "-f", "-c", "3000", "-s", "1200", "-W", "1", "10.0.0.2"); err != nil {
		t.Fatalf("flood ping: %v\n%s", err, out)
	}
	time.Sleep(time.Until(start.Add(1100 * time.Millisecond)))
	_, edges = h.Graph()
	if th := edges["r1:eth1--r2:eth1"]["thickness"].(float64); th <= 1 {
		t.Errorf("thickness after %.1f MB: %v, want more than 1", edges["r1:eth1--r2:eth1"]["detail__tx_bytes"].(float64)/1e6, th)
	} else {
		t.Logf("thickness after the flood: %v", th)
	}

	// A cable pull through LinkService: red at the next refresh, before
	// anyone writes the Topology status.
	if _, err := stackA.Links.LinkServer().SetLinkState(context.Background(), &meshnetv1.SetLinkStateRequest{
		Namespace: "lab", Pod: "r1", Interface: "eth1", State: meshnetv1.LinkState_LINK_STATE_DOWN}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the live cache's TTL
	_, edges = h.Graph()
	if e := edges["r1:eth1--r2:eth1"]; e["color"] != "red" || e["detail__state"] != "down" {
		t.Errorf("edge after the cable pull: colour %v state %v, want red, down", e["color"], e["detail__state"])
	}
	h.Get("/v1/namespaces/lab/graph/edges", http.StatusOK)
}
