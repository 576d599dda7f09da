package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/cniconf"
)

// Node is an emulated node: a namespace on the node network running
// meshnetd, with its own CNI bin and conf directories.
type Node struct {
	lab   *Lab
	Name  string
	IP    netip.Addr
	NIC   string // the node's interface on the node network
	Netns string

	Dir, BinDir, ConfDir, StateDir, Socket, LogFile string

	mu       sync.Mutex
	meshnetd *Process
}

// primaryConflist is the primary CNI of every lab node: loopback only, as
// the lab has no pod network; meshnet chains after it.
const primaryConflist = `{"cniVersion": "1.1.0", "name": "lab", "plugins": [{"type": "loopback"}]}`

// AddNode makes a node whose node-network interface is named nic (nodes may
// use different names), registers its Node object and starts its meshnetd.
func (l *Lab) AddNode(name, nic string) (*Node, error) {
	ip, seq, err := l.allocate(netip.Addr{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n := &Node{lab: l, Name: name, IP: ip, NIC: nic, Dir: filepath.Join(l.opts.Dir, "nodes", name)}
	n.BinDir, n.ConfDir = filepath.Join(n.Dir, "bin"), filepath.Join(n.Dir, "net.d")
	n.StateDir, n.Socket = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "run", "cni.sock")
	n.LogFile = filepath.Join(n.Dir, "meshnetd.log")
	if err := n.prepareDirs(); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	l.onClose(func() error { return os.RemoveAll(n.Dir) })
	if n.Netns, err = l.netns("node-" + name); err != nil {
		return nil, err
	}
	if err := l.plug(n.Netns, nic, ip, seq); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := l.forwardAPI(n.Netns); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := l.registerNode(name, ip); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	l.onClose(func() error { return n.Stop() })
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) prepareDirs() error {
	for _, d := range []string{n.BinDir, n.ConfDir, n.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(n.lab.opts.Binaries.Loopback)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.BinDir, "loopback"), data, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.ConfDir, "10-lab.conflist"), []byte(primaryConflist), 0o644)
}

// plug connects the namespace at nsPath to the node network through an
// interface nic with address ip.
func (l *Lab) plug(nsPath, nic string, ip netip.Addr, seq int) error {
	fab := fmt.Sprintf("fab%d", seq)
	steps := [][]string{
		{nsPath, "ip", "link", "set", "lo", "up"},
		{nsPath, "ip", "link", "add", nic, "type", "veth", "peer", "name", fab, "netns", filepath.Base(l.Fabric)},
		{nsPath, "ip", "addr", "add", netip.PrefixFrom(ip, Subnet.Bits()).String(), "dev", nic},
		{nsPath, "ip", "link", "set", nic, "up"},
		{l.Fabric, "ip", "link", "set", fab, "master", "br0", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1], s[2:]...); err != nil {
			return err
		}
	}
	return nil
}

// registerNode writes the Node object with its InternalIP, as a kubelet
// would.
func (l *Lab) registerNode(name string, ip netip.Addr) error {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := l.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	l.onClose(func() error { return client.IgnoreNotFound(l.Client.Delete(context.Background(), node)) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
	if err := l.Client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("write status of Node %s: %w", name, err)
	}
	return nil
}

// Start starts the node's meshnetd and waits until it serves the CNI socket
// and has installed its conflist.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.meshnetd != nil && n.meshnetd.State() == nil {
		return fmt.Errorf("meshnetd on %s is already running", n.Name)
	}
	b := n.lab.opts.Binaries
	p, err := startIn("meshnetd on "+n.Name, n.Netns, n.LogFile, b.Meshnetd,
		"--node-name", n.Name, "--node-ip", n.IP.String(),
		"--socket", n.Socket, "--grpc-addr", fmt.Sprintf(":%d", GRPCPort), "--http-addr", fmt.Sprintf(":%d", HTTPPort),
		"--state-dir", n.StateDir, "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir,
		"--cni-plugin", b.MeshnetCNI, "--kubeconfig", n.lab.nodeKubeconfig,
		"--daemon-namespace", SystemNamespace, "--token-file", n.lab.tokenFile, "--log-format", "text",
		// The lab's NICs are veths to its node network: trusted as an
		// admin would trust a kind node's.
		"--macvlan-parents", n.NIC,
		// A lab on one machine for one person: its reads (the guide's curl,
		// the topology page, Grafana, /metrics) need no token. Installed
		// from deploy/, meshnetd serves reads only to those who may list
		// the namespace's Topologies.
		"--read-open",
		fmt.Sprintf("--pprof=%t", n.lab.opts.Profiling))
	if err != nil {
		return err
	}
	n.meshnetd = p
	conflist := filepath.Join(n.ConfDir, cniconf.FileName)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(conflist); err == nil {
			if c, err := net.Dial("unix", n.Socket); err == nil {
				c.Close()
				return nil
			}
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("meshnetd on %s exited: %v\n%s", n.Name, p.State(), n.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("meshnetd on %s did not install its conflist within 60s\n%s", n.Name, n.Log())
		}
	}
}

