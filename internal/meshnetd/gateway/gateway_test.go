package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
	"github.com/meshnet/meshnet/internal/meshnetd/topoview"
	"github.com/meshnet/meshnet/internal/restapi"
)

// stub answers GetLink by pod name: the gateway's mapping is pure logic,
// tested here against a stand-in server (the kernel tier runs the real one).
type stub struct {
	meshnetv1.UnimplementedLinkServiceServer
	calls *atomic.Int32
}

var codeOf = map[string]codes.Code{
	"unauth": codes.Unauthenticated, "denied": codes.PermissionDenied, "bad": codes.InvalidArgument,
	"ghost": codes.NotFound, "nonetem": codes.FailedPrecondition, "old": codes.Aborted,
}

func (stub) GetLink(ctx context.Context, req *meshnetv1.GetLinkRequest) (*meshnetv1.GetLinkResponse, error) {
	if c, ok := codeOf[req.GetPod()]; ok {
		return nil, status.Errorf(c, "%s says no", req.GetPod())
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return &meshnetv1.GetLinkResponse{Link: &meshnetv1.LinkStatus{
		Interface: req.GetInterface(), LastError: strings.Join(md.Get("authorization"), ","), QdiscKind: "noqueue",
	}}, nil
}

// SetLinkState counts the calls that reached the server.
func (s stub) SetLinkState(ctx context.Context, req *meshnetv1.SetLinkStateRequest) (*meshnetv1.SetLinkStateResponse, error) {
	if s.calls != nil {
		s.calls.Add(1)
	}
	return &meshnetv1.SetLinkStateResponse{}, nil
}

type fixture struct {
	url    string
	health *health.Server
	grpc   *grpc.Server
}

func start(t *testing.T, cfg gateway.Config) fixture {
	t.Helper()
	return startStub(t, cfg, stub{})
}

func startStub(t *testing.T, cfg gateway.Config, s stub) fixture {
	t.Helper()
	gs := grpc.NewServer()
	meshnetv1.RegisterLinkServiceServer(gs, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cfg.Endpoint = lis.Addr().String()
	gw, err := gateway.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return fixture{url: srv.URL, health: hs, grpc: gs}
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestRESTMapsCodesToHTTPStatuses(t *testing.T) {
	f := start(t, gateway.Config{})
	for pod, want := range map[string]int{
		"unauth": 401, "denied": 403, "bad": 400, "ghost": 404, "nonetem": 400, "old": 409, "r1": 200,
	} {
		got, body := get(t, f.url+"/v1/namespaces/lab/pods/"+pod+"/links/eth1", "")
		if got != want {
			t.Errorf("pod %s: HTTP %d, want %d (%s)", pod, got, want, body)
		}
		if want != 200 && !strings.Contains(body, pod+" says no") {
			t.Errorf("pod %s: body %s lacks the gRPC message", pod, body)
		}
	}
}

func TestRESTForwardsAuthorization(t *testing.T) {
	f := start(t, gateway.Config{})
	_, body := get(t, f.url+"/v1/namespaces/lab/pods/r1/links/eth1", "s3cret")
	var resp struct {
		Link struct{ LastError string } `json:"link"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Link.LastError != "Bearer s3cret" {
		t.Fatalf("server saw authorization %q, want the caller's header", resp.Link.LastError)
	}
}

func TestMarshalerNames(t *testing.T) {
	_, body := get(t, start(t, gateway.Config{}).url+"/v1/namespaces/lab/pods/r1/links/eth1", "")
	if !strings.Contains(body, `"qdiscKind"`) || !strings.Contains(body, `"carrier"`) {
		t.Fatalf("default marshaler: %s, want the OpenAPI document's names with unpopulated fields", body)
	}
	proto := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true}}
	_, body = get(t, start(t, gateway.Config{Marshaler: proto}).url+"/v1/namespaces/lab/pods/r1/links/eth1", "")
	if !strings.Contains(body, `"qdisc_kind"`) {
		t.Fatalf("UseProtoNames marshaler: %s, want proto names", body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	f := start(t, gateway.Config{})
	if code, _ := get(t, f.url+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := get(t, f.url+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz while SERVING: %d %s", code, body)
	}
	f.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := get(t, f.url+"/readyz", ""); code != 503 || !strings.Contains(body, "NOT_SERVING") {
		t.Fatalf("/readyz while NOT_SERVING: %d %s", code, body)
	}
	f.grpc.Stop()
	if code, _ := get(t, f.url+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz with the gRPC server gone: %d", code)
	}
	if code, _ := get(t, f.url+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz with the gRPC server gone: %d, want the process alive", code)
	}
}

func TestOpenAPIDocument(t *testing.T) {
	code, body := get(t, start(t, gateway.Config{}).url+"/openapi.json", "")
	var doc struct {
		Swagger string                    `json:"swagger"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil {
		t.Fatalf("/openapi.json: %d %v", code, err)
	}
	for path, method := range map[string]string{
		"/v1/namespaces/{namespace}/pods/{pod}/links/{interface}/state": "put",
		"/v1/namespaces/{namespace}/pods/{pod}/links/{interface}/netem": "delete",
		"/v1/namespaces/{namespace}/pods/{pod}:apply":                   "post",
		"/v1/namespaces/{namespace}/links":                              "get",
	} {
		if _, ok := doc.Paths[path][method]; !ok || doc.Swagger != "2.0" {
			t.Errorf("OpenAPI document lacks %s %s", method, path)
		}
	}
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "meshnet_test_total", Help: "test"}))
	if code, body := get(t, start(t, gateway.Config{Gatherer: reg}).url+"/metrics", ""); code != 200 || !strings.Contains(body, "meshnet_test_total 0") {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	if code, _ := get(t, start(t, gateway.Config{}).url+"/metrics", ""); code == 200 {
		t.Fatal("/metrics served without a gatherer")
	}
}

// TestTopologyPage: the page is served under /topology/ when given, and
// /topology sends the browser there with its namespace.
func TestTopologyPage(t *testing.T) {
	f := start(t, gateway.Config{Topology: topoview.Handler()})
	if code, body := get(t, f.url+"/topology/", ""); code != 200 || !strings.Contains(body, "topology.js") {
		t.Fatalf("/topology/: %d %s", code, body)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(f.url + "/topology?namespace=lab")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != "/topology/?namespace=lab" {
		t.Errorf("/topology?namespace=lab: %d to %q, want a redirect to /topology/?namespace=lab", resp.StatusCode, loc)
	}
	if code, _ := get(t, start(t, gateway.Config{}).url+"/topology/", ""); code == 200 {
		t.Error("/topology/ served without a page")
	}
}

func TestProfilingOnlyWhenAsked(t *testing.T) {
	if code, body := get(t, start(t, gateway.Config{Profiling: true}).url+"/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ with profiling: %d %s", code, body)
	}
	if code, _ := get(t, start(t, gateway.Config{}).url+"/debug/pprof/", ""); code == 200 {
		t.Fatal("/debug/pprof/ served without profiling asked for")
	}
}

// TestCapturePathIsTheAPIs: the capture handler serves the path link.proto
// gives CaptureLink, which the OpenAPI document shows.
func TestCapturePathIsTheAPIs(t *testing.T) {
	m := meshnetv1.File_meshnet_v1_link_proto.Services().ByName("LinkService").Methods().ByName("CaptureLink")
	rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule.GetGet() != restapi.CapturePath {
		t.Errorf("CaptureLink's REST path is %q, the gateway serves %q", rule.GetGet(), restapi.CapturePath)
	}
}
