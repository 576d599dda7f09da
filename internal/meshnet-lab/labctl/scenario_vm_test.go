//go:build vm

package labctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/meshnet-lab/labctl"
)

// scenario is the lab of TestVMScenario and what a user of it has: the
// files meshnet-lab writes, and the nodes' addresses it prints.
type scenario struct {
	t          *testing.T
	dir        string
	env        []string // KUBECONFIG for kubectl
	token      string
	client     client.Client
	node1      string // r1's and r3's node; node-2 has r2
	node2      string
	editorPath string
}

// TestVMScenario is the whole story on a stock kernel, told as a demo: the
// lab `make lab` runs (labctl.Serve) with three routers on two nodes and a
// physical peer; a user then shapes, breaks and routes links with
// kubectl edit, grpcurl and curl, and watches the Grafana frames follow.
func TestVMScenario(t *testing.T) {
	for _, env := range []string{"KUBEBUILDER_ASSETS", "MESHNET_LAB_BIN"} {
		if os.Getenv(env) == "" {
			t.Fatalf("%s is not set: the scenario runs in the vm tier (hack/vmtest ships the control plane and the lab's binaries)", env)
		}
	}
	for _, tool := range []string{"kubectl", "grpcurl", "ping", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the scenario needs %s in PATH: %v", tool, err)
		}
	}
	s := startScenario(t)

	t.Log("## 1. kubectl edit adds a 50 ms delay to r1's eth1: the RTT rises by 50 ms")
	base := s.rtt("r1", "10.0.0.2")
	s.edit("r1", `s/^\( *\)- local_intf: eth1$/&\n\1  netem: {delay: 50ms}/`)
	s.waitStatus("r1", func(tp *v1beta1.Topology) bool { return tp.Status.ShapedLinks == 1 })
	s.kubectl("get", "topo", "r1")
	delayed := s.rtt("r1", "10.0.0.2")
	t.Logf("RTT r1 -> r2: %.2f ms before, %.2f ms after: +%.2f ms", base, delayed, delayed-base)
	if rise := delayed - base; rise < 48 || rise > 70 {
		t.Errorf("RTT rose by %.2f ms, want about 50", rise)
	}
	s.waitEdge("r1", "eth1", "detail__netem", "delay 50ms")

	t.Log("## 2. Loss at 30% instead: about 30% of pings are lost")
	s.edit("r1", `s/^\( *\)delay: 50ms$/\1loss: "30%"/`)
	s.waitStatus("r1", func(tp *v1beta1.Topology) bool {
		l := linkOf(tp, "eth1")
		return l != nil && l.Netem != nil && l.Netem.Loss != nil && l.Netem.Delay == nil
	})
	const probes = 400
	lost := s.lost("r1", "10.0.0.2", probes)
	t.Logf("%d of %d pings lost: %.1f%%", lost, probes, 100*float64(lost)/probes)
	// 400 trials at p=0.3: sd 9.2; 4 sd either way.
	if lost < 83 || lost > 157 {
		t.Errorf("%d of %d lost, want about 120", lost, probes)
	}
	s.waitEdge("r1", "eth1", "detail__netem", "loss 30%")
	s.edit("r1", `/^ *netem:$/,/^ *loss: /d`)
	s.waitStatus("r1", func(tp *v1beta1.Topology) bool { return tp.Status.ShapedLinks == 0 })

	t.Log("## 3. grpcurl takes the link down: traffic stops both ways; up: it resumes")
	s.grpcurl(`{"namespace":"default","pod":"r1","interface":"eth1","state":"LINK_STATE_DOWN"}`)
	if s.pings("r1", "10.0.0.2") || s.pings("r2", "10.0.0.1") {
		t.Error("traffic crossed r1-r2 with the link down")
	}
	s.waitEdge("r1", "eth1", "detail__state", "down")
	s.grpcurl(`{"namespace":"default","pod":"r1","interface":"eth1","state":"LINK_STATE_UP"}`)
	if !s.eventuallyPings("r1", "10.0.0.2") || !s.eventuallyPings("r2", "10.0.0.1") {
		t.Error("traffic did not resume over r1-r2 with the link up")
	}
	s.waitEdge("r1", "eth1", "detail__state", "up")

	t.Log("## 4. A route added over REST: r1 reaches the physical device behind r2")
	s.shIn("r2", "sysctl -w net.ipv4.ip_forward=1")
	s.shIn("phy1", "ip route add 10.0.0.0/30 via 10.0.1.1")
	if s.pings("r1", "10.0.1.2") {
		t.Error("r1 reached 10.0.1.2 before it had a route")
	}
	s.curl("PUT", "/v1/namespaces/default/pods/r1/routes", `{"routes":[{"dst":"10.0.1.0/30","gw":"10.0.0.2"}]}`)
	if !s.eventuallyPings("r1", "10.0.1.2") {
		t.Error("r1 did not reach the physical device 10.0.1.2 through the route")
	}
	s.shIn("r1", "ip route show 10.0.1.0/30")

	t.Log("## 5. The Grafana frames: the physical device is a node of the graph")
	frames := s.graph()
	if !slices.ContainsFunc(frames.Nodes, func(n map[string]any) bool { return n["detail__kind"] == "physical" }) {
		t.Errorf("no physical node in the nodes frame: %v", frames.Nodes)
	}
}

