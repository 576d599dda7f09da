//go:build kernel

package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

var (
	bins    labnet.Binaries
	grpcurl string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "daemon-kernel-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	grpcurl = filepath.Join(dir, "grpcurl")
	// grpcurl lives in the tools module; the package dir is internal/meshnetd/daemon.
	cmd := exec.Command("go", "build", "-modfile=tools/go.mod", "-o", grpcurl, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build grpcurl: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := labnet.Main(m, &bins)
	os.RemoveAll(dir)
	os.Exit(code)
}

const ns = "lab"

// lab is two nodes with r1 on node-a and r2 on node-b, linked by VXLAN
// (10.0.1.1/30 - 10.0.1.2/30), r1 with a static route over the link, and
// a token of a service account allowed to patch the namespace's topologies.
type lab struct {
	*labnet.Lab
	a, b   *labnet.Node
	r1, r2 *labnet.Pod
	token  string
}

func newLab(t testing.TB) *lab {
	t.Helper()
	l := labnet.New(t, bins)
	a := l.AddNode("node-a", "eth0")
	b := l.AddNode("node-b", "eth0")
	l.Namespace(ns)
	topology(t, l, "r1", v1beta1.Link{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1", LocalIP: "10.0.1.1/30"})
	topology(t, l, "r2", v1beta1.Link{UID: 1, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1", LocalIP: "10.0.1.2/30"})
	r1, r2 := l.AddPod(a, ns, "r1"), l.AddPod(b, ns, "r2")
	cni(t, r1)
	cni(t, r2)
	ping(t, r1, "10.0.1.2")
	ping(t, r2, "10.0.1.1")
	run(t, r1.Netns, "ip", "route", "add", "10.9.0.0/24", "via", "10.0.1.2", "dev", "eth1")
	return &lab{Lab: l, a: a, b: b, r1: r1, r2: r2, token: operatorToken(t, l)}
}

// operatorToken is a token of a service account that may patch topologies
// in ns, what LinkService's mutating calls require.
func operatorToken(t testing.TB, l *labnet.Lab) string {
	t.Helper()
	ctx := context.Background()
	const name = "operator"
	mustOK(t, l.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	mustOK(t, l.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1beta1.GroupVersion.Group}, Resources: []string{"topologies"},
			Verbs: []string{"get", "list", "patch"}}},
	}))
	mustOK(t, l.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}))
	tok, err := l.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, auth.TokenRequest(0), metav1.CreateOptions{})
	mustOK(t, err)
	return tok.Status.Token
}

// intruderToken is a valid token of a service account with no permissions.
func intruderToken(t *testing.T, l *labnet.Lab) string {
	t.Helper()
	ctx := context.Background()
	mustOK(t, l.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder"}}))
	tok, err := l.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "intruder", auth.TokenRequest(0), metav1.CreateOptions{})
	mustOK(t, err)
	return tok.Status.Token
}

func topology(t testing.TB, l *labnet.Lab, name string, ls ...v1beta1.Link) {
	t.Helper()
	mustOK(t, l.Client.Create(context.Background(), &v1beta1.Topology{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}))
}

