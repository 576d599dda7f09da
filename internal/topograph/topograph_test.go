package topograph_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/restapi"
	"github.com/meshnet/meshnet/internal/topograph"
	"github.com/meshnet/meshnet/internal/topograph/topographtest"
)

func readyPod(name, node, hostIP string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lab"},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: hostIP,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func conditions(ready bool) []metav1.Condition {
	s := metav1.ConditionFalse
	if ready {
		s = metav1.ConditionTrue
	}
	return []metav1.Condition{{Type: v1beta1.ConditionReady, Status: s, Reason: "Test"}}
}

// lab is r1 and r2 on node-a (veth), r3 on node-b (vxlan from r1), r1 to a
// physical switch, r2 to a host NIC; r3's Topology names a pod that is gone.
func lab() topograph.Graph {
	up := v1beta1.LinkUp
	topo := func(name, node string, links []v1beta1.Link, status []v1beta1.LinkStatus) v1beta1.Topology {
		return v1beta1.Topology{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lab"},
			Spec:       v1beta1.TopologySpec{Links: links},
			Status:     v1beta1.TopologyStatus{Node: node, Links: status, Conditions: conditions(true)},
		}
	}
	return topograph.Graph{
		Namespace: "lab",
		Topologies: []v1beta1.Topology{
			topo("r1", "node-a", []v1beta1.Link{
				{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1", Netem: &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("50ms")}},
				{UID: 2, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth1"},
				{UID: 3, PeerPod: "sw1", LocalIntf: "eth3", PeerIntf: "Ethernet1",
					LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "192.0.2.50", VNI: 5001}},
			}, []v1beta1.LinkStatus{
				{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVeth, State: up, Carrier: true, MTU: 1500},
				{UID: 2, LocalIntf: "eth2", Kind: v1beta1.LinkKindVXLAN, State: up, Carrier: true, MTU: 1450},
				{UID: 3, LocalIntf: "eth3", Kind: v1beta1.LinkKindPhy, State: up, Carrier: true, MTU: 1450,
					Physical: &v1beta1.PhysicalPeer{VNI: 5001, LocalVTEP: "198.51.100.1", RemoteVTEP: "192.0.2.50", UDPPort: 4789}},
			}),
			topo("r2", "node-a", []v1beta1.Link{
				{UID: 1, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1"},
				{UID: 4, PeerPod: "localhost", LocalIntf: "eth2", PeerIntf: "ens4"},
			}, []v1beta1.LinkStatus{
				{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVeth, State: up, Carrier: true, MTU: 1500},
				{UID: 4, LocalIntf: "eth2", Kind: v1beta1.LinkKindMacvlan, State: up, Carrier: true, MTU: 1500},
			}),
			topo("r3", "node-b", []v1beta1.Link{
				{UID: 2, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth2"},
				{UID: 5, PeerPod: "r9", LocalIntf: "eth2", PeerIntf: "eth1"},
			}, []v1beta1.LinkStatus{
				{UID: 2, LocalIntf: "eth1", Kind: v1beta1.LinkKindVXLAN, State: up, Carrier: true, MTU: 1450},
			}),
		},
		Pods: map[string]*corev1.Pod{
			"r1": readyPod("r1", "node-a", "198.51.100.1"),
			"r2": readyPod("r2", "node-a", "198.51.100.1"),
			"r3": readyPod("r3", "node-b", "198.51.100.2"),
		},
		Live: map[topograph.End]topograph.Live{
			{"r1", "eth1"}: {BytesPerSecond: 1e6, Status: &meshnetv1.LinkStatus{
				Interface: "eth1", AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1500,
				Netem:    &meshnetv1.NetemSpec{Delay: durationpb.New(50 * time.Millisecond), Jitter: durationpb.New(5 * time.Millisecond), LossPercent: 0.5, RateBps: 100e6},
				Counters: &meshnetv1.LinkCounters{TxBytes: 1 << 40, RxBytes: 12345, TxPackets: 10, RxPackets: 11, TxDrops: 3},
			}},
		},
		Unavailable: map[string]string{"node-b": "meshnetd of node node-b did not answer within 500ms"},
	}
}

func byID[T interface{ GetId() string }](rows []T) map[string]T {
	m := map[string]T{}
	for _, r := range rows {
		m[r.GetId()] = r
	}
	return m
}

// row marshals m as the gateway does and decodes it as Grafana's JSON.
func row(t *testing.T, m proto.Message) map[string]any {
	t.Helper()
	b, err := restapi.DefaultMarshaler().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return out
}

func TestFramesFollowNodeGraphContract(t *testing.T) {
	nodes, edges := topograph.Frames(lab())
	ids := map[string]bool{}
	for _, n := range nodes {
		if ids[n.Id] {
			t.Errorf("node id %q twice", n.Id)
		}
		ids[n.Id] = true
		r := row(t, n)
		topographtest.CheckRow(t, n, r, topographtest.NodeColumns)
		if sum := n.ArcUp + n.ArcDown; sum != 0 && (sum < 0.999 || sum > 1.001) {
			t.Errorf("node %s: arc__ fields add up to %v, want 1 (or 0 for a node without links)", n.Id, sum)
		}
	}
	edgeIDs := map[string]bool{}
	for _, e := range edges {
		if edgeIDs[e.Id] {
			t.Errorf("edge id %q twice", e.Id)
		}
		edgeIDs[e.Id] = true
		topographtest.CheckRow(t, e, row(t, e), topographtest.EdgeColumns)
		if !ids[e.Source] || !ids[e.Target] {
			t.Errorf("edge %s: source %q / target %q is not a node id (Grafana fails on it)", e.Id, e.Source, e.Target)
		}
		if e.Thickness < 1 || e.Thickness > 10 {
			t.Errorf("edge %s: thickness %v outside 1..10", e.Id, e.Thickness)
		}
	}
	if len(nodes) != 6 || len(edges) != 5 {
		t.Errorf("got %d nodes %v and %d edges %v, want 6 (r1 r2 r3 r9 sw1 host) and 5 (one per link)", len(nodes), ids, len(edges), edgeIDs)
	}
}

// TestGraphResponseHasOneFrameEach: Node Graph takes the frame named nodes
// and the one named edges; GetNodeGraph must serve exactly those two.
func TestGraphResponseHasOneFrameEach(t *testing.T) {
	nodes, edges := topograph.Frames(lab())
	r := row(t, &meshnetv1.GetNodeGraphResponse{Nodes: nodes, Edges: edges})
	if len(r) != 2 {
		t.Fatalf("GetNodeGraph JSON has keys %v, want nodes and edges only", keys(r))
	}
	for _, k := range []string{"nodes", "edges"} {
		if rows, ok := r[k].([]any); !ok || len(rows) == 0 {
			t.Errorf("%s = %#v, want a non-empty array of rows", k, r[k])
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestFramesEdgeRows(t *testing.T) {
	nodes, edges := topograph.Frames(lab())
	e := byID(edges)
	n := byID(nodes)

	veth := e["r1:eth1--r2:eth1"]
	if veth == nil {
		t.Fatalf("no veth edge r1-r2 (drawn once, from r1, the smaller name); edges: %v", byID(edges))
	}
	if veth.DetailKind != "veth" || veth.DetailState != "up" || veth.Color != "green" || veth.DetailMtu != 1500 {
		t.Errorf("veth edge = %v", veth)
	}
	if veth.Mainstat != 50 || veth.Secondarystat != 0.5 || veth.DetailNetem != "delay 50ms 5ms loss 0.5% rate 100mbit" {
		t.Errorf("veth netem: mainstat %v secondarystat %v detail %q, want 50 (ms), 0.5 (%%), tc words", veth.Mainstat, veth.Secondarystat, veth.DetailNetem)
	}
	if veth.DetailTxBytes != 1<<40 || veth.DetailRxBytes != 12345 || veth.DetailTxDrops != 3 || veth.Thickness != 5.5 {
		t.Errorf("veth counters tx %v rx %v drops %v thickness %v, want 2^40, 12345, 3, 5.5 (1 MB/s)", veth.DetailTxBytes, veth.DetailRxBytes, veth.DetailTxDrops, veth.Thickness)
	}
	if e["r2:eth1--r1:eth1"] != nil {
		t.Error("the veth is drawn from both ends")
	}

	vx := e["r1:eth2--r3:eth1"]
	if vx == nil || vx.DetailKind != "vxlan" || vx.DetailMtu != 1450 || vx.Color != "green" {
		t.Errorf("vxlan edge = %v", vx)
	}
	if vx != nil && (vx.DetailError != "" || vx.Thickness != 1) {
		t.Errorf("vxlan edge from node-a, which answered: error %q thickness %v", vx.DetailError, vx.Thickness)
	}

	phy := e["r1:eth3--physical:sw1:Ethernet1"]
	if phy == nil || phy.DetailKind != "phy" || phy.DetailVni != 5001 || phy.Target != "physical:sw1" {
		t.Errorf("phy edge = %v", phy)
	}
	if sw := n["physical:sw1"]; sw == nil || sw.DetailKind != "physical" || sw.DetailVtep != "192.0.2.50" || sw.Color != "green" {
		t.Errorf("physical node = %v", sw)
	}

	mv := e["r2:eth2--host:node-a:ens4:ens4"]
	if mv == nil || mv.DetailKind != "macvlan" {
		t.Errorf("macvlan edge = %v; edges %v", mv, byID(edges))
	}

	// r3's end on node-b has no live data: the edge says why.
	pend := e["r3:eth2--r9:eth1"]
	if pend == nil || pend.DetailState != "pending" || pend.Color != "gray" || pend.StrokeDasharray == "" {
		t.Fatalf("edge to the missing pod r9 = %v, want pending, gray, dashed", pend)
	}
	if !strings.Contains(pend.DetailError, "no live counters: meshnetd of node node-b did not answer") {
		t.Errorf("detail__error = %q, want it to say node-b's counters are missing", pend.DetailError)
	}
}

func TestFramesNodeRows(t *testing.T) {
	nodes, _ := topograph.Frames(lab())
	n := byID(nodes)
	r1 := n["r1"]
	if r1.Subtitle != "node-a" || r1.DetailNode != "node-a" || r1.DetailPhase != "Running" || r1.DetailVtep != "198.51.100.1" ||
		r1.DetailKind != "pod" || r1.DetailNamespace != "lab" {
		t.Errorf("r1 = %v", r1)
	}
	if r1.Color != "green" || r1.Mainstat != 3 || r1.Secondarystat != 3 || r1.ArcUp != 1 || r1.ArcDown != 0 {
		t.Errorf("r1 colour %s mainstat %v/%v arcs %v/%v, want green, 3 of 3 up", r1.Color, r1.Mainstat, r1.Secondarystat, r1.ArcUp, r1.ArcDown)
	}
	// r3 is ready, one of its two links waits for r9: arcs split.
	if r3 := n["r3"]; r3.Color != "green" || r3.ArcUp != 0.5 || r3.ArcDown != 0.5 {
		t.Errorf("r3 colour %s arcs %v/%v, want green, 0.5/0.5", r3.Color, r3.ArcUp, r3.ArcDown)
	}
	r9 := n["r9"]
	if r9 == nil || r9.Color != "red" || r9.DetailPhase != "Missing" || r9.ArcDown != 1 || !r9.Highlighted {
		t.Errorf("r9 (no pod, no Topology) = %v, want red, Missing, arc__down 1", r9)
	}
}

func TestPodGoneTurnsNodeRed(t *testing.T) {
	g := lab()
	delete(g.Pods, "r2")
	nodes, edges := topograph.Frames(g)
	r2 := byID(nodes)["r2"]
	if r2.Color != "red" || r2.ArcUp != 0 || r2.ArcDown != 1 || r2.Mainstat != 0 || r2.DetailPhase != "Missing" {
		t.Errorf("r2 after its pod is deleted = %v, want red with arc__down 1", r2)
	}
	if e := byID(edges)["r2:eth2--host:node-a:ens4:ens4"]; e == nil || e.Color == "green" {
		t.Errorf("r2's macvlan after its pod is deleted = %v, want not green", e)
	}

	g = lab()
	g.Pods["r2"].Status.Conditions[0].Status = corev1.ConditionFalse
	if r2 := byID(first(topograph.Frames(g)))["r2"]; r2.Color != "red" {
		t.Errorf("r2 not ready: colour %s, want red", r2.Color)
	}
	g = lab()
	g.Topologies[1].Status.Conditions = conditions(false)
	if r2 := byID(first(topograph.Frames(g)))["r2"]; r2.Color != "orange" {
		t.Errorf("r2 with its Topology not Ready: colour %s, want orange", r2.Color)
	}
}

func first(n []*meshnetv1.GraphNode, _ []*meshnetv1.GraphEdge) []*meshnetv1.GraphNode { return n }

func TestLinkDownTurnsEdgeRed(t *testing.T) {
	for name, change := range map[string]func(g *topograph.Graph){
		"status down": func(g *topograph.Graph) { g.Topologies[0].Status.Links[1].State = v1beta1.LinkDown },
		"peer status down": func(g *topograph.Graph) {
			g.Topologies[2].Status.Links[0].State = v1beta1.LinkDown
		},
		"kernel down": func(g *topograph.Graph) {
			g.Live[topograph.End{"r1", "eth2"}] = topograph.Live{BytesPerSecond: -1, Status: &meshnetv1.LinkStatus{AdminState: meshnetv1.LinkState_LINK_STATE_DOWN}}
		},
	} {
		g := lab()
		change(&g)
		e := byID(second(topograph.Frames(g)))["r1:eth2--r3:eth1"]
		if e.DetailState != "down" || e.Color != "red" || !e.Highlighted || e.StrokeDasharray != "5,5" {
			t.Errorf("%s: edge = state %s colour %s highlighted %t dash %q, want down, red, highlighted, dashed",
				name, e.DetailState, e.Color, e.Highlighted, e.StrokeDasharray)
		}
	}
	g := lab()
	g.Live[topograph.End{"r1", "eth1"}].Status.Carrier = false
	if e := byID(second(topograph.Frames(g)))["r1:eth1--r2:eth1"]; e.DetailState != "no-carrier" || e.Color != "red" {
		t.Errorf("veth without carrier: state %s colour %s, want no-carrier, red", e.DetailState, e.Color)
	}
	g = lab()
	g.Topologies[0].Status.Links[2].LastError = "vxlan: parent for 198.51.100.1 not found"
	nodes, edges := topograph.Frames(g)
	e := byID(edges)["r1:eth3--physical:sw1:Ethernet1"]
	if e.DetailState != "failed" || e.Color != "red" || e.DetailError != "vxlan: parent for 198.51.100.1 not found" {
		t.Errorf("failed link: %v", e)
	}
	if r1 := byID(nodes)["r1"]; r1.Color != "red" || !r1.Highlighted {
		t.Errorf("r1 with a failed link: colour %s highlighted %t, want red, highlighted", r1.Color, r1.Highlighted)
	}
}

// TestEdgeNamesItsFaults: an edge names the LinkFaults that either end's
// status says hold it, each once.
func TestEdgeNamesItsFaults(t *testing.T) {
	g := lab()
	g.Topologies[0].Status.Links[1].Faults = []string{"outage", "cut"}
	g.Topologies[2].Status.Links[0].Faults = []string{"cut"}
	edges := byID(second(topograph.Frames(g)))
	if got := edges["r1:eth2--r3:eth1"].DetailFaults; got != "cut, outage" {
		t.Errorf("r1:eth2--r3:eth1 detail__faults %q, want %q", got, "cut, outage")
	}
	if got := edges["r1:eth1--r2:eth1"].DetailFaults; got != "" {
		t.Errorf("r1:eth1--r2:eth1, held by none: detail__faults %q", got)
	}
}

func second(_ []*meshnetv1.GraphNode, e []*meshnetv1.GraphEdge) []*meshnetv1.GraphEdge { return e }

func TestLinkDrawnFromItsOnlyDeclaredEnd(t *testing.T) {
	g := lab()
	g.Topologies = g.Topologies[1:] // r1's Topology is gone; r2 and r3 still name r1
	_, edges := topograph.Frames(g)
	e := byID(edges)
	if e["r2:eth1--r1:eth1"] == nil || e["r3:eth1--r1:eth2"] == nil {
		t.Errorf("edges %v, want r2's and r3's ends drawn from their side", e)
	}
}

// bigLab is n links: pods in a ring of n/2 pairs over 50 nodes, each link
// declared at both ends, with status and live counters at every end.
func bigLab(n int) topograph.Graph {
	g := topograph.Graph{Namespace: "lab", Pods: map[string]*corev1.Pod{}, Live: map[topograph.End]topograph.Live{}, Unavailable: map[string]string{}}
	pods := n / 2
	name := func(i int) string { return fmt.Sprintf("r%05d", i%pods) }
	links := make([][]v1beta1.Link, pods)
	stats := make([][]v1beta1.LinkStatus, pods)
	for l := range n {
		a, b := l%pods, (l/2+l%pods+1)%pods
		if a == b {
			b = (b + 1) % pods
		}
		ia, ib := fmt.Sprintf("e%d", len(links[a])), fmt.Sprintf("e%d", len(links[b]))
		links[a] = append(links[a], v1beta1.Link{UID: l, PeerPod: name(b), LocalIntf: ia, PeerIntf: ib,
			Netem: &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("10ms"), Loss: ptr.To[v1beta1.Percent]("1%")}})
		links[b] = append(links[b], v1beta1.Link{UID: l, PeerPod: name(a), LocalIntf: ib, PeerIntf: ia})
		for _, x := range []struct {
			pod  int
			intf string
		}{{a, ia}, {b, ib}} {
			stats[x.pod] = append(stats[x.pod], v1beta1.LinkStatus{UID: l, LocalIntf: x.intf, Kind: v1beta1.LinkKindVXLAN,
				State: v1beta1.LinkUp, Carrier: true, MTU: 1450})
			g.Live[topograph.End{name(x.pod), x.intf}] = topograph.Live{BytesPerSecond: float64(l), Status: &meshnetv1.LinkStatus{
				Interface: x.intf, AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1450,
				Netem:    &meshnetv1.NetemSpec{Delay: durationpb.New(10 * time.Millisecond), LossPercent: 1},
				Counters: &meshnetv1.LinkCounters{TxBytes: uint64(l) * 1000, RxBytes: uint64(l) * 900},
				ReadTime: timestamppb.Now(),
			}}
		}
	}
	for i := range pods {
		node := fmt.Sprintf("node-%02d", i%50)
		g.Topologies = append(g.Topologies, v1beta1.Topology{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: "lab"},
			Spec:       v1beta1.TopologySpec{Links: links[i]},
			Status:     v1beta1.TopologyStatus{Node: node, Links: stats[i], Conditions: conditions(true)},
		})
		g.Pods[name(i)] = readyPod(name(i), node, "10.0.0.1")
	}
	return g
}

func TestBigLabHasOneEdgePerLink(t *testing.T) {
	nodes, edges := topograph.Frames(bigLab(5000))
	if len(edges) != 5000 || len(nodes) != 2500 {
		t.Fatalf("got %d edges and %d nodes, want 5000 and 2500", len(edges), len(nodes))
	}
}

// BenchmarkEdgesFrame5000 builds the frames of a 5,000-link namespace (2,500
// pods, each link declared at both ends, live counters at every end); the
// target is 50 ms.
func BenchmarkEdgesFrame5000(b *testing.B) {
	g := bigLab(5000)
	b.ReportAllocs()
	for b.Loop() {
		_, edges := topograph.Frames(g)
		if len(edges) != 5000 {
			b.Fatalf("%d edges", len(edges))
		}
	}
}

// BenchmarkEdgesJSON5000 is the edges endpoint's work for 5,000 links: the
// frame and its JSON as the gateway writes it.
func BenchmarkEdgesJSON5000(b *testing.B) {
	g := bigLab(5000)
	m := restapi.DefaultMarshaler()
	b.ReportAllocs()
	for b.Loop() {
		_, edges := topograph.Frames(g)
		if _, err := m.Marshal(&meshnetv1.ListGraphEdgesResponse{Edges: edges}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEdgeEnds: a clicked edge shows both ends of a pod-to-pod link (each as
// its node's kernel has it, or why not), one end for a physical peer, and
// nothing for an id the graph does not have.
func TestEdgeEnds(t *testing.T) {
	g := lab()
	g.Live[topograph.End{"r2", "eth1"}] = topograph.Live{Status: &meshnetv1.LinkStatus{Interface: "eth1", Mtu: 1500, Addresses: []string{"10.0.0.2/30"}}}
	e, ends := topograph.EdgeEnds(g, "r1:eth1--r2:eth1")
	if e == nil || len(ends) != 2 {
		t.Fatalf("veth edge: %v with %d ends, want the edge and 2 ends", e, len(ends))
	}
	if s, d := ends[0], ends[1]; s.Pod != "r1" || s.Interface != "eth1" || s.Node != "node-a" || s.GetLink().GetCounters().GetTxBytes() != 1<<40 ||
		d.Pod != "r2" || d.GetLink().GetAddresses()[0] != "10.0.0.2/30" || s.Error != "" || d.Error != "" {
		t.Errorf("veth ends: %v; %v, want r1's and r2's kernel readings", s, d)
	}
	if e.DetailRateBps != 8e6 {
		t.Errorf("rate %v bit/s, want 8e6 (1 MB/s)", e.DetailRateBps)
	}

	_, ends = topograph.EdgeEnds(g, "r1:eth2--r3:eth1")
	if len(ends) != 2 || ends[0].Link != nil || !strings.Contains(ends[0].Error, "node-a reports no interface eth2") ||
		!strings.Contains(ends[1].Error, "no reading from node node-b: meshnetd of node node-b did not answer") {
		t.Errorf("vxlan ends without readings: %v, want why each is missing", ends)
	}
	if _, ends = topograph.EdgeEnds(g, "r1:eth3--physical:sw1:Ethernet1"); len(ends) != 1 || ends[0].Pod != "r1" {
		t.Errorf("physical peer: %v, want r1's end alone", ends)
	}
	if e, ends := topograph.EdgeEnds(g, "r1:eth9--r2:eth9"); e != nil || ends != nil {
		t.Errorf("unknown id: %v %v, want nil", e, ends)
	}
}

// TestLinkLeftOutOfAWideStatusIsUp: past 4,096 links a Topology's status
// lists only the links not up as specified; a link it leaves out is drawn
// up, not pending.
func TestLinkLeftOutOfAWideStatusIsUp(t *testing.T) {
	g := lab()
	g.Topologies[2].Status.Links = nil // r3: eth1 (uid 2) not listed
	if e := byID(second(topograph.Frames(g)))["r1:eth2--r3:eth1"]; e.DetailState != "pending" {
		t.Fatalf("r3's end unknown: state %s, want pending", e.DetailState)
	}
	g.Topologies[2].Status.OmittedLinks = 2
	if e := byID(second(topograph.Frames(g)))["r1:eth2--r3:eth1"]; e.DetailState != "up" || e.Color != "green" {
		t.Errorf("r3's end left out as up as specified: state %s colour %s, want up, green", e.DetailState, e.Color)
	}
}
