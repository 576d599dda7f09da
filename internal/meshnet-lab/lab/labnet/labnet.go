// Package labnet adapts internal/meshnet-lab/lab to tests: a lab whose every failure
// fails the test and which is removed when the test ends. Nodes, pods and
// physical devices are lab's; see its documentation.
package labnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// Subnet is the node network of a lab.
var Subnet = lab.Subnet

// GRPCPort and HTTPPort are every emulated node's meshnetd ports.
const (
	GRPCPort = lab.GRPCPort
	HTTPPort = lab.HTTPPort
)

// Binaries are the programs a lab runs, built once by Main.
type Binaries = lab.Binaries

// Physical is a device outside the cluster on the node network.
type Physical = lab.Physical

// PrebuiltEnv names a directory of binaries built beforehand, for test
// binaries that run where there is no Go toolchain, as in the vm tier:
// meshnetd, meshnet-cni, meshnet-controller and loopback.
const PrebuiltEnv = "MESHNET_LAB_BIN"

// Build compiles meshnetd, meshnet-cni, meshnet-controller and
// containernetworking's loopback plugin into dir.
func Build(dir string) (Binaries, error) {
	b := lab.BinariesIn(dir)
	for out, pkg := range map[string]string{
		b.Meshnetd:   "github.com/meshnet/meshnet/cmd/meshnetd",
		b.MeshnetCNI: "github.com/meshnet/meshnet/cmd/meshnet-cni",
		b.Controller: "github.com/meshnet/meshnet/cmd/meshnet-controller",
		b.Loopback:   "github.com/containernetworking/plugins/plugins/main/loopback",
	} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return b, nil
}

// Main builds the binaries for a test package's labs (or takes them from
// $MESHNET_LAB_BIN), runs its tests and removes what it built; call it from
// TestMain.
func Main(m interface{ Run() int }, bins *Binaries) int {
	ctrllog.SetLogger(logr.Discard())
	if dir := os.Getenv(PrebuiltEnv); dir != "" {
		*bins = lab.BinariesIn(dir)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "labnet-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "labnet:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	b, err := Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labnet:", err)
		return 1
	}
	*bins = b
	return m.Run()
}

// Lab is a lab bound to a test.
type Lab struct {
	*lab.Lab
	t         testing.TB
	Env       *clustertest.Env
	physicals int
	ctrl      *lab.Process
}

// Controller runs meshnet-controller on the first node, once per lab, with
// every node's meshnetd endpoint published: the controller writes the
// Topology status, from what the nodes' meshnetds tell it. Its log is
// shown when the test fails, or always with LABNET_LOGS=1.
func (l *Lab) Controller() {
	l.t.Helper()
	if l.ctrl != nil {
		return
	}
	nodes := l.Lab.Nodes()
	if len(nodes) == 0 {
		l.t.Fatal("labnet: a controller needs a node to run on")
	}
	for _, n := range nodes {
		must(l.t, n.PublishEndpoint(true))
	}
	p, err := l.StartController(nodes[0], "meshnet-controller")
	must(l.t, err)
	l.ctrl = p
	l.t.Cleanup(func() {
		if l.t.Failed() || os.Getenv("LABNET_LOGS") != "" {
			l.t.Logf("meshnet-controller log:\n%s", p.Log())
		}
	})
}

// New starts a control plane and the node network. The API server and every
// namespace are removed when the test ends.
func New(t testing.TB, bins Binaries) *Lab {
	t.Helper()
	if bins.Meshnetd == "" {
		t.Fatal("labnet: binaries not built; call labnet.Main from TestMain")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("kernel tier needs root to create network namespaces (euid %d)", os.Geteuid())
	}
	env := clustertest.Start(t)
	l, err := lab.New(lab.Options{
		Dir:          t.TempDir(),
		ControlPlane: env.ControlPlane,
		Binaries:     bins,
		// Unique per lab: tests of several packages may run at once.
		NetnsPrefix: "labnet-" + strings.ToLower(rand.Text()[:8]) + "-",
		// LABNET_PPROF=1 serves pprof from the lab's programs, to profile
		// a benchmark from outside.
		Profiling: os.Getenv("LABNET_PPROF") != "",
	})
	if err != nil {
		t.Fatalf("labnet: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("labnet: remove lab: %v", err)
		}
	})
	return &Lab{Lab: l, t: t, Env: env}
}

