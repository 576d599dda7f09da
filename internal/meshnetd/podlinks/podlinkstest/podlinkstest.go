// Package podlinkstest assembles meshnetd's runtime-control side on
// loopback for tests, as the daemon does: a podlinks.Reconciler behind a
// gRPC server with the auth interceptors, its LinkService, the health service and server reflection, and
// the HTTP gateway (REST, /metrics, /healthz, /readyz, /openapi.json) on a
// second port. Pods are network namespaces the test makes, with veth links
// made by internal/meshnetd/links, recorded in a pod store as a CNI ADD would.
package podlinkstest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/access"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// Options configure a Stack.
type Options struct {
	// Pods is the pod store: the pods' records, with their runtime parts.
	Pods *podstore.Store
	// Checker checks tokens; nil leaves every method open (the vm tier,
	// which has no API server).
	Checker  *auth.Checker
	ReadOpen bool
	// Remote reaches the far ends of VXLAN links; nil has the stack
	// refuse to change their state (it has no peers).
	Remote podlinks.RemoteEnds
	// Node and NodeIP are the node's name (node-a when empty) and address
	// (127.0.0.1 when unset).
	Node   string
	NodeIP netip.Addr
}

// Stack is a running server.
type Stack struct {
	Links    *podlinks.Reconciler
	Health   *health.Server
	Registry *prometheus.Registry
	GRPCAddr string
	HTTPAddr string
	Locks    *linklock.Locks
}

// clock initialises go-tc's clock once, as meshnetd's main does.
var clock = sync.OnceValue(core.InitializeClock)

// Start serves a Stack until the test ends.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	if err := clock(); err != nil {
		t.Fatalf("initialise go-tc clock: %v", err)
	}
	if o.Node == "" {
		o.Node = "node-a"
	}
	if !o.NodeIP.IsValid() {
		o.NodeIP = netip.MustParseAddr("127.0.0.1")
	}
	locks := &linklock.Locks{}
	srv, err := podlinks.New(podlinks.Config{NodeName: o.Node, NodeIP: o.NodeIP, Store: o.Pods, Locks: locks, Remote: o.Remote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	rpc := metrics.NewRPC()
	unary := []grpc.UnaryServerInterceptor{rpc.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{rpc.StreamServerInterceptor()}
	if o.Checker != nil {
		policy := access.Policy(o.ReadOpen)
		unary = append(unary, auth.UnaryInterceptor(o.Checker, policy))
		stream = append(stream, auth.StreamInterceptor(o.Checker, policy))
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	meshnetv1.RegisterLinkServiceServer(gs, srv.LinkServer())
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	glis := listen(t)
	go gs.Serve(glis)
	t.Cleanup(gs.Stop)

	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan struct{})
	go func() { srv.Run(ctx); close(watching) }()
	t.Cleanup(func() { cancel(); <-watching })
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLinks(o.Pods, srv.ReadPod, nil), rpc)
	gw, err := gateway.New(ctx, gateway.Config{Endpoint: glis.Addr().String(), Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	hlis := listen(t)
	hsrv := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go hsrv.Serve(hlis)
	t.Cleanup(func() { hsrv.Close() })
	return &Stack{Links: srv, Health: hs, Registry: reg, GRPCAddr: glis.Addr().String(), HTTPAddr: hlis.Addr().String(),
		Locks: locks}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// Client is a LinkService client of the stack that sends token (none when
// empty) with every call.
func (s *Stack) Client(t testing.TB, token string) meshnetv1.LinkServiceClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), method, req, reply, cc, opts...)
		}), grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), desc, cc, method, opts...)
		}))
	}
	conn, err := grpc.NewClient(s.GRPCAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return meshnetv1.NewLinkServiceClient(conn)
}

// Lab makes pods: network namespaces recorded in a pod store.
type Lab struct {
	t     testing.TB
	Store *podstore.Store
	// Dir is the pod store's directory: the pods' records, with what the
	// runtime calls keep of them.
	Dir string
	ns  map[podstore.Key]*links.Netns
}

