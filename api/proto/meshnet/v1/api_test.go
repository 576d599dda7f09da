package meshnetv1

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Column names the Grafana Node Graph panel reads, field by field.
var (
	grafanaNodeColumns = []string{
		"id", "title", "subtitle", "mainstat", "secondarystat", "color",
		"arc__up", "arc__down", "detail__node", "detail__phase", "detail__kind",
		"detail__namespace", "detail__vtep", "highlighted",
	}
	grafanaEdgeColumns = []string{
		"id", "source", "target", "mainstat", "secondarystat", "color",
		"thickness", "highlighted", "strokeDasharray", "detail__kind",
		"detail__mtu", "detail__state", "detail__netem",
		"detail__source_interface", "detail__target_interface", "detail__uid",
		"detail__vni", "detail__error", "detail__tx_bytes", "detail__rx_bytes",
		"detail__tx_packets", "detail__rx_packets", "detail__tx_drops",
		"detail__rx_drops", "detail__tx_errors", "detail__rx_errors", "detail__rate_bps",
		"detail__faults",
	}
)

// grafanaMarshaler is the JSON the gateway must serve DataService with.
func grafanaMarshaler() *runtime.JSONPb {
	return &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true}}
}

func service(t *testing.T, file, name string) protoreflect.ServiceDescriptor {
	t.Helper()
	fd, err := protoregistry.GlobalFiles.FindFileByPath(file)
	if err != nil {
		t.Fatalf("find %s: %v", file, err)
	}
	sd := fd.Services().ByName(protoreflect.Name(name))
	if sd == nil {
		t.Fatalf("%s has no service %s", file, name)
	}
	return sd
}

func TestServicesHaveMethods(t *testing.T) {
	for _, tc := range []struct {
		file, service string
		methods       []string
	}{
		{"meshnet/v1/cni.proto", "CNIService", []string{"SetupPod", "TeardownPod", "CheckPod", "GarbageCollect"}},
		{"meshnet/v1/peer.proto", "PeerService", []string{"CreateRemoteEnd", "DeleteRemoteEnd", "SetRemoteState", "SetRemoteStates"}},
		{"meshnet/v1/link.proto", "LinkService", []string{"SetLinkState", "SetNetem", "ClearNetem", "SetRoutes", "GetLink", "ListLinks", "ApplyPod", "WatchLinks", "CaptureLink"}},
		{"meshnet/v1/data.proto", "DataService", []string{"ListTopologies", "GetNodeGraph", "ListGraphNodes", "ListGraphEdges", "GetGraphEdge"}},
	} {
		sd := service(t, tc.file, tc.service)
		var got []string
		for i := range sd.Methods().Len() {
			got = append(got, string(sd.Methods().Get(i).Name()))
		}
		if !slices.Equal(got, tc.methods) {
			t.Errorf("%s methods = %v, want %v", tc.service, got, tc.methods)
		}
	}
}

func TestRESTServicesHaveHTTPRules(t *testing.T) {
	for _, tc := range []struct {
		file, service string
		rest          bool
	}{
		{"meshnet/v1/link.proto", "LinkService", true},
		{"meshnet/v1/data.proto", "DataService", true},
		{"meshnet/v1/cni.proto", "CNIService", false},
		{"meshnet/v1/peer.proto", "PeerService", false},
	} {
		sd := service(t, tc.file, tc.service)
		for i := range sd.Methods().Len() {
			m := sd.Methods().Get(i)
			rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
			hasRule := rule != nil && rule.GetPattern() != nil
			switch {
			case tc.rest && !hasRule:
				t.Errorf("%s has no google.api.http rule", m.FullName())
			case !tc.rest && hasRule:
				t.Errorf("%s must not be reachable over REST, has %v", m.FullName(), rule)
			}
			if hasRule && !strings.HasPrefix(pathOf(rule), "/v1/namespaces/{namespace}/") {
				t.Errorf("%s path %q is not under /v1/namespaces/{namespace}/", m.FullName(), pathOf(rule))
			}
		}
	}
}

func pathOf(r *annotations.HttpRule) string {
	for _, p := range []string{r.GetGet(), r.GetPut(), r.GetPost(), r.GetDelete(), r.GetPatch()} {
		if p != "" {
			return p
		}
	}
	return ""
}

func TestFrameFieldsAreGrafanaColumns(t *testing.T) {
	for _, tc := range []struct {
		msg  proto.Message
		want []string
	}{
		{&GraphNode{}, grafanaNodeColumns},
		{&GraphEdge{}, grafanaEdgeColumns},
	} {
		md := tc.msg.ProtoReflect().Descriptor()
		var got []string
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			got = append(got, f.JSONName())
			switch f.Kind() {
			case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind,
				protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
				t.Errorf("%s is %s: protojson writes it as a string, Grafana wants a number", f.FullName(), f.Kind())
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s JSON names = %v, want %v", md.FullName(), got, tc.want)
		}
	}
}

// checkRow asserts that a decoded row has exactly the Grafana columns, with
// JSON numbers where the proto field is numeric.
func checkRow(t *testing.T, md protoreflect.MessageDescriptor, row map[string]any, want []string) {
	t.Helper()
	var keys []string
	for k := range row {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sorted := slices.Sorted(slices.Values(want))
	if !slices.Equal(keys, sorted) {
		t.Errorf("row keys = %v, want %v", keys, sorted)
	}
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		v := row[f.JSONName()]
		switch f.Kind() {
		case protoreflect.DoubleKind, protoreflect.FloatKind, protoreflect.Uint32Kind, protoreflect.Int32Kind:
			if _, ok := v.(float64); !ok {
				t.Errorf("%s = %#v, want a JSON number", f.JSONName(), v)
			}
		case protoreflect.StringKind:
			if _, ok := v.(string); !ok {
				t.Errorf("%s = %#v, want a JSON string", f.JSONName(), v)
			}
		case protoreflect.BoolKind:
			if _, ok := v.(bool); !ok {
				t.Errorf("%s = %#v, want a JSON bool", f.JSONName(), v)
			}
		}
	}
}