// MeshnetdCPU is the processor time the lab's meshnetds have used so far,
// for benchmarks that report it per operation.
func (l *Lab) MeshnetdCPU() time.Duration {
	l.t.Helper()
	u, err := l.CPU()
	must(l.t, err)
	return u.Sum("meshnetd/")
}

// Namespace creates a Kubernetes namespace (and its default service
// account) if missing.
func (l *Lab) Namespace(name string) {
	l.t.Helper()
	must(l.t, l.Lab.Namespace(name))
}

// Node is an emulated node whose failures fail the test.
type Node struct {
	*lab.Node
	t testing.TB
}

// AddNode makes a node whose node-network interface is named nic (nodes may
// use different names) and starts its meshnetd. Its log is shown when the
// test fails, or always with LABNET_LOGS=1.
func (l *Lab) AddNode(name, nic string) *Node {
	l.t.Helper()
	n, err := l.Lab.AddNode(name, nic)
	must(l.t, err)
	l.t.Cleanup(func() {
		if l.t.Failed() || os.Getenv("LABNET_LOGS") != "" {
			l.t.Logf("meshnetd log of %s:\n%s", n.Name, n.Log())
		}
	})
	return &Node{Node: n, t: l.t}
}

// Start starts the node's meshnetd again.
func (n *Node) Start() { n.t.Helper(); must(n.t, n.Node.Start()) }

// Stop stops the node's meshnetd with SIGTERM, a clean shutdown.
func (n *Node) Stop() { n.t.Helper(); must(n.t, n.Node.Stop()) }

// Kill kills the node's meshnetd, as a crash would: its socket and conflist
// stay behind.
func (n *Node) Kill() { n.t.Helper(); must(n.t, n.Node.Kill()) }

// Nodes are the lab's nodes.
func (l *Lab) Nodes() []*Node {
	var ns []*Node
	for _, n := range l.Lab.Nodes() {
		ns = append(ns, &Node{Node: n, t: l.t})
	}
	return ns
}

// Pod is an emulated pod.
type Pod struct {
	*lab.Pod
	Node *Node
}

// AddPod makes a pod sandbox on node: its network namespace, and a Pod
// object with spec.nodeName and status.hostIP set as the kubelet would.
func (l *Lab) AddPod(node *Node, namespace, name string) *Pod {
	l.t.Helper()
	p, err := l.Lab.AddPod(node.Node, namespace, name)
	must(l.t, err)
	return &Pod{Pod: p, Node: node}
}

// AddPhysical puts a physical device on the node network, at the next free
// address.
func (l *Lab) AddPhysical() *Physical {
	l.t.Helper()
	l.physicals++
	p, err := l.Lab.AddPhysical(fmt.Sprintf("dev%d", l.physicals), netip.Addr{})
	must(l.t, err)
	return p
}

// IP runs an ip command in a namespace, failing the test on error.
func (l *Lab) IP(nsPath string, args ...string) {
	l.t.Helper()
	netnstest.IP(l.t, nsPath, args...)
}

// Links lists the interface names in a namespace.
func Links(nsPath string) ([]string, error) {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	ls, err := nh.LinkList()
	for errors.Is(err, netlink.ErrDumpInterrupted) {
		ls, err = nh.LinkList()
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Attrs().Name
	}
	return names, nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// LinkClient is a LinkService client of node's meshnetd, reached in the
// node network and carrying the lab's token, as the controller calls it.
// It is closed when the test ends.
func (l *Lab) LinkClient(node *Node) meshnetv1.LinkServiceClient {
	l.t.Helper()
	token, err := os.ReadFile(l.TokenFile())
	must(l.t, err)
	bearer := "Bearer " + strings.TrimSpace(string(token))
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", node.IP, GRPCPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return node.Dial(ctx, addr) }),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", bearer), method, req, reply, cc, opts...)
		}))
	must(l.t, err)
	l.t.Cleanup(func() { conn.Close() })
	return meshnetv1.NewLinkServiceClient(conn)
}
