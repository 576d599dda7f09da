// Package lab emulates a Kubernetes cluster on one machine for meshnet: a
// real kube-apiserver and etcd; nodes that are network namespaces on a
// bridge (the node network), each running its own meshnetd with its own CNI
// directories; meshnet-controller; and pods that are network namespaces with
// Pod objects written as a kubelet would (spec.nodeName, status.hostIP),
// wired by running the CNI conflist meshnetd installed through libcni, as a
// container runtime does. cmd/meshnet-lab runs one for people; the kernel
// and vm test tiers run many through internal/meshnet-lab/lab/labnet.
//
// Node addresses are in Subnet and exist only inside the lab's namespaces
// (and on the host, with Options.HostAccess).
package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
	"github.com/meshnet/meshnet/internal/meshnet-lab/teardown"
)

// Subnet is the node network of a lab.
var Subnet = netip.MustParsePrefix("10.250.0.0/24")

// HostIP is the host's address on the node network with Options.HostAccess.
var HostIP = Subnet.Addr().Next()

const (
	// GRPCPort and HTTPPort are every node's meshnetd ports.
	GRPCPort = 51111
	HTTPPort = 51112
	// ProfilePort serves a controller's pprof with Options.Profiling.
	ProfilePort = 51113
	// apiPort is where each node namespace reaches the API server.
	apiPort = 6443
	// SystemNamespace holds meshnetd's Service endpoints, service accounts
	// and the controller's leader lease, as deploy/ does.
	SystemNamespace = "meshnet"
)

// Binaries are the programs a lab runs.
type Binaries struct {
	Meshnetd, MeshnetCNI, Controller, Loopback string
}

// BinariesIn names the binaries in one directory, as `make lab` builds them.
func BinariesIn(dir string) Binaries {
	return Binaries{
		Meshnetd:   filepath.Join(dir, "meshnetd"),
		MeshnetCNI: filepath.Join(dir, "meshnet-cni"),
		Controller: filepath.Join(dir, "meshnet-controller"),
		Loopback:   filepath.Join(dir, "loopback"),
	}
}

// Options configure a lab.
type Options struct {
	// Dir holds everything the lab writes: kubeconfigs, tokens, node
	// directories and logs. It must exist.
	Dir string
	// ControlPlane is one the caller started and stops; when nil the lab
	// starts one from Assets, the directory holding kube-apiserver and etcd.
	ControlPlane *controlplane.ControlPlane
	Assets       string
	Binaries     Binaries
	// NetnsPrefix starts the name of every network namespace the lab makes,
	// so that Sweep finds them after a crash.
	NetnsPrefix string
	// HostAccess puts the host on the node network at HostIP, so that
	// grpcurl and curl on the host reach each node's meshnetd.
	HostAccess bool
	// Profiling serves net/http/pprof from every meshnetd (its HTTP port)
	// and controller (ProfilePort), for profiling the lab's programs.
	Profiling bool
	Log       *slog.Logger
}

// Lab is a running emulated cluster. Close removes every trace of it.
type Lab struct {
	opts Options
	log  *slog.Logger

	ControlPlane *controlplane.ControlPlane
	Client       client.WithWatch
	Kube         kubernetes.Interface
	// Fabric is the netns path of the node network's bridge.
	Fabric string

	nodeKubeconfig string // API server at 127.0.0.1:apiPort, for node namespaces
	tokenFile      string // meshnetd's service-account token

	mu    sync.Mutex
	undo  teardown.Stack
	nodes []*Node
	// controllers are those StartController started, for CPU.
	controllers []*Process
	used        map[netip.Addr]bool // node-network addresses handed out
	seq         int                 // fabric interfaces made
}

// New starts a control plane and the node network. On error, what was
// started is removed again.
func New(opts Options) (l *Lab, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	for name, path := range map[string]string{"meshnetd": opts.Binaries.Meshnetd, "meshnet-cni": opts.Binaries.MeshnetCNI,
		"meshnet-controller": opts.Binaries.Controller, "loopback": opts.Binaries.Loopback} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("lab binary %s: %w", name, err)
		}
	}
	l = &Lab{opts: opts, log: opts.Log, used: map[netip.Addr]bool{HostIP: true}}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
			l = nil
		}
	}()
	if l.ControlPlane = opts.ControlPlane; l.ControlPlane == nil {
		if l.ControlPlane, err = controlplane.Start(opts.Assets); err != nil {
			return l, err
		}
		l.onClose(l.ControlPlane.Stop)
	}
	l.Client, l.Kube = l.ControlPlane.Client, l.ControlPlane.Kube
	l.log.Info("control plane ready", "api", l.ControlPlane.Config.Host)

	if l.Fabric, err = l.netns("fabric"); err != nil {
		return l, err
	}
	if err := run(l.Fabric, "ip", "link", "set", "lo", "up"); err != nil {
		return l, err
	}
	if err := run(l.Fabric, "ip", "link", "add", "br0", "type", "bridge"); err != nil {
		return l, err
	}
	if err := run(l.Fabric, "ip", "link", "set", "br0", "up"); err != nil {
		return l, err
	}
	if opts.HostAccess {
		if err := l.joinHost(); err != nil {
			return l, err
		}
	}
	if l.nodeKubeconfig, err = l.writeKubeconfig("node-kubeconfig", fmt.Sprintf("https://127.0.0.1:%d", apiPort)); err != nil {
		return l, err
	}
	if err := l.Namespace(SystemNamespace); err != nil {
		return l, err
	}
	l.tokenFile = filepath.Join(opts.Dir, "meshnetd.token")
	if err := l.serviceAccountToken("meshnetd", daemonRules, l.tokenFile); err != nil {
		return l, err
	}
	return l, nil
}

// Dir is the lab's directory.
func (l *Lab) Dir() string { return l.opts.Dir }

// TokenFile holds the token every meshnetd presents to the others.
func (l *Lab) TokenFile() string { return l.tokenFile }

// Nodes are the lab's nodes, in the order they were added.
func (l *Lab) Nodes() []*Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Node(nil), l.nodes...)
}

// Node returns the node of that name, or nil.
func (l *Lab) Node(name string) *Node {
	for _, n := range l.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// onClose registers a step of Close; steps run in reverse order.
func (l *Lab) onClose(f func() error) { l.undo.Push(f) }

// Close stops every process and removes every namespace, interface and
// object the lab made, then the control plane. It returns every error met
// on the way, after trying every step.
func (l *Lab) Close() error { return l.undo.Close() }

// allocate hands out a node-network address (the next free one when ip is
// invalid) and a fabric interface number.
func (l *Lab) allocate(ip netip.Addr) (netip.Addr, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ip.IsValid() {
		for ip = HostIP.Next(); Subnet.Contains(ip) && l.used[ip]; ip = ip.Next() {
		}
	}
	switch {
	case !Subnet.Contains(ip) || ip == Subnet.Addr() || !Subnet.Contains(ip.Next()): // network or broadcast
		return netip.Addr{}, 0, fmt.Errorf("address %s: not a host address of the node network %s (or the network is full)", ip, Subnet)
	case l.used[ip]:
		return netip.Addr{}, 0, fmt.Errorf("address %s is already taken on the node network", ip)
	}
	l.used[ip] = true
	l.seq++
	return ip, l.seq, nil
}
