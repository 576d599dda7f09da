// Package dataservertest serves meshnetd's DataService for tests as the
// daemon does: over gRPC behind the gateway's REST mapping, reading an
// informer cache of a real API server (internal/meshnet-lab/controlplane/clustertest), finding other
// nodes' meshnetd through EndpointSlices.
package dataservertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver"
	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
	"github.com/meshnet/meshnet/internal/meshnetd/nscache"
	"github.com/meshnet/meshnet/internal/partition"
	"github.com/meshnet/meshnet/internal/topograph/topographtest"
)

// Harness is a DataService as meshnetd serves it: over gRPC, behind the
// gateway's REST mapping, reading an informer cache of a real API server,
// finding other nodes' meshnetd through EndpointSlices.
type Harness struct {
	t *testing.T
	// Ctx ends with the test.
	Ctx context.Context
	Env *clustertest.Env
	// Cache is the Server's reader.
	Cache *nscache.Reader
	// URL is the REST endpoint ("http://127.0.0.1:port").
	URL    string
	Server *dataserver.Server

	// loopback maps the node addresses published in EndpointSlices (which
	// may not be loopback ones) to the loopback address the test's daemon
	// listens on: no traffic goes anywhere else.
	mu       sync.Mutex
	loopback map[string]string
}

// Start serves DataService for node localNode, whose LinkService is
// local (nil: none in process).
func Start(t *testing.T, localNode string, local daemonclient.LinkLister) *Harness {
	t.Helper()
	env := clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{Namespace, DaemonNamespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	endpoints, err := partition.NewCache(ctx, env.Config, env.Scheme, DaemonNamespace)
	if err != nil {
		t.Fatal(err)
	}
	go endpoints.Start(ctx)
	if !endpoints.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	c, err := dataserver.NewReader(env.Config, env.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(ctx)
	pool := daemonclient.NewPool(nil, nil)
	t.Cleanup(func() { pool.Close() })
	h := &Harness{t: t, Ctx: ctx, Env: env, Cache: c, loopback: map[string]string{}}
	dial := func(addr string) (*grpc.ClientConn, error) {
		h.mu.Lock()
		real, ok := h.loopback[addr]
		h.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("test: no loopback address for %s", addr)
		}
		return pool.Conn(real)
	}
	h.Server = dataserver.New(dataserver.Config{
		Reader: c,
		Links: &daemonclient.Daemons{Node: localNode, Local: local, Dial: dial,
			Resolver: &partition.Resolver{Reader: endpoints, Namespace: DaemonNamespace, Service: "meshnetd", Port: "grpc"}},
		Timeout: 300 * time.Millisecond,
	})

	gs := grpc.NewServer()
	meshnetv1.RegisterDataServiceServer(gs, h.Server)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	gw, err := gateway.New(ctx, gateway.Config{Endpoint: lis.Addr().String(),
		Services: []gateway.Register{meshnetv1.RegisterDataServiceHandler}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	hs := httptest.NewServer(gw)
	t.Cleanup(hs.Close)
	h.URL = hs.URL
	return h
}

// Daemon publishes node's meshnetd, listening on loopback address addr, in
// the daemon Service's EndpointSlice under documentation address ip, as the
// EndpointSlice controller would.
func (h *Harness) Daemon(node, ip, addr string) {
	h.t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		h.t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	host := ip
	h.mu.Lock()
	h.loopback[net.JoinHostPort(ip, port)] = addr
	h.mu.Unlock()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: DaemonNamespace, Name: "meshnetd-" + node,
			Labels: map[string]string{discoveryv1.LabelServiceName: "meshnetd"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(int32(p))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if err := h.Env.Client.Create(h.Ctx, s); err != nil {
		h.t.Fatal(err)
	}
	h.Eventually("EndpointSlice of "+node+" in the cache", func() bool {
		return h.Cache.Get(h.Ctx, client.ObjectKeyFromObject(s), &discoveryv1.EndpointSlice{}) == nil
	})
}

// Pod creates a running, ready pod on node, writing its status as the
// kubelet would.
func (h *Harness) Pod(name, node, hostIP string) {
	h.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "router", Image: "frr"}}},
	}
	if err := h.Env.Client.Create(h.Ctx, p); err != nil {
		h.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: hostIP, PodIP: "10.244.0.10",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := h.Env.Client.Status().Update(h.Ctx, p); err != nil {
		h.t.Fatal(err)
	}
}

// Topology creates pod's Topology with links, and the status meshnet writes
// once they are wired on node.
func (h *Harness) Topology(pod, node string, links []v1beta1.Link, status []v1beta1.LinkStatus) {
	h.t.Helper()
	t := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: Namespace}, Spec: v1beta1.TopologySpec{Links: links}}
	if err := h.Env.Client.Create(h.Ctx, t); err != nil {
		h.t.Fatal(err)
	}
	t.Status = v1beta1.TopologyStatus{Node: node, Links: status, LinkCount: int32(len(status)),
		Conditions: []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Converged", LastTransitionTime: metav1.Now()}}}
	if err := h.Env.Client.Status().Update(h.Ctx, t); err != nil {
		h.t.Fatal(err)
	}
}