func startScenario(t *testing.T) *scenario {
	core.InitializeClock()
	ctrllog.SetLogger(logr.Discard())
	dir := filepath.Join(t.TempDir(), "lab")
	cfg := labctl.Config{
		Dir: dir, Assets: os.Getenv("KUBEBUILDER_ASSETS"), BinDir: os.Getenv("MESHNET_LAB_BIN"),
		Topology: "testdata/scenario.yml", Namespace: "default", Nodes: 2,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- labctl.Serve(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("the lab: %v", err)
		}
	})
	guide := filepath.Join(dir, "guide.txt")
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if g, err := os.ReadFile(guide); err == nil {
			t.Logf("$ meshnet-lab up testdata/scenario.yml\n%s", g)
			break
		}
		select {
		case err := <-served:
			t.Fatalf("the lab ended before it was ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the lab was not ready within 4 minutes")
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &scenario{t: t, dir: dir, env: []string{"KUBECONFIG=" + kubeconfig}, token: filepath.Join(dir, "operator.token"),
		client: c, node1: "10.250.0.2", node2: "10.250.0.3"}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// sh runs a shell command as the user types it, and shows it with its
// output.
func (s *scenario) sh(cmd string) (string, error) {
	c := exec.Command("sh", "-c", cmd)
	c.Env = append(os.Environ(), s.env...)
	out, err := c.CombinedOutput()
	s.t.Logf("$ %s\n%s", cmd, strings.TrimRight(string(out), "\n"))
	return string(out), err
}

func (s *scenario) mustSh(cmd string) string {
	s.t.Helper()
	out, err := s.sh(cmd)
	if err != nil {
		s.t.Fatalf("%s: %v", cmd, err)
	}
	return out
}

// shIn runs a command in a pod's (or the physical device's) namespace.
func (s *scenario) shIn(name, cmd string) string {
	s.t.Helper()
	prefix := "pod-default-"
	if strings.HasPrefix(name, "phy") {
		prefix = "phy-"
	}
	return s.mustSh(fmt.Sprintf("ip netns exec %s%s%s %s", labctl.NetnsPrefix, prefix, name, cmd))
}

func (s *scenario) kubectl(args ...string) string {
	s.t.Helper()
	return s.mustSh("kubectl " + strings.Join(args, " "))
}

// edit runs kubectl edit with a sed script as the editor, as a user would
// change the YAML by hand.
func (s *scenario) edit(pod, script string) {
	s.t.Helper()
	editor := filepath.Join(s.t.TempDir(), "editor")
	body := fmt.Sprintf("#!/bin/sh\nsed -i '%s' \"$1\"\n", script)
	if err := os.WriteFile(editor, []byte(body), 0o755); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("(editor: sed '%s')", script)
	s.mustSh(fmt.Sprintf("KUBE_EDITOR=%s kubectl edit topology %s", editor, pod))
}

func (s *scenario) grpcurl(req string) {
	s.t.Helper()
	s.mustSh(fmt.Sprintf(`grpcurl -plaintext -H "authorization: Bearer $(cat %s)" -d '%s' %s:%d meshnet.v1.LinkService/SetLinkState | grep -i state`,
		s.token, req, s.node1, lab.GRPCPort))
}

// curl calls meshnetd's REST API on node-1 as curl would.
func (s *scenario) curl(method, path, body string) {
	s.t.Helper()
	url := fmt.Sprintf("http://%s:%d%s", s.node1, lab.HTTPPort, path)
	token, err := os.ReadFile(s.token)
	if err != nil {
		s.t.Fatal(err)
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	s.t.Logf("$ curl -X %s -H \"authorization: Bearer $(cat %s)\" -d '%s' %s\n%s %s", method, s.token, body, url, resp.Status, out)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}

var pingTime = regexp.MustCompile(`time=([0-9.]+) ms`)

// rtt is the median round trip of ten pings.
func (s *scenario) rtt(pod, ip string) float64 {
	s.t.Helper()
	out := s.shIn(pod, "ping -c 10 -i 0.2 "+ip)
	var ms []float64
	for _, m := range pingTime.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		ms = append(ms, v)
	}
	if len(ms) < 5 {
		s.t.Fatalf("only %d of 10 pings from %s to %s answered", len(ms), pod, ip)
	}
	slices.Sort(ms)
	return ms[len(ms)/2]
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

func (s *scenario) lost(pod, ip string, n int) int {
	s.t.Helper()
	out, _ := s.sh(fmt.Sprintf("ip netns exec %spod-default-%s ping -q -c %d -i 0.01 -W 1 %s", labctl.NetnsPrefix, pod, n, ip))
	m := pingSummary.FindStringSubmatch(out)
	if m == nil {
		s.t.Fatalf("no ping summary in %q", out)
	}
	sent, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	return sent - got
}

func (s *scenario) pings(pod, ip string) bool {
	_, err := s.sh(fmt.Sprintf("ip netns exec %spod-default-%s ping -c 2 -W 1 %s", labctl.NetnsPrefix, pod, ip))
	return err == nil
}

func (s *scenario) eventuallyPings(pod, ip string) bool {
	for range 5 {
		if s.pings(pod, ip) {
			return true
		}
	}
	return false
}

func (s *scenario) waitStatus(pod string, ok func(*v1beta1.Topology) bool) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tp := &v1beta1.Topology{}
		err := s.client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: pod}, tp)
		if err == nil && lab.Ready(tp) && ok(tp) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Topology %s never as expected: %v %+v", pod, err, tp.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func linkOf(tp *v1beta1.Topology, intf string) *v1beta1.LinkStatus {
	for i := range tp.Status.Links {
		if tp.Status.Links[i].LocalIntf == intf {
			return &tp.Status.Links[i]
		}
	}
	return nil
}

// frames is DataService's node graph: Grafana's Node Graph frames.
type frames struct {
	Nodes []map[string]any `json:"nodes"`
	Edges []map[string]any `json:"edges"`
}

func (s *scenario) graph() frames {
	s.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/v1/namespaces/default/graph", s.node2, lab.HTTPPort))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var f frames
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		s.t.Fatal(err)
	}
	return f
}

// waitEdge waits until the edge leaving pod's intf has field containing
// want in the frames Grafana reads (from node-2's daemon: the data API is
// cluster-wide).
func (s *scenario) waitEdge(pod, intf, field, want string) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, e := range s.graph().Edges {
			if e["source"] == pod && e["detail__source_interface"] == intf {
				if v, _ := e[field].(string); strings.Contains(v, want) {
					s.t.Logf("Grafana edge %s %s: %s = %q", pod, intf, field, v)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			s.t.Errorf("the edge of %s %s never showed %s %q", pod, intf, field, want)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