func cni(t testing.TB, p *labnet.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.CNI(ctx, "ADD"); err != nil {
		t.Fatalf("CNI ADD %s: %v\n%s", p.Name, err, p.Node.Log())
	}
}

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs a command in a network namespace, through nsenter as an
// operator would, and returns its standard output.
func run(t testing.TB, netnsPath, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(netnsPath, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func tryRun(netnsPath, name string, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath, "--", name}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// grpc runs grpcurl in node's namespace against its own meshnetd.
func (l *lab) grpc(t testing.TB, n *labnet.Node, args ...string) string {
	t.Helper()
	full := append([]string{"-plaintext", "-max-time", "20"}, args[:len(args)-1]...)
	full = append(full, fmt.Sprintf("%s:%d", n.IP, labnet.GRPCPort), args[len(args)-1])
	return run(t, n.Netns, grpcurl, full...)
}

func (l *lab) setState(t testing.TB, n *labnet.Node, pod, state string) {
	t.Helper()
	body := fmt.Sprintf(`{"namespace":%q,"pod":%q,"interface":"eth1","state":%q}`, ns, pod, state)
	out := l.grpc(t, n, "-H", "authorization: Bearer "+l.token, "-d", body, "meshnet.v1.LinkService/SetLinkState")
	if got := adminState(t, out); got != state {
		t.Fatalf("SetLinkState %s %s read back %s:\n%s", pod, state, got, out)
	}
}

// getLink is GetLink of pod's eth1 from node's meshnetd, without a token
// (reads are open by default).
func (l *lab) getLink(t *testing.T, n *labnet.Node, pod string) string {
	t.Helper()
	body := fmt.Sprintf(`{"namespace":%q,"pod":%q,"interface":"eth1"}`, ns, pod)
	return adminState(t, l.grpc(t, n, "-d", body, "meshnet.v1.LinkService/GetLink"))
}

// adminState is link.adminState of a SetLinkState or GetLink response.
func adminState(t testing.TB, out string) string {
	t.Helper()
	var resp struct {
		Link struct {
			AdminState string `json:"adminState"`
		} `json:"link"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return resp.Link.AdminState
}

// curl calls node's meshnetd REST port from inside the node and returns
// the HTTP status and body.
func curl(t *testing.T, n *labnet.Node, args ...string) (int, string) {
	t.Helper()
	full := append([]string{"-sS", "-m", "20", "-w", "\n%{http_code}"}, args[:len(args)-1]...)
	full = append(full, fmt.Sprintf("http://%s:51112%s", n.IP, args[len(args)-1]))
	out := run(t, n.Netns, "curl", full...)
	i := strings.LastIndex(out, "\n")
	var code int
	fmt.Sscan(out[i+1:], &code)
	return code, out[:i]
}

// adminUp reads eth1's IFF_UP flag from the kernel in a pod's namespace.
func adminUp(t *testing.T, p *labnet.Pod) bool {
	t.Helper()
	out := run(t, p.Netns, "ip", "-o", "link", "show", "dev", "eth1")
	i, j := strings.Index(out, "<"), strings.Index(out, ">")
	if i < 0 || j < i {
		t.Fatalf("ip link show eth1 in %s: %q", p.Name, out)
	}
	for _, f := range strings.Split(out[i+1:j], ",") {
		if f == "UP" {
			return true
		}
	}
	return false
}

func ping(t testing.TB, p *labnet.Pod, ip string) {
	t.Helper()
	var out string
	var err error
	for range 3 {
		if out, err = tryRun(p.Netns, "ping", "-c", "1", "-W", "1", ip); err == nil {
			return
		}
	}
	t.Fatalf("ping %s from %s: %v\n%s", ip, p.Name, err, out)
}

func noPing(t *testing.T, p *labnet.Pod, ip string) {
	t.Helper()
	if out, err := tryRun(p.Netns, "ping", "-c", "2", "-W", "1", ip); err == nil {
		t.Errorf("ping %s from %s passed with the link down:\n%s", ip, p.Name, out)
	}
}

func hasRoute(t *testing.T, p *labnet.Pod) bool {
	t.Helper()
	return strings.Contains(run(t, p.Netns, "ip", "route", "show", "10.9.0.0/24"), "via 10.0.1.2")
}

// wantDown asserts both ends admin down in the kernel and no traffic either way.
func (l *lab) wantDown(t *testing.T) {
	t.Helper()
	if adminUp(t, l.r1) || adminUp(t, l.r2) {
		t.Fatalf("after down: r1 eth1 up=%v, r2 eth1 up=%v; want both down", adminUp(t, l.r1), adminUp(t, l.r2))
	}
	noPing(t, l.r1, "10.0.1.2")
	noPing(t, l.r2, "10.0.1.1")
}

// wantUp asserts both ends up, traffic both ways and r1's static route back.
func (l *lab) wantUp(t *testing.T) {
	t.Helper()
	if !adminUp(t, l.r1) || !adminUp(t, l.r2) {
		t.Fatalf("after up: r1 eth1 up=%v, r2 eth1 up=%v; want both up", adminUp(t, l.r1), adminUp(t, l.r2))
	}
	ping(t, l.r1, "10.0.1.2")
	ping(t, l.r2, "10.0.1.1")
	if !hasRoute(t, l.r1) {
		t.Errorf("r1's static route 10.9.0.0/24 via 10.0.1.2 not restored:\n%s", run(t, l.r1.Netns, "ip", "route"))
	}
}

// TestKernelDaemonCablePullGRPC pulls r1's VXLAN cable with grpcurl
// against node-a's meshnetd: node-b's end goes down too, and back up.
func TestKernelDaemonCablePullGRPC(t *testing.T) {
	l := newLab(t)
	l.setState(t, l.a, "r1", "LINK_STATE_DOWN")
	l.wantDown(t)
	if hasRoute(t, l.r1) {
		t.Error("static route still present with eth1 down")
	}
	l.setState(t, l.a, "r1", "LINK_STATE_UP")
	l.wantUp(t)
}

// TestKernelDaemonCablePullREST does the same through REST, and checks a
// call without a token (401) and a bad body (400) change nothing.
func TestKernelDaemonCablePullREST(t *testing.T) {
	l := newLab(t)
	path := "/v1/namespaces/" + ns + "/pods/r1/links/eth1/state"
	auth := "Authorization: Bearer " + l.token
	if code, body := curl(t, l.a, "-X", "PUT", "-d", `{"state":"LINK_STATE_DOWN"}`, path); code != 401 {
		t.Errorf("PUT without token: %d %s, want 401", code, body)
	}
	if code, body := curl(t, l.a, "-X", "PUT", "-H", "Authorization: Bearer "+intruderToken(t, l.Lab), "-d", `{"state":"LINK_STATE_DOWN"}`, path); code != 403 {
		t.Errorf("PUT with a token not allowed to patch topologies: %d %s, want 403", code, body)
	}
	if code, body := curl(t, l.a, "-X", "PUT", "-H", auth, "-d", `{"state":"LINK_STATE_SIDEWAYS"}`, path); code != 400 {
		t.Errorf("PUT with bad state: %d %s, want 400", code, body)
	}
	if code, body := curl(t, l.a, "-X", "PUT", "-H", auth, "-d", `{}`, path); code != 400 || !strings.Contains(body, "state") {
		t.Errorf("PUT without state: %d %s, want 400 naming state", code, body)
	}
	if !adminUp(t, l.r1) || !adminUp(t, l.r2) {
		t.Fatal("a refused call changed the link")
	}
	ping(t, l.r1, "10.0.1.2")

	if code, body := curl(t, l.a, "-X", "PUT", "-H", auth, "-d", `{"state":"LINK_STATE_DOWN"}`, path); code != 200 {
		t.Fatalf("PUT down: %d %s", code, body)
	}
	l.wantDown(t)
	if code, body := curl(t, l.a, "-X", "PUT", "-H", auth, "-d", `{"state":"LINK_STATE_UP"}`, path); code != 200 {
		t.Fatalf("PUT up: %d %s", code, body)
	}
	l.wantUp(t)
}

// TestKernelDaemonServes: reflection, health, the HTTP endpoints, metrics
// and the data API of the assembled daemons.
func TestKernelDaemonServes(t *testing.T) {
	l := newLab(t)
	daemonService(t, l)

	t.Run("grpcurl list", func(t *testing.T) {
		out := run(t, l.a.Netns, grpcurl, "-plaintext", "-max-time", "20", fmt.Sprintf("%s:%d", l.a.IP, labnet.GRPCPort), "list")
		for _, s := range []string{"meshnet.v1.LinkService", "meshnet.v1.DataService", "meshnet.v1.PeerService",
			"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !strings.Contains(out, s+"\n") {
				t.Errorf("grpcurl list lacks %s:\n%s", s, out)
			}
		}
		out = run(t, l.a.Netns, grpcurl, "-plaintext", "-max-time", "20", fmt.Sprintf("%s:%d", l.a.IP, labnet.GRPCPort), "grpc.health.v1.Health/Check")
		if !strings.Contains(out, `"SERVING"`) {
			t.Errorf("health check: %s", out)
		}
	})

	// Its ports lie in the ephemeral range: the node's outgoing
	// connections must not take them.
	t.Run("ports reserved", func(t *testing.T) {
		for _, n := range []*labnet.Node{l.a, l.b} {
			got := strings.TrimSpace(run(t, n.Netns, "cat", "/proc/sys/net/ipv4/ip_local_reserved_ports"))
			if !strings.Contains(got, "51111") || !strings.Contains(got, "51112") {
				t.Errorf("%s: ip_local_reserved_ports %q, want 51111 and 51112", n.Name, got)
			}
		}
	})

	t.Run("http", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			if code, body := curl(t, l.b, p); code != 200 {
				t.Errorf("%s: %d %s", p, code, body)
			}
		}
		code, body := curl(t, l.a, "/openapi.json")
		var doc map[string]any
		if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil || doc["paths"] == nil {
			t.Errorf("/openapi.json: %d, %v, paths %v", code, err, doc["paths"] != nil)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for _, c := range []struct {
			n   *labnet.Node
			pod string
		}{{l.a, "r1"}, {l.b, "r2"}} {
			code, body := curl(t, c.n, "/metrics")
			if code != 200 {
				t.Fatalf("/metrics of %s: %d", c.n.Name, code)
			}
			for _, m := range []string{"meshnet_link_admin_up", "meshnet_link_carrier", "meshnet_link_tx_packets_total", "meshnet_link_rx_bytes_total"} {
				series := fmt.Sprintf(`%s{interface="eth1",namespace="%s",peer="%s",pod="%s",uid="1"} `, m, ns, other(c.pod), c.pod)
				if !strings.Contains(body, series) {
					t.Errorf("/metrics of %s lacks %s", c.n.Name, series)
				}
			}
			if !strings.Contains(body, "meshnet_grpc_server_handling_seconds") {
				t.Errorf("/metrics of %s lacks meshnet_grpc_server_handling_seconds", c.n.Name)
			}
		}
	})

	t.Run("data api", func(t *testing.T) {
		nodes := graph(t, l.b, "nodes")
		ids := map[string]map[string]any{}
		for _, n := range nodes {
			for _, k := range []string{"id", "title", "subtitle", "mainstat", "color", "arc__up", "detail__node", "detail__kind", "detail__namespace"} {
				if _, ok := n[k]; !ok {
					t.Errorf("graph node %v lacks %q", n["id"], k)
				}
			}
			ids[fmt.Sprint(n["id"])] = n
		}
		if ids["r1"]["detail__node"] != "node-a" || ids["r2"]["detail__node"] != "node-b" {
			t.Errorf("graph nodes from node-b's daemon: %v", nodes)
		}
		// node-b's cache sees the EndpointSlice shortly after it is made.
		var edge map[string]any
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if edge = oneEdge(t, l.b); edge["detail__error"] == "" || time.Now().After(deadline) {
				break
			}
		}
		for k, want := range map[string]any{"source": "r1", "target": "r2", "detail__kind": "vxlan",
			"detail__state": "up", "color": "green", "detail__source_interface": "eth1", "detail__target_interface": "eth1"} {
			if edge[k] != want {
				t.Errorf("edge %s = %v, want %v (edge %v)", k, edge[k], want, edge)
			}
		}
		for _, k := range []string{"id", "mainstat", "secondarystat", "thickness", "detail__mtu", "detail__vni", "detail__tx_bytes", "detail__rx_bytes"} {
			if _, ok := edge[k]; !ok {
				t.Errorf("edge lacks %q: %v", k, edge)
			}
		}
		if e, _ := edge["detail__error"].(string); e != "" {
			t.Errorf("edge error: %s", e)
		}
		// r1 is on node-a: node-b's daemon read its live counters from node-a's.
		if tx, _ := edge["detail__tx_bytes"].(float64); tx <= 0 {
			t.Errorf("edge from node-b has no live counters of r1 on node-a: %v", edge)
		}

		l.setState(t, l.a, "r1", "LINK_STATE_DOWN")
		_, m := curl(t, l.a, "/metrics")
		if s := fmt.Sprintf(`meshnet_link_admin_up{interface="eth1",namespace="%s",peer="r2",pod="r1",uid="1"} 0`, ns); !strings.Contains(m, s+"\n") {
			t.Errorf("/metrics of node-a after down lacks %s", s)
		}
		time.Sleep(1100 * time.Millisecond) // the data API reuses a node's answer for 1s
		for _, n := range []*labnet.Node{l.b, l.a} {
			edge := oneEdge(t, n)
			if edge["color"] != "red" || edge["detail__state"] != "down" {
				t.Errorf("edge from %s's daemon after down: color %v state %v", n.Name, edge["color"], edge["detail__state"])
			}
		}
		l.setState(t, l.a, "r1", "LINK_STATE_UP")
		time.Sleep(1100 * time.Millisecond)
		if edge := oneEdge(t, l.b); edge["color"] != "green" {
			t.Errorf("edge after up: %v", edge)
		}
	})
}

func other(pod string) string {
	if pod == "r1" {
		return "r2"
	}
	return "r1"
}

// daemonService publishes both daemons in the EndpointSlice of meshnetd's
// Service, as Kubernetes does for the DaemonSet, so that each daemon's data
// API finds the other's.
func daemonService(t *testing.T, l *lab) {
	t.Helper()
	l.Namespace("meshnet")
	var eps []discoveryv1.Endpoint
	for _, n := range []*labnet.Node{l.a, l.b} {
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{n.IP.String()}, NodeName: ptr.To(n.Name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	mustOK(t, l.Client.Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "meshnet", Name: "meshnetd-lab",
			Labels: map[string]string{discoveryv1.LabelServiceName: "meshnetd"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(int32(labnet.GRPCPort))}},
	}))
}

func graph(t *testing.T, n *labnet.Node, what string) []map[string]any {
	t.Helper()
	code, body := curl(t, n, "/v1/namespaces/"+ns+"/graph/"+what)
	if code != 200 {
		t.Fatalf("graph/%s from %s: %d %s", what, n.Name, code, body)
	}
	var resp map[string][]map[string]any
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("graph/%s: %v\n%s", what, err, body)
	}
	return resp[what]
}

func oneEdge(t *testing.T, n *labnet.Node) map[string]any {
	t.Helper()
	edges := graph(t, n, "edges")
	if len(edges) != 1 {
		t.Fatalf("edges from %s: %v, want one", n.Name, edges)
	}
	return edges[0]
}

// TestKernelDaemonRestartKeepsState: a link set down survives a restart of
// its node's meshnetd, and up after the restart restores the route. The
// second restart is an upgrade from a meshnetd that kept the runtime part
// of each pod's record in a directory of its own (state/links): it is
// moved into the pod's record and nothing is lost.
func TestKernelDaemonRestartKeepsState(t *testing.T) {
	l := newLab(t)
	l.setState(t, l.a, "r1", "LINK_STATE_DOWN")
	l.wantDown(t)
	record := filepath.Join(l.a.StateDir, "pods", ns+"_r1.json")
	var rec map[string]json.RawMessage
	data, err := os.ReadFile(record)
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil || !strings.Contains(string(rec["runtime"]), "10.9.0.0/24") {
		t.Fatalf("record %s with the saved route in its runtime part: %v\n%s", record, err, data)
	}
	l.a.Stop()
	l.a.Start()
	l.wantDown(t)

	// The layout before: the runtime part in state/links.
	l.a.Stop()
	old := filepath.Join(l.a.StateDir, "links")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, ns+"_r1.json"), rec["runtime"], 0o600); err != nil {
		t.Fatal(err)
	}
	delete(rec, "runtime")
	if data, err = json.Marshal(rec); err == nil {
		err = os.WriteFile(record, data, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	l.a.Start()
	l.wantDown(t)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("%s after the upgrade: %v, want it moved into the records", old, err)
	}
	if got := l.getLink(t, l.a, "r1"); got != "LINK_STATE_DOWN" {
		t.Errorf("GetLink r1 after restart: %s", got)
	}
	if got := l.getLink(t, l.b, "r2"); got != "LINK_STATE_DOWN" {
		t.Errorf("GetLink r2 after node-a's restart: %s", got)
	}
	l.setState(t, l.a, "r1", "LINK_STATE_UP")
	l.wantUp(t)
}