func sampleEdge() *GraphEdge {
	return &GraphEdge{
		Id: "r1:eth1--r2:eth1", Source: "r1", Target: "r2",
		Mainstat: 40, Secondarystat: 0.5, Color: "green", Thickness: 2,
		DetailKind: "vxlan", DetailMtu: 1450, DetailState: "up",
		DetailNetem: "delay 40ms loss 0.5%", DetailSourceInterface: "eth1",
		DetailTargetInterface: "eth1", DetailUid: 7, DetailVni: 4242,
		DetailTxBytes: 1 << 40, DetailRxPackets: 12,
	}
}

func TestFrameRowsMarshalToGrafanaJSON(t *testing.T) {
	node := &GraphNode{Id: "r1", Title: "r1", Subtitle: "node-a", Mainstat: 2, Secondarystat: 3,
		Color: "orange", ArcUp: 2.0 / 3, ArcDown: 1.0 / 3, DetailNode: "node-a",
		DetailPhase: "Running", DetailKind: "pod", DetailNamespace: "lab", DetailVtep: "192.0.2.10"}
	for _, tc := range []struct {
		msg  proto.Message
		want []string
	}{
		{node, grafanaNodeColumns},
		{sampleEdge(), grafanaEdgeColumns},
	} {
		b, err := grafanaMarshaler().Marshal(tc.msg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var row map[string]any
		if err := json.Unmarshal(b, &row); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		checkRow(t, tc.msg.ProtoReflect().Descriptor(), row, tc.want)
	}
}

type edgesServer struct {
	UnimplementedDataServiceServer
	gotNamespace string
}

func (s *edgesServer) ListGraphEdges(_ context.Context, req *ListGraphEdgesRequest) (*ListGraphEdgesResponse, error) {
	s.gotNamespace = req.GetNamespace()
	return &ListGraphEdgesResponse{Edges: []*GraphEdge{sampleEdge()}}, nil
}

// TestInfinityEdgesEndpoint serves the generated REST handler and reads it as
// Infinity does: GET, then the rows under the "edges" selector.
func TestInfinityEdgesEndpoint(t *testing.T) {
	srv := &edgesServer{}
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, grafanaMarshaler()))
	if err := RegisterDataServiceHandlerServer(context.Background(), mux, srv); err != nil {
		t.Fatalf("register: %v", err)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/namespaces/lab/graph/edges", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET edges: %d %s", rec.Code, rec.Body)
	}
	if srv.gotNamespace != "lab" {
		t.Errorf("namespace = %q, want lab", srv.gotNamespace)
	}
	var body map[string][]map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	if len(body["edges"]) != 1 {
		t.Fatalf("edges = %v, want one row", body)
	}
	checkRow(t, (&GraphEdge{}).ProtoReflect().Descriptor(), body["edges"][0], grafanaEdgeColumns)
	if got := body["edges"][0]["detail__tx_bytes"]; got != float64(1<<40) {
		t.Errorf("detail__tx_bytes = %#v, want %v", got, float64(1<<40))
	}
}

type applyServer struct {
	UnimplementedLinkServiceServer
	got *ApplyPodRequest
}

func (s *applyServer) ApplyPod(_ context.Context, req *ApplyPodRequest) (*ApplyPodResponse, error) {
	s.got = req
	return &ApplyPodResponse{}, nil
}

// TestApplyPodKeepsPresence posts a partial desired state over REST and
// checks that absent fields stay distinguishable from zero ones.
func TestApplyPodKeepsPresence(t *testing.T) {
	srv := &applyServer{}
	mux := runtime.NewServeMux()
	if err := RegisterLinkServiceHandlerServer(context.Background(), mux, srv); err != nil {
		t.Fatalf("register: %v", err)
	}
	body := `{"links":[{"interface":"eth1","state":"LINK_STATE_DOWN"},{"interface":"eth2","mtu":9000,"netem":{}}],"routes":{"routes":[]}}`
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/namespaces/lab/pods/r1:apply", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST apply: %d %s", rec.Code, rec.Body)
	}
	req := srv.got
	if req.GetNamespace() != "lab" || req.GetPod() != "r1" || len(req.GetLinks()) != 2 {
		t.Fatalf("request = %v", req)
	}
	eth1, eth2 := req.GetLinks()[0], req.GetLinks()[1]
	if eth1.State == nil || eth1.GetState() != LinkState_LINK_STATE_DOWN {
		t.Errorf("eth1 state = %v, want present DOWN", eth1.State)
	}
	if eth1.Mtu != nil || eth1.Netem != nil || eth1.Wiring != nil {
		t.Errorf("eth1 has fields it was not sent: %v", eth1)
	}
	if eth2.State != nil {
		t.Errorf("eth2 state = %v, want absent", eth2.GetState())
	}
	if eth2.Mtu == nil || eth2.GetMtu() != 9000 {
		t.Errorf("eth2 mtu = %v, want present 9000", eth2.Mtu)
	}
	if eth2.Netem == nil {
		t.Error("eth2 netem absent, want present and empty (remove shaping)")
	}
	if req.Routes == nil || len(req.GetRoutes().GetRoutes()) != 0 {
		t.Errorf("routes = %v, want present and empty", req.Routes)
	}
}