// Synced waits until the cache has obj at the version the API server has.
func (h *Harness) Synced(obj client.Object) {
	h.t.Helper()
	want := obj.GetResourceVersion()
	h.Eventually("cache at "+obj.GetName()+"@"+want, func() bool {
		got := obj.DeepCopyObject().(client.Object)
		err := h.Cache.Get(h.Ctx, client.ObjectKeyFromObject(obj), got)
		return err == nil && got.GetResourceVersion() == want
	})
}

// Gone waits until the cache no longer has obj.
func (h *Harness) Gone(obj client.Object) {
	h.t.Helper()
	h.Eventually(obj.GetName()+" gone from the cache", func() bool {
		return apierrors.IsNotFound(h.Cache.Get(h.Ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)))
	})
}

func (h *Harness) Eventually(what string, ok func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Get GETs path from the REST endpoint and decodes its JSON.
func (h *Harness) Get(path string, want int) map[string]any {
	h.t.Helper()
	resp, err := http.Get(h.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != want {
		h.t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, body, want)
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		h.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	return out
}

// Graph GETs the namespace's Node Graph, checks it against the Node Graph
// contract and returns its rows by id.
func (h *Harness) Graph() (nodes, edges map[string]map[string]any) {
	h.t.Helper()
	g := h.Get("/v1/namespaces/"+Namespace+"/graph", http.StatusOK)
	if len(g) != 2 || g["nodes"] == nil || g["edges"] == nil {
		h.t.Fatalf("graph has keys %v, want exactly one nodes and one edges frame", keysOf(g))
	}
	rows := func(frame string, m proto.Message, required []string) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, r := range g[frame].([]any) {
			row := r.(map[string]any)
			topographtest.CheckRow(h.t, m, row, required)
			out[row["id"].(string)] = row
		}
		return out
	}
	nodes = rows("nodes", &meshnetv1.GraphNode{}, topographtest.NodeColumns)
	edges = rows("edges", &meshnetv1.GraphEdge{}, topographtest.EdgeColumns)
	for id, e := range edges {
		if nodes[e["source"].(string)] == nil || nodes[e["target"].(string)] == nil {
			h.t.Errorf("edge %s: source %v / target %v is not a node id", id, e["source"], e["target"])
		}
	}
	return nodes, edges
}

// ClosedAddr is a loopback address nothing listens on: a meshnetd that is
// down.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func Up(uid int, intf string, kind v1beta1.LinkKind, mtu int32) v1beta1.LinkStatus {
	return v1beta1.LinkStatus{UID: uid, LocalIntf: intf, Kind: kind, State: v1beta1.LinkUp, Carrier: true, MTU: mtu}
}

// Namespace is the namespace the harness's pods live in; DaemonNamespace
// holds meshnetd's EndpointSlices.
const (
	Namespace       = "lab"
	DaemonNamespace = "meshnet"
)

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