// NewLab returns a Lab with a fresh pod store.
func NewLab(t testing.TB) *Lab {
	t.Helper()
	l := &Lab{t: t, Dir: filepath.Join(t.TempDir(), "pods"), ns: map[podstore.Key]*links.Netns{}}
	l.Reopen()
	return l
}

// Reopen opens the pod store again from its directory, as a restarted
// meshnetd does, and returns it; the Lab's pods are recorded in it from
// then on. A Stack started on it before it keeps the store it had.
func (l *Lab) Reopen() *podstore.Store {
	l.t.Helper()
	store, err := podstore.Open(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	l.Store = store
	return store
}

// Pod returns the pod's netns, making it and its record on first use.
func (l *Lab) Pod(namespace, name string) *links.Netns {
	l.t.Helper()
	k := podstore.Key{Namespace: namespace, Name: name}
	if n, ok := l.ns[k]; ok {
		return n
	}
	path := netnstest.New(l.t)
	n, err := links.OpenNetns(path)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { n.Close() })
	if err := l.Store.Put(podstore.Pod{Namespace: namespace, Name: name, ContainerID: "sandbox-" + name, Netns: path}); err != nil {
		l.t.Fatal(err)
	}
	l.ns[k] = n
	return n
}

// AddLink records link l of a pod, as CNI ADD does once it is wired.
func (l *Lab) AddLink(namespace, pod string, link podstore.Link) {
	l.t.Helper()
	p, ok := l.Store.Get(podstore.Key{Namespace: namespace, Name: pod})
	if !ok {
		l.t.Fatalf("no pod %s/%s", namespace, pod)
	}
	p.Links = append(p.Links, link)
	if err := l.Store.Put(p); err != nil {
		l.t.Fatal(err)
	}
}

// End is one end of a veth for Veth.
type End struct {
	Pod, Intf string
	Addr      string // CIDR, "" for none
}

// Veth wires a veth between two pods of namespace and records both ends.
func (l *Lab) Veth(namespace string, uid int, a, b End) {
	l.t.Helper()
	end := func(e End) links.End {
		le := links.End{NS: l.Pod(namespace, e.Pod), Name: e.Intf}
		if e.Addr != "" {
			le.Addrs = []netip.Prefix{netip.MustParsePrefix(e.Addr)}
		}
		return le
	}
	if _, err := links.EnsureVeth(links.Veth{A: end(a), B: end(b)}); err != nil {
		l.t.Fatal(err)
	}
	l.AddLink(namespace, a.Pod, podstore.Link{UID: uid, LocalIntf: a.Intf, Kind: v1beta1.LinkKindVeth, PeerPod: b.Pod, PeerIntf: b.Intf})
	l.AddLink(namespace, b.Pod, podstore.Link{UID: uid, LocalIntf: b.Intf, Kind: v1beta1.LinkKindVeth, PeerPod: a.Pod, PeerIntf: a.Intf})
}

// Ping sends count pings from a pod's netns and reports whether one was
// answered, with ping's output.
func Ping(n *links.Netns, dst string, count int) (bool, string) {
	out, err := netnstest.Run(n.Path(), "ping", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", dst)
	return err == nil, out
}

// Mesh makes pods pods in namespace (m000, m001, ...), paired (m000 with
// m001, ...), with perPod veth links between the two of each pair (eth1,
// eth2, ...): pods*perPod link ends in all.
func (l *Lab) Mesh(namespace string, pods, perPod int) {
	l.t.Helper()
	uid := 0
	for i := 0; i+1 < pods; i += 2 {
		a, b := fmt.Sprintf("m%03d", i), fmt.Sprintf("m%03d", i+1)
		for j := 1; j <= perPod; j++ {
			uid++
			intf := "eth" + strconv.Itoa(j)
			l.Veth(namespace, uid, End{Pod: a, Intf: intf}, End{Pod: b, Intf: intf})
		}
	}
}