// Stop stops the node's meshnetd with SIGTERM, a clean shutdown (it removes
// its conflist).
func (n *Node) Stop() error { return n.signal(syscall.SIGTERM) }

// Kill kills the node's meshnetd, as a crash would: its socket and conflist
// stay behind.
func (n *Node) Kill() error { return n.signal(syscall.SIGKILL) }

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.meshnetd == nil {
		return nil
	}
	err := n.meshnetd.Stop(sig, 15*time.Second)
	n.meshnetd = nil
	return err
}

// PID is the process id of the node's meshnetd, 0 when it is not running:
// for tests and benchmarks that read its memory and processor time from
// /proc.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.meshnetd == nil || n.meshnetd.State() != nil {
		return 0
	}
	return n.meshnetd.cmd.Process.Pid // nsenter execs meshnetd: one process
}

// PeakRSS is the most memory the node's running meshnetd has held since
// it started, in bytes: its resident set's high-water mark (VmHWM), which
// catches a peak that a poll of its resident set misses.
func (n *Node) PeakRSS() (uint64, error) {
	pid := n.PID()
	if pid == 0 {
		return 0, fmt.Errorf("meshnetd on %s is not running", n.Name)
	}
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("meshnetd on %s: %w", n.Name, err)
	}
	st, err := proc.NewStatus()
	if err != nil {
		return 0, fmt.Errorf("meshnetd on %s: %w", n.Name, err)
	}
	return st.VmHWM, nil
}

// Log is the node's meshnetd log so far, across restarts.
func (n *Node) Log() string {
	data, _ := os.ReadFile(n.LogFile)
	return string(data)
}

// PublishEndpoint writes the node's endpoint of the meshnetd Service, one
// EndpointSlice per node, as the EndpointSlice controller (absent from the
// lab) would from the DaemonSet pod's readiness. The controller finds each
// node's meshnetd through them.
func (n *Node) PublishEndpoint(ready bool) error {
	c := n.lab.Client
	ctx := context.Background()
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: SystemNamespace, Name: "meshnetd-" + n.Name}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(s), s)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		create := err != nil
		s.Labels = map[string]string{discoveryv1.LabelServiceName: "meshnetd"}
		s.AddressType = discoveryv1.AddressTypeIPv4
		s.Endpoints = []discoveryv1.Endpoint{{
			Addresses:  []string{n.IP.String()},
			NodeName:   ptr.To(n.Name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
		}}
		s.Ports = []discoveryv1.EndpointPort{
			{Name: ptr.To("grpc"), Port: ptr.To[int32](GRPCPort), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("http"), Port: ptr.To[int32](HTTPPort), Protocol: ptr.To(corev1.ProtocolTCP)},
		}
		if create {
			return c.Create(ctx, s)
		}
		return c.Update(ctx, s)
	})
	if err != nil {
		return fmt.Errorf("endpoint of meshnetd on %s: %w", n.Name, err)
	}
	return nil
}

// Dial connects to addr from inside the node's network namespace (the
// socket is made there), e.g. to call its meshnetd's gRPC port.
func (n *Node) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.WithNetNSPath(n.Netns, func(ns.NetNS) error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}
