// Package dataserver is meshnetd's DataService: the read-only data API behind
// the Grafana dashboard. It answers for the whole cluster from an informer
// cache of Topologies and Pods, so any meshnetd behind a Service can serve
// any namespace. Nodes and edges come pre-shaped as Grafana Node Graph frames
// (see topograph.Frames); each edge carries the live kernel counters of its source
// end, read from the meshnetd of the node hosting it (NodeLinks). A node
// whose meshnetd does not answer leaves its edges without counters and says
// so in detail__error; it never fails the frame.
package dataserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/topograph"
)

// Config is what a Server reads from.
type Config struct {
	// Reader is a cache of the Topologies and Pods of every node (a cache
	// limited to this node's Pods would show other nodes' pods as gone).
	Reader client.Reader
	// Links reads link ends from the nodes' kernels; nil serves frames
	// without live counters.
	Links NodeLinks
	// Timeout bounds each node's answer (default 500ms); a node's answer is
	// reused for CacheTTL (default 1s).
	Timeout, CacheTTL time.Duration
	// Log receives a record per node that did not answer; nil discards.
	Log *slog.Logger
}

// Server implements meshnetv1.DataServiceServer.
type Server struct {
	meshnetv1.UnimplementedDataServiceServer
	reader client.Reader
	live   *live
	log    *slog.Logger
}

// New returns a Server.
func New(cfg Config) *Server {
	s := &Server{reader: cfg.Reader, log: cfg.Log}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Links != nil {
		timeout, ttl := cfg.Timeout, cfg.CacheTTL
		if timeout <= 0 {
			timeout = 500 * time.Millisecond
		}
		if ttl <= 0 {
			ttl = time.Second
		}
		s.live = newLive(cfg.Links, timeout, ttl)
	}
	return s
}

func checkNamespace(ns string) error {
	if ns == "" {
		return status.Error(codes.InvalidArgument, "namespace: required")
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return status.Errorf(codes.InvalidArgument, "namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

func (s *Server) topologies(ctx context.Context, ns string) ([]v1beta1.Topology, error) {
	var list v1beta1.TopologyList
	if err := s.reader.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, status.Errorf(codes.Unavailable, "list topologies in %s: %v", ns, err)
	}
	slices.SortFunc(list.Items, func(a, b v1beta1.Topology) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// ListTopologies implements meshnetv1.DataServiceServer.
func (s *Server) ListTopologies(ctx context.Context, req *meshnetv1.ListTopologiesRequest) (*meshnetv1.ListTopologiesResponse, error) {
	if err := checkNamespace(req.GetNamespace()); err != nil {
		return nil, err
	}
	topos, err := s.topologies(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	resp := &meshnetv1.ListTopologiesResponse{Topologies: make([]*structpb.Struct, 0, len(topos))}
	for i := range topos {
		t := &topos[i]
		// A cache strips the type; managedFields are the server's
		// bookkeeping, annotations its users' (the last applied
		// configuration among them): neither is the data API's to show.
		t.APIVersion, t.Kind = v1beta1.GroupVersion.String(), "Topology"
		t.ManagedFields, t.Annotations = nil, nil
		st, err := toStruct(t)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "topology %s/%s: %v", t.Namespace, t.Name, err)
		}
		resp.Topologies = append(resp.Topologies, st)
	}
	return resp, nil
}

func toStruct(v any) (*structpb.Struct, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(m)
}

// GetNodeGraph implements meshnetv1.DataServiceServer.
func (s *Server) GetNodeGraph(ctx context.Context, req *meshnetv1.GetNodeGraphRequest) (*meshnetv1.GetNodeGraphResponse, error) {
	g, err := s.graph(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	nodes, edges := topograph.Frames(g)
	return &meshnetv1.GetNodeGraphResponse{Nodes: nodes, Edges: edges}, nil
}

// ListGraphNodes implements meshnetv1.DataServiceServer.
func (s *Server) ListGraphNodes(ctx context.Context, req *meshnetv1.ListGraphNodesRequest) (*meshnetv1.ListGraphNodesResponse, error) {
	g, err := s.graph(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	nodes, _ := topograph.Frames(g)
	return &meshnetv1.ListGraphNodesResponse{Nodes: nodes}, nil
}

// ListGraphEdges implements meshnetv1.DataServiceServer.
func (s *Server) ListGraphEdges(ctx context.Context, req *meshnetv1.ListGraphEdgesRequest) (*meshnetv1.ListGraphEdgesResponse, error) {
	g, err := s.graph(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	_, edges := topograph.Frames(g)
	return &meshnetv1.ListGraphEdgesResponse{Edges: edges}, nil
}

// GetGraphEdge implements meshnetv1.DataServiceServer.
func (s *Server) GetGraphEdge(ctx context.Context, req *meshnetv1.GetGraphEdgeRequest) (*meshnetv1.GetGraphEdgeResponse, error) {
	if err := checkNamespace(req.GetNamespace()); err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: required (an edge id of the graph, like r1:eth1--r2:eth1)")
	}
	g, err := s.graph(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	e, ends := topograph.EdgeEnds(g, req.GetId())
	if e == nil {
		return nil, status.Errorf(codes.NotFound, "id %q: no such edge in namespace %s", req.GetId(), req.GetNamespace())
	}
	return &meshnetv1.GetGraphEdgeResponse{Edge: e, Ends: ends}, nil
}

// graph gathers what namespace ns's graph is drawn from.
func (s *Server) graph(ctx context.Context, ns string) (topograph.Graph, error) {
	if err := checkNamespace(ns); err != nil {
		return topograph.Graph{}, err
	}
	topos, err := s.topologies(ctx, ns)
	if err != nil {
		return topograph.Graph{}, err
	}
	var pods corev1.PodList
	if err := s.reader.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return topograph.Graph{}, status.Errorf(codes.Unavailable, "list pods in %s: %v", ns, err)
	}
	g := topograph.Graph{Namespace: ns, Topologies: topos, Pods: make(map[string]*corev1.Pod, len(pods.Items))}
	for i := range pods.Items {
		g.Pods[pods.Items[i].Name] = &pods.Items[i]
	}
	if s.live != nil {
		g.Live, g.Unavailable = s.live.read(ctx, ns, hostingNodes(g))
		for node, why := range g.Unavailable {
			s.log.Warn("no live link counters from node", "namespace", ns, "node", node, "error", why)
		}
	} else {
		g.Unavailable = map[string]string{}
		for _, n := range hostingNodes(g) {
			g.Unavailable[n] = "this meshnetd reads no kernel counters"
		}
	}
	return g, nil
}

// hostingNodes are the Kubernetes nodes of the namespace's pods that have
// links, ordered by name.
func hostingNodes(g topograph.Graph) []string {
	seen := map[string]bool{}
	for i := range g.Topologies {
		t := &g.Topologies[i]
		if len(t.Spec.Links) == 0 {
			continue
		}
		n := t.Status.Node
		if p := g.Pods[t.Name]; p != nil && p.Spec.NodeName != "" {
			n = p.Spec.NodeName
		}
		if n != "" {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
