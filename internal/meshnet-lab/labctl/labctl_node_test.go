//go:build node

package labctl_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/labctl"
	"github.com/meshnet/meshnet/internal/restapi"
)

// TestNodeLabUpRunsItsGuideAndDownLeavesNothing runs `make lab`'s lab, the
// containerlab file examples/frr-ospf (FRR routers running OSPF, and
// hosts), on real nodes with the meshnet-lab binary, runs the printed
// guide's commands as printed, in order, in one shell, checks that they
// show what their comments say (OSPF neighbours Full, the traffic around a
// pulled cable and back once it is put back), and that down leaves nothing
// behind.
func TestNodeLabUpRunsItsGuideAndDownLeavesNothing(t *testing.T) {
	bin, assets := os.Getenv("MESHNET_NODE_BIN"), os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" || assets == "" {
		t.Fatalf("the node tier needs MESHNET_NODE_BIN (make node-bin) and KUBEBUILDER_ASSETS (hack/controlplane.sh --nodes); have %q and %q", bin, assets)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir := filepath.Join(t.TempDir(), "lab")
	lab := filepath.Join(bin, "meshnet-lab")
	up := exec.Command(lab, "up", "-real", "-dir", dir, "-bin", bin, "-overlay", filepath.Join(root, "deploy/overlays/kind"),
		filepath.Join(root, "examples/frr-ospf/frr-ospf.clab.yml"))
	up.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets)
	out, err := up.CombinedOutput()
	t.Cleanup(func() { _ = exec.Command(lab, "down", "-dir", dir).Run() })
	if err != nil {
		t.Fatalf("meshnet-lab up -real: %v\n%s", err, out)
	}
	guide := string(out)
	t.Logf("$ meshnet-lab up -real examples/frr-ospf/frr-ospf.clab.yml\n%s", guide)

	// The topology page the guide prints, served by the installed
	// DaemonSet's meshnetd, and the graph it draws from; before the
	// guide's commands, whose last restarts the DaemonSet.
	// meshnetd serves TLS as installed: the page is https, with the CA the
	// lab wrote beside its kubeconfig, and nothing is served in clear.
	page := pageURL(t, guide)
	if !strings.HasPrefix(page, "https://") {
		t.Fatalf("topology page %s, want https (meshnetd serves TLS as installed)", page)
	}
	httpGet := httpsGetter(t, filepath.Join(dir, labctl.CAFileName))
	if resp, err := http.Get(strings.Replace(page, "https://", "http://", 1)); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("meshnetd answered plain HTTP with 200; want TLS only")
		}
	}
	if code, body := httpGet(t, page, ""); code != http.StatusOK || !strings.Contains(body, "topology.js") {
		t.Errorf("GET %s: %d %.200s, want the topology page", page, code, body)
	}
	// Reads are served to those who may list the namespace's Topologies,
	// as installed: the guide's operator may, a caller without a token not.
	graph := strings.Replace(page, restapi.TopologyPath+"?namespace=", "/v1/namespaces/", 1) + "/graph"
	if code, body := httpGet(t, graph, ""); code != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d %.300s, want 401", graph, code, body)
	}
	createToken := func(args ...string) string {
		t.Helper()
		args = append([]string{"--kubeconfig", filepath.Join(dir, "admin.kubeconfig"), "-n", "meshnet", "create", "token", "meshnet-operator"}, args...)
		out, err := exec.Command("kubectl", args...).Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	// The operator's token for the API server is no good to meshnetd.
	if code, body := httpGet(t, graph, createToken()); code != http.StatusUnauthorized || !strings.Contains(body, "audience meshnetd") {
		t.Errorf("GET %s with a token for the API server: %d %.300s, want 401 naming audience meshnetd", graph, code, body)
	}
	token := createToken("--audience", "meshnetd")
	var g struct{ Nodes, Edges []struct{ ID string } }
	if code, body := httpGet(t, graph, token); code != http.StatusOK || json.Unmarshal([]byte(body), &g) != nil || len(g.Nodes) != 5 || len(g.Edges) != 5 {
		t.Errorf("GET %s: %d %.300s, want frr-ospf's 5 pods and 5 links", graph, code, body)
	}

	var script []string
	for _, line := range strings.Split(guide, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "  #")
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(cmd, "kubectl edit") || strings.HasPrefix(cmd, "node-") {
			continue
		}
		script = append(script, cmd)
	}
	if len(script) < 10 {
		t.Fatalf("the guide has %d commands, want at least 10 (kubectl, kubectl exec, grpcurl, curl):\n%s", len(script), guide)
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-xc", strings.Join(script, "\n"))
	out, err = sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands: %v\n%s", err, out)
	}
	t.Logf("the guide's %d commands:\n%s", len(script), out)
	// What the comments say: router1's two neighbours Full; host1's
	// traffic to host2 through router2, around the pulled cable through
	// router3 (192.168.2.3), and through router2 again once the cable is
	// back.
	shown := string(out)
	if n := strings.Count(shown, "Full/"); n != 2 {
		t.Errorf("the guide's show ip ospf neighbor shows %d neighbours Full, want router1's 2", n)
	}
	pull := strings.Index(shown, "+ kubectl meshnet down")
	back := strings.Index(shown, "+ kubectl meshnet up")
	if pull < 0 || back < pull {
		t.Fatalf("the guide's output has no cable pull followed by its return")
	}
	// traceroute -n's second hop: " 2  192.168.1.2  0.101 ms"
	secondHop := regexp.MustCompile(`(?m)^\s*2\s+(\d+\.\d+\.\d+\.\d+)\s`)
	// router2 answers from either of its addresses: 192.168.1.2 (eth1,
	// towards router1) once its own way back to host1 takes router1 too,
	// 192.168.3.2 (eth2) while it still goes round by router3.
	router2 := []string{"192.168.1.2", "192.168.3.2"}
	for _, c := range []struct {
		what, out string
		hops      []string
	}{
		{"before the pull", shown[:pull], router2},
		{"with the cable pulled", shown[pull:back], []string{"192.168.2.3"}},
		{"with the cable back", shown[back:], router2},
	} {
		m := secondHop.FindAllStringSubmatch(c.out, -1)
		if len(m) != 1 || !slices.Contains(c.hops, m[0][1]) {
			t.Errorf("the guide's traceroute %s: second hops %v, want one of %v", c.what, m, c.hops)
		}
	}

	down, err := exec.Command(lab, "down", "-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("meshnet-lab down: %v\n%s", err, down)
	}
	t.Logf("$ meshnet-lab down\n%s", down)
	for _, l := range kubecluster.Leftovers(dir, labctl.NetnsPrefix) {
		t.Errorf("left behind by down: %s", l)
	}
}

// httpsGetter returns a GET, with a bearer token unless empty, that trusts
// the CA in caFile only.
func httpsGetter(t *testing.T, caFile string) func(*testing.T, string, string) (int, string) {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("the lab's CA file: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return func(t *testing.T, url, token string) (int, string) { return get(t, c, url, token) }
}

func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
