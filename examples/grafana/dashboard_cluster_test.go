//go:build cluster

package grafana

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver/dataservertest"
	"github.com/meshnet/meshnet/internal/topograph/topographtest"
)

// infinityGet runs an Infinity query as its backend does: the datasource's
// base URL and the query's URL with the dashboard variables replaced, GET,
// then the rows under root_selector (a plain key here, which GJSON selects
// as a map lookup does).
func infinityGet(t *testing.T, base string, q target) []map[string]any {
	t.Helper()
	if !regexp.MustCompile(`^[a-z]+$`).MatchString(q.RootSelector) {
		t.Fatalf("query %s: root_selector %q is not a plain key", q.RefID, q.RootSelector)
	}
	url := base + interpolate(q.URL, map[string]string{"namespace": dataservertest.Namespace})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("query %s: GET %s: %d %s", q.RefID, url, resp.StatusCode, body)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("query %s: GET %s: %v", q.RefID, url, err)
	}
	rows, ok := doc[q.RootSelector]
	if !ok || len(rows) == 0 {
		t.Fatalf("query %s: %s selects no rows of %s", q.RefID, q.RootSelector, body)
	}
	return rows
}

// circle is the colour Grafana's Node Graph draws a node's circle in (its
// ColorCircle): an arc whose value is 1 draws the whole circle in that arc's
// colour; with every arc 0 the color column is used; otherwise segments.
func circle(p *panel, row map[string]any) string {
	nonZero := 0
	for _, a := range p.Options.Nodes.Arcs {
		v, _ := row[a.Field].(float64)
		if v >= 1 {
			return a.Color
		}
		if v != 0 {
			nonZero++
		}
	}
	if nonZero == 0 {
		c, _ := row["color"].(string)
		return c
	}
	return "segments"
}

// TestClusterDashboardQueries runs every Infinity query of the dashboard
// against a DataService serving a lab from a real API server, checks the
// rows against what each panel reads, and follows a pod deletion and a link
// going down the way the Node Graph would draw them.
func TestClusterDashboardQueries(t *testing.T) {
	d := load(t)
	h := dataservertest.Start(t, "node-a", nil)
	h.Pod("r1", "node-a", "198.51.100.1")
	h.Pod("r2", "node-a", "198.51.100.1")
	h.Topology("r1", "node-a", []v1beta1.Link{
		{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"},
		{UID: 2, PeerPod: "sw1", LocalIntf: "eth2", PeerIntf: "Ethernet1", LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "192.0.2.50", VNI: 5001}},
	}, []v1beta1.LinkStatus{dataservertest.Up(1, "eth1", v1beta1.LinkKindVeth, 1500), dataservertest.Up(2, "eth2", v1beta1.LinkKindPhy, 1450)})
	h.Topology("r2", "node-a", []v1beta1.Link{{UID: 1, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1"}},
		[]v1beta1.LinkStatus{dataservertest.Up(1, "eth1", v1beta1.LinkKindVeth, 1500)})
	key := func(name string) client.ObjectKey {
		return client.ObjectKey{Namespace: dataservertest.Namespace, Name: name}
	}
	for _, name := range []string{"r1", "r2"} {
		var topo v1beta1.Topology
		if err := h.Env.Client.Get(h.Ctx, key(name), &topo); err != nil {
			t.Fatal(err)
		}
		h.Synced(&topo)
		var pod corev1.Pod
		if err := h.Env.Client.Get(h.Ctx, key(name), &pod); err != nil {
			t.Fatal(err)
		}
		h.Synced(&pod)
	}

	queries := d.targets(infinityType)
	if len(queries) != 3 {
		t.Fatalf("%d Infinity queries, want nodes, edges and the link table", len(queries))
	}
	for _, q := range queries {
		rows := infinityGet(t, h.URL, q)
		switch q.Format {
		case "node-graph-nodes":
			for _, r := range rows {
				topographtest.CheckRow(t, &meshnetv1.GraphNode{}, r, topographtest.NodeColumns)
			}
		case "node-graph-edges":
			for _, r := range rows {
				topographtest.CheckRow(t, &meshnetv1.GraphEdge{}, r, topographtest.EdgeColumns)
			}
		case "table":
			for _, r := range rows {
				for _, c := range q.Columns {
					v, ok := r[c.Selector]
					_, isNumber := v.(float64)
					_, isString := v.(string)
					if !ok || (c.Type == "number" && !isNumber) || (c.Type == "string" && !isString) {
						t.Errorf("table column %q (%s %s) = %#v", c.Text, c.Selector, c.Type, v)
					}
				}
			}
		default:
			t.Errorf("query %s: format %s", q.RefID, q.Format)
		}
		t.Logf("query %s (%s): %d rows", q.RefID, q.Format, len(rows))
	}

	graph := d.panel(nodeGraphPanel)
	nodesQ, edgesQ := graph.Targets[0], graph.Targets[1]
	drawn := func() (nodes, edges map[string]map[string]any) {
		nodes, edges = map[string]map[string]any{}, map[string]map[string]any{}
		for _, r := range infinityGet(t, h.URL, nodesQ) {
			nodes[r["id"].(string)] = r
		}
		for _, r := range infinityGet(t, h.URL, edgesQ) {
			edges[r["id"].(string)] = r
		}
		return nodes, edges
	}
	nodes, edges := drawn()
	for id, n := range nodes {
		if c := circle(graph, n); c != "green" {
			t.Errorf("node %s drawn %s, want green", id, c)
		}
	}
	for id, e := range edges {
		if e["color"] != "green" {
			t.Errorf("edge %s drawn %v, want green", id, e["color"])
		}
	}

	var r1 v1beta1.Topology
	if err := h.Env.Client.Get(h.Ctx, key("r1"), &r1); err != nil {
		t.Fatal(err)
	}
	r1.Status.Links[0].State = v1beta1.LinkDown
	if err := h.Env.Client.Status().Update(h.Ctx, &r1); err != nil {
		t.Fatal(err)
	}
	h.Synced(&r1)
	nodes, edges = drawn()
	if e := edges["r1:eth1--r2:eth1"]; e["color"] != "red" {
		t.Errorf("edge after its link went down drawn %v, want red", e["color"])
	}
	if c := circle(graph, nodes["r1"]); c != "segments" {
		t.Errorf("r1 with one of two links down drawn %s, want a green and a red arc", c)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r2", Namespace: dataservertest.Namespace}}
	if err := h.Env.Client.Delete(h.Ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	h.Gone(pod)
	nodes, _ = drawn()
	if c := circle(graph, nodes["r2"]); c != "red" {
		t.Errorf("r2 after its pod was deleted drawn %s, want red", c)
	}
}
