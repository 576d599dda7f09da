//go:build kernel

package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// grpcurl builds grpcurl from tools/go.mod (or takes $MESHNET_GRPCURL).
func grpcurl(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MESHNET_GRPCURL"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	bin := filepath.Join(t.TempDir(), "grpcurl")
	cmd := exec.Command("go", "build", "-modfile=tools/go.mod", "-o", bin, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build grpcurl from tools/go.mod: %v\n%s", err, out)
	}
	return bin
}

func curlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("kernel tier needs curl for the REST checks (apt-get install curl): %v", err)
	}
	return p
}

func waitCarrier(t *testing.T, n *links.Netns, intf string, want bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, err := links.ReadLink(n, intf)
		if err != nil {
			t.Fatal(err)
		}
		if s.Carrier == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s carrier %v, want %v", intf, s.Carrier, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKernelRESTAndGrpcurl drives meshnetd's API the way users do: grpcurl
// with nothing but the address (server reflection, health), and curl on
// the REST mapping, with the effects checked in the kernel.
func TestKernelRESTAndGrpcurl(t *testing.T) {
	tok := podlinkstest.Cluster(t, "lab")
	lab := podlinkstest.NewLab(t)
	lab.Veth("lab", 1, podlinkstest.End{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, podlinkstest.End{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	r1, r2 := lab.Pod("lab", "r1"), lab.Pod("lab", "r2")
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store, Checker: tok.Checker, ReadOpen: true})
	gc := grpcurl(t)
	curl := curlPath(t)
	state := func() links.Reading {
		t.Helper()
		s, err := links.ReadLink(r1, "eth1")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// grpc runs grpcurl -plaintext with args, where "ADDR" stands for the
	// server's address.
	grpc := func(wantOK bool, args ...string) string {
		t.Helper()
		args = slices.Clone(args)
		args[slices.Index(args, "ADDR")] = st.GRPCAddr
		out, err := exec.Command(gc, append([]string{"-plaintext"}, args...)...).CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("grpcurl %v: %v, want success %v:\n%s", args, err, wantOK, out)
		}
		return string(out)
	}
	must := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("output lacks %q:\n%s", w, out)
			}
		}
	}
	must(grpc(true, "ADDR", "list"), "meshnet.v1.LinkService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection")
	must(grpc(true, "ADDR", "describe", "meshnet.v1.LinkService"), "rpc SetLinkState", "rpc ApplyPod", "rpc ListLinks")
	must(grpc(true, "ADDR", "grpc.health.v1.Health/Check"), `"status": "SERVING"`)
	must(grpc(true, "-d", `{"namespace":"lab","pod":"r1"}`, "ADDR", "meshnet.v1.LinkService/ListLinks"), `"interface": "eth1"`, `"txPackets"`, `"carrier": true`)
	down := `{"namespace":"lab","pod":"r1","interface":"eth1","state":"LINK_STATE_DOWN"}`
	must(grpc(false, "-d", down, "ADDR", "meshnet.v1.LinkService/SetLinkState"), "Unauthenticated")
	if !state().AdminUp {
		t.Fatal("unauthenticated grpcurl call took the link down")
	}
	must(grpc(true, "-H", "authorization: Bearer "+tok.Editor, "-d", down, "ADDR", "meshnet.v1.LinkService/SetLinkState"), `"adminState": "LINK_STATE_DOWN"`)
	waitCarrier(t, r2, "eth1", false)

	base := "http://" + st.HTTPAddr
	call := func(method, path, token, data string) (int, string) {
		t.Helper()
		args := []string{"-sS", "-X", method, "-w", "\n%{http_code}", base + path}
		if token != "" {
			args = append(args, "-H", "Authorization: Bearer "+token)
		}
		if data != "" {
			args = append(args, "-H", "Content-Type: application/json", "--data", data)
		}
		out, err := exec.Command(curl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s %s: %v\n%s", method, path, err, out)
		}
		s := strings.TrimSpace(string(out))
		i := strings.LastIndexByte(s, '\n')
		code, err := strconv.Atoi(s[i+1:])
		if err != nil {
			t.Fatalf("curl %s %s: no status in %q", method, path, s)
		}
		body := s[:max(i, 0)]
		// protojson varies its whitespace on purpose: compact it to match.
		var b bytes.Buffer
		if json.Compact(&b, []byte(body)) == nil {
			body = b.String()
		}
		return code, body
	}
	expect := func(method, path, token, body string, code int, want ...string) {
		t.Helper()
		got, out := call(method, path, token, body)
		if got != code {
			t.Fatalf("%s %s: HTTP %d, want %d:\n%s", method, path, got, code, out)
		}
		must(out, want...)
	}
	const link = "/v1/namespaces/lab/pods/r1/links/eth1"
	expect("GET", "/v1/namespaces/lab/pods/r1/links", "", "", 200, `"interface":"eth1"`, `"adminState":"LINK_STATE_DOWN"`, `"counters":{`)
	expect("GET", "/v1/namespaces/lab/links", "", "", 200, `"name":"r1"`, `"name":"r2"`)
	expect("GET", link, "", "", 200, `"peer":{"pod":{"pod":{"namespace":"lab","name":"r2"},"interface":"eth1"`)
	expect("GET", "/v1/namespaces/lab/pods/ghost/links", "", "", 404, "ghost")

	upBody := `{"state":"LINK_STATE_UP"}`
	expect("PUT", link+"/state", "", upBody, 401, "authorization")
	expect("PUT", link+"/state", "not-a-token", upBody, 401)
	expect("PUT", link+"/state", tok.Viewer, upBody, 403, "may not patch")
	if state().AdminUp {
		t.Fatal("refused REST call brought the link up")
	}
	expect("PUT", link+"/state", tok.Editor, upBody, 200, `"adminState":"LINK_STATE_UP"`)
	waitCarrier(t, r2, "eth1", true)
	expect("PUT", link+"/state", tok.Editor, `{"state":"LINK_STATE_UNSPECIFIED"}`, 400, "state")
	expect("PUT", link+"/state", tok.Editor, `{"state":"LINK_STATE_DOWN","cable":"cut"}`, 400, "cable")
	if !state().AdminUp {
		t.Fatal("a 400 changed the link")
	}

	expect("PUT", "/v1/namespaces/lab/pods/r1/routes", tok.Editor, `{"routes":[{"dst":"10.9.0.0/24","gw":"10.0.0.2"}]}`, 200,
		`"routes":[{"dst":"10.9.0.0/24","gw":"10.0.0.2","dev":"eth1"}]`)
	rs, err := links.StaticRoutes(r1, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rs, func(r links.Route) bool { return r.Dst == netip.MustParsePrefix("10.9.0.0/24") }) {
		t.Fatalf("routes after REST SetRoutes: %v", rs)
	}
	expect("POST", "/v1/namespaces/lab/pods/r1:apply", tok.Editor, `{"links":[{"interface":"eth1","mtu":1400}]}`, 200, `"phase":"LINK_PHASE_READY"`, `"mtu":1400`)
	if m := state().MTU; m != 1400 {
		t.Fatalf("mtu %d after REST ApplyPod, want 1400", m)
	}
	expect("PUT", link+"/netem", tok.Editor, `{"lossPercent":150}`, 400, "netem.loss_percent")
	expect("PUT", link+"/netem", tok.Editor, `{"delay":"0.010s"}`, 400, "sch_netem")
	expect("DELETE", link+"/netem", tok.Editor, "", 200, `"qdiscOwner":"QDISC_OWNER_NONE"`)

	expect("GET", "/openapi.json", "", "", 200, `"swagger":"2.0"`, `"/v1/namespaces/{namespace}/pods/{pod}/links/{interface}/state"`)
	expect("GET", "/metrics", "", "", 200,
		`meshnet_link_tx_packets_total{interface="eth1",namespace="lab",peer="r2",pod="r1",uid="1"}`,
		`meshnet_link_admin_up{interface="eth1",namespace="lab",peer="r1",pod="r2",uid="1"} 1`,
		`meshnet_grpc_server_handling_seconds_bucket{code="Unauthenticated",method="/meshnet.v1.LinkService/SetLinkState"`,
		`meshnet_grpc_server_handling_seconds_count{code="OK",method="/meshnet.v1.LinkService/ApplyPod"} 1`)
	expect("GET", "/healthz", "", "", 200, "ok")
	expect("GET", "/readyz", "", "", 200, "ready")
	st.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	expect("GET", "/readyz", "", "", 503, "NOT_SERVING")
}
