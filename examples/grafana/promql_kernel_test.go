//go:build kernel

package grafana

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// prometheusBinary is Debian's prometheus (hack/deps.sh), or
// $MESHNET_PROMETHEUS.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MESHNET_PROMETHEUS"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the dashboard's PromQL is checked with a real Prometheus: apt-get install prometheus (hack/deps.sh does), or set MESHNET_PROMETHEUS: %v", err)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs Prometheus on loopback, scraping target's /metrics
// every second, with its own configuration and data directory; it is
// stopped when the test ends.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: meshnetd
  static_configs:
  - targets: [%q]
`, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after 30s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type queryResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func instantQuery(t *testing.T, base, expr string) queryResult {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r queryResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s %s", expr, r.Status, r.Error)
	}
	return r
}

// TestKernelDashboardPromQL runs every PromQL expression of the dashboard
// through a real Prometheus scraping meshnetd's /metrics (the gateway's,
// with the links collector over a real veth), with the variables Grafana
// fills in; each must return series, and the traffic one must see the
// pings sent over the link.
func TestKernelDashboardPromQL(t *testing.T) {
	queries := load(t).targets(prometheusType)
	lab := podlinkstest.NewLab(t)
	lab.Veth("lab", 1, podlinkstest.End{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, podlinkstest.End{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	stack := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	prom := startPrometheus(t, stack.HTTPAddr)

	r1 := lab.Pod("lab", "r1")
	pinged := make(chan string, 1)
	go func() {
		out, _ := netnstest.Run(r1.Path(), "ping", "-c", "40", "-i", "0.2", "10.0.0.2")
		pinged <- out
	}()
	t.Cleanup(func() { <-pinged })

	vars := map[string]string{"namespace": "lab", "__rate_interval": "10s"}
	deadline := time.Now().Add(30 * time.Second)
	for _, q := range queries {
		expr := interpolate(q.Expr, vars)
		for {
			r := instantQuery(t, prom, expr)
			ok := len(r.Data.Result) > 0
			if ok && q.RefID == "tx" {
				ok = false
				for _, s := range r.Data.Result {
					if v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64); v > 0 && s.Metric["pod"] == "r1" {
						ok = true
					}
				}
			}
			if ok {
				t.Logf("%s: %d series, e.g. %v = %v", q.RefID, len(r.Data.Result), r.Data.Result[0].Metric, r.Data.Result[0].Value[1])
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("query %s gave %+v, want series (r1's tx above 0 for the traffic one): %s", q.RefID, r.Data.Result, expr)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}
