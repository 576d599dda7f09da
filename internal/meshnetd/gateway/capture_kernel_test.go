//go:build kernel

package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// TestKernelCaptureOverREST captures a ping on a link with curl, as the
// docs show it, and decodes the stream with Debian's tshark. Only a token
// that may change the link may capture it; bad parameters are named.
func TestKernelCaptureOverREST(t *testing.T) {
	tok := podlinkstest.Cluster(t, "lab")
	lab := podlinkstest.NewLab(t)
	lab.Veth("lab", 1, podlinkstest.End{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, podlinkstest.End{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	r1 := lab.Pod("lab", "r1")
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store, Checker: tok.Checker, ReadOpen: true})
	curl := curlPath(t)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("kernel tier needs Debian's tshark to decode captures (hack/deps.sh installs it): %v", err)
	}
	url := "http://" + st.HTTPAddr + "/v1/namespaces/lab/pods/r1/links/eth1/capture"
	before := netnstest.LinkConfig(t, r1.Path(), "eth1")
	if ok, out := podlinkstest.Ping(r1, "10.0.0.2", 1); !ok { // ARP resolved before the capture
		t.Fatalf("ping: %s", out)
	}

	file := filepath.Join(t.TempDir(), "eth1.pcapng")
	cmd := exec.Command(curl, "-sS", "-N", "-f", "-H", "Authorization: Bearer "+tok.Editor, "-o", file, url+"?duration=3s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(file); err == nil && fi.Size() > 0 {
			break // the stream's header: the socket is open
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pcapng header from %s after 5s: %s", url, stderr.String())
		}
	}
	if ok, out := podlinkstest.Ping(r1, "10.0.0.2", 3); !ok {
		t.Fatalf("ping: %s", out)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("curl %s: %v: %s", url, err, stderr.String())
	}
	out, err := exec.Command(tshark, "-r", file, "-Y", "icmp", "-T", "fields", "-e", "icmp.type", "-e", "ip.src", "-e", "ip.dst").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	req, rep := "8\t10.0.0.1\t10.0.0.2", "0\t10.0.0.2\t10.0.0.1"
	if got, want := strings.TrimSpace(string(out)), strings.Join([]string{req, rep, req, rep, req, rep}, "\n"); got != want {
		t.Errorf("tshark decodes %q, want 3 echo requests and replies", got)
	}
	if after := netnstest.LinkConfig(t, r1.Path(), "eth1"); after != before {
		t.Errorf("the capture changed the link:\nbefore %s\nafter %s", before, after)
	}

	// Refusals: the status code and the field or right, and no capture.
	for _, tc := range []struct {
		name, token, query string
		code               int
		want               string
	}{
		{"no token", "", "?max_packets=1", 401, "authorization: Bearer <token>"},
		{"viewer", tok.Viewer, "?max_packets=1", 403, "may not patch topologies.networkop.co.uk in namespace"},
		{"bad duration", tok.Editor, "?duration=5parsecs", 400, `duration: \"5parsecs\" is not a duration`},
		{"long duration", tok.Editor, "?duration=48h", 400, "duration"},
		{"bad count", tok.Editor, "?max_packets=-1", 400, "max_packets"},
		{"unknown parameter", tok.Editor, "?count=5", 400, "count: unknown query parameter"},
		{"tiny snap length", tok.Editor, "?snap_length=10", 400, "snap_length: 10 is not between 34 bytes"},
		{"huge snap length", tok.Editor, "?snap_length=4294967295", 400, "snap_length: 4294967295 is not between"},
		{"filter that does not compile", tok.Editor, "?filter=tcp+port+80x", 400, "filter: "},
		{"filter with a word meshnet does not take", tok.Editor, "?filter=vlan+100", 400, `filter: \"vlan\"`},
	} {
		args := []string{"-sS", "-w", "\n%{http_code}\n%{content_type}", url + tc.query}
		if tc.token != "" {
			args = append(args, "-H", "Authorization: Bearer "+tc.token)
		}
		out, err := exec.Command(curl, args...).CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil || len(lines) < 3 {
			t.Fatalf("%s: curl: %v\n%s", tc.name, err, out)
		}
		code, _ := strconv.Atoi(lines[len(lines)-2])
		body := strings.Join(lines[:len(lines)-2], "\n")
		if code != tc.code || !strings.Contains(body, tc.want) || lines[len(lines)-1] != "application/json" {
			t.Errorf("%s: %d %s %q, want %d, JSON naming %q", tc.name, code, lines[len(lines)-1], body, tc.code, tc.want)
		}
	}
	out2, _ := exec.Command(curl, "-sS", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+tok.Editor,
		"http://"+st.HTTPAddr+"/v1/namespaces/lab/pods/r1/links/eth9/capture?max_packets=1").CombinedOutput()
	if !strings.HasSuffix(strings.TrimSpace(string(out2)), "404") || !strings.Contains(string(out2), "eth9") {
		t.Errorf("capture of a link that does not exist: %s, want 404 naming eth9", out2)
	}
}
