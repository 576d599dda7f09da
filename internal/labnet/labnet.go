// Package labnet emulates Kubernetes nodes and pods on this host, for the
// kernel test tier: a fabric namespace holds a bridge (the node network);
// each node is a network namespace on it, running its own meshnetd process
// with its own CNI directories; each pod is a network namespace with a Pod
// object in a real API server, written as a kubelet would (spec.nodeName,
// status.hostIP). CNI commands run exactly as a container runtime runs them:
// through libcni, with the conflist meshnetd installed, the primary plugin
// (containernetworking's loopback) first and meshnet-cni chained after it.
//
// Addresses are in 10.250.0.0/24 and exist only inside the lab's own
// namespaces.
package labnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/internal/clustertest"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/netnstest"
)

// Subnet is the node network of a lab.
var Subnet = netip.MustParsePrefix("10.250.0.0/24")

// GRPCPort is every emulated node's meshnetd port.
const GRPCPort = 51111

// apiPort is where each node namespace reaches the API server.
const apiPort = 6443

// Binaries are the programs a lab runs, built once by Main.
type Binaries struct {
	Meshnetd, MeshnetCNI, Controller, Loopback string
}

// Build compiles meshnetd, meshnet-cni, meshnet-controller and
// containernetworking's loopback plugin into dir.
func Build(dir string) (Binaries, error) {
	b := prebuilt(dir)
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

// PrebuiltEnv names a directory of binaries built beforehand (meshnetd,
// meshnet-cni, loopback), for test binaries that run where there is no Go
// toolchain, as in the vm tier: meshnetd, meshnet-cni, meshnet-controller
// and loopback.
const PrebuiltEnv = "MESHNET_LAB_BIN"

func prebuilt(dir string) Binaries {
	return Binaries{
		Meshnetd:   filepath.Join(dir, "meshnetd"),
		MeshnetCNI: filepath.Join(dir, "meshnet-cni"),
		Controller: filepath.Join(dir, "meshnet-controller"),
		Loopback:   filepath.Join(dir, "loopback"),
	}
}

// Main builds the binaries for a test package's labs (or takes them from
// $MESHNET_LAB_BIN), runs its tests and removes what it built; call it from
// TestMain.
func Main(m interface{ Run() int }, bins *Binaries) int {
	ctrllog.SetLogger(logr.Discard())
	if dir := os.Getenv(PrebuiltEnv); dir != "" {
		*bins = prebuilt(dir)
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

// Lab is a set of emulated nodes, pods and physical devices.
type Lab struct {
	t      testing.TB
	Env    *clustertest.Env
	Client client.Client
	Kube   kubernetes.Interface
	bins   Binaries

	Fabric     string // netns path of the bridge
	kubeconfig []byte
	tokenFile  string

	mu     sync.Mutex
	nodes  []*Node
	nextIP netip.Addr
	seq    int
}

// New starts a control plane and the fabric. The API server and every
// namespace are removed when the test ends.
func New(t testing.TB, bins Binaries) *Lab {
	t.Helper()
	if bins.Meshnetd == "" {
		t.Fatal("labnet: binaries not built; call labnet.Main from TestMain")
	}
	env := clustertest.Start(t)
	l := &Lab{t: t, Env: env, Client: env.Client, Kube: kubernetes.NewForConfigOrDie(env.Config), bins: bins,
		nextIP: Subnet.Addr().Next().Next()}
	l.Fabric = netnstest.New(t)
	l.ip(l.Fabric, "link", "set", "lo", "up")
	l.ip(l.Fabric, "link", "add", "br0", "type", "bridge")
	l.ip(l.Fabric, "link", "set", "br0", "up")

	kc, err := os.ReadFile(env.Kubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	}
	if l.kubeconfig, err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}
	l.tokenFile = l.daemonToken()
	return l
}

// daemonToken makes meshnetd's service account, allowed what PeerService
// requires of callers, and writes a token for it.
func (l *Lab) daemonToken() string {
	ctx := context.Background()
	const ns, name = "meshnet-system", "meshnetd"
	l.Namespace(ns)
	must(l.t, ignoreExists(l.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})))
	must(l.t, ignoreExists(l.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"networkop.co.uk"}, Resources: []string{"topologies", "topologies/status"},
			Verbs: []string{"get", "list", "watch", "patch", "update"}}},
	})))
	must(l.t, ignoreExists(l.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	})))
	exp := int64(3600)
	tok, err := l.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatalf("labnet: token for %s/%s: %v", ns, name, err)
	}
	path := filepath.Join(l.t.TempDir(), "token")
	must(l.t, os.WriteFile(path, []byte(tok.Status.Token), 0o600))
	return path
}

// TokenFile is the file holding the token every lab meshnetd presents to
// the others.
func (l *Lab) TokenFile() string { return l.tokenFile }

// Namespace creates a Kubernetes namespace (and its default service
// account) if missing.
func (l *Lab) Namespace(name string) {
	ctx := context.Background()
	must(l.t, ignoreExists(l.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})))
	must(l.t, ignoreExists(l.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}})))
}

// Node is an emulated node: a namespace on the fabric running meshnetd.
type Node struct {
	lab   *Lab
	Name  string
	IP    netip.Addr
	NIC   string // the node's interface on the fabric
	Netns string

	Dir, BinDir, ConfDir, StateDir, Socket string
	LogFile                                string

	mu      sync.Mutex
	cmd     *exec.Cmd
	waiters chan struct{}
}

// AddNode makes a node whose fabric interface is named nic (nodes may use
// different names) and starts its meshnetd.
func (l *Lab) AddNode(name, nic string) *Node {
	l.t.Helper()
	l.mu.Lock()
	ip := l.nextIP
	l.nextIP = ip.Next()
	l.seq++
	seq := l.seq
	l.mu.Unlock()
	n := &Node{lab: l, Name: name, IP: ip, NIC: nic, Netns: netnstest.New(l.t), Dir: l.t.TempDir()}
	n.BinDir, n.ConfDir = filepath.Join(n.Dir, "bin"), filepath.Join(n.Dir, "net.d")
	n.StateDir, n.Socket = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "run", "cni.sock")
	n.LogFile = filepath.Join(n.Dir, "meshnetd.log")
	for _, d := range []string{n.BinDir, n.ConfDir} {
		must(l.t, os.MkdirAll(d, 0o755))
	}
	data, err := os.ReadFile(l.bins.Loopback)
	must(l.t, err)
	must(l.t, os.WriteFile(filepath.Join(n.BinDir, "loopback"), data, 0o755))
	must(l.t, os.WriteFile(filepath.Join(n.ConfDir, "10-lab.conflist"),
		[]byte(`{"cniVersion": "1.1.0", "name": "lab", "plugins": [{"type": "loopback"}]}`), 0o644))
	must(l.t, os.WriteFile(filepath.Join(n.Dir, "kubeconfig"), l.kubeconfig, 0o600))

	fab := fmt.Sprintf("fab%d", seq)
	l.ip(n.Netns, "link", "set", "lo", "up")
	l.ip(n.Netns, "link", "add", nic, "type", "veth", "peer", "name", fab, "netns", filepath.Base(l.Fabric))
	l.ip(n.Netns, "addr", "add", netip.PrefixFrom(ip, Subnet.Bits()).String(), "dev", nic)
	l.ip(n.Netns, "link", "set", nic, "up")
	l.ip(l.Fabric, "link", "set", fab, "master", "br0", "up")
	l.forwardAPI(n.Netns)

	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	must(l.t, l.Client.Create(ctx, node))
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
	must(l.t, l.Client.Status().Update(ctx, node))
	l.t.Cleanup(func() { _ = l.Client.Delete(context.Background(), node) })

	l.mu.Lock()
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	n.Start()
	return n
}

// Start starts the node's meshnetd and waits until it has installed the
// CNI plugin.
func (n *Node) Start() {
	t := n.lab.t
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		t.Fatalf("labnet: meshnetd on %s already running", n.Name)
	}
	logf, err := os.OpenFile(n.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	cmd := exec.Command("nsenter", "--net="+n.Netns, "--", n.lab.bins.Meshnetd,
		"--node-name", n.Name, "--node-ip", n.IP.String(),
		"--socket", n.Socket, "--grpc-addr", fmt.Sprintf(":%d", GRPCPort),
		"--state-dir", n.StateDir, "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir,
		"--cni-plugin", n.lab.bins.MeshnetCNI, "--kubeconfig", filepath.Join(n.Dir, "kubeconfig"),
		"--token-file", n.lab.tokenFile, "--log-format", "text")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("labnet: start meshnetd on %s: %v", n.Name, err)
	}
	logf.Close()
	n.cmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.waiters = exited
	t.Cleanup(func() {
		n.stop(cmd, exited)
		if t.Failed() || os.Getenv("LABNET_LOGS") != "" {
			t.Logf("meshnetd log of %s:\n%s", n.Name, n.Log())
		}
	})
	conflist := filepath.Join(n.ConfDir, cniconf.FileName)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(conflist); err == nil {
			if c, err := net.Dial("unix", n.Socket); err == nil {
				c.Close()
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("labnet: meshnetd on %s exited: %v\n%s", n.Name, cmd.ProcessState, n.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("labnet: meshnetd on %s did not install its conflist within 60s\n%s", n.Name, n.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the node's meshnetd with SIGTERM, a clean shutdown.
func (n *Node) Stop() { n.signal(syscall.SIGTERM) }

// Set LABNET_LOGS=1 to see every node's meshnetd log, not only when a test
// fails.

// Kill kills the node's meshnetd, as a crash would: its socket and conflist
// stay behind.
func (n *Node) Kill() { n.signal(syscall.SIGKILL) }

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.waiters
	n.mu.Unlock()
	if cmd != nil {
		n.stopWith(cmd, exited, sig)
	}
}

func (n *Node) stop(cmd *exec.Cmd, exited chan struct{}) { n.stopWith(cmd, exited, syscall.SIGTERM) }

func (n *Node) stopWith(cmd *exec.Cmd, exited chan struct{}, sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != cmd {
		return
	}
	n.cmd = nil
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		n.lab.t.Errorf("labnet: meshnetd on %s did not stop within 15s on SIGTERM", n.Name)
	}
}

// Log is the node's meshnetd log so far.
func (n *Node) Log() string {
	data, _ := os.ReadFile(n.LogFile)
	return string(data)
}

// forwardAPI makes the API server reachable at 127.0.0.1:apiPort inside a
// node namespace, as it is from a real node: the listening socket is made
// in the node's namespace, each connection is relayed from the host's.
func (l *Lab) forwardAPI(nsPath string) {
	u, err := url.Parse(l.Env.Config.Host)
	if err != nil || u.Host == "" {
		l.t.Fatalf("labnet: API server address %q: %v", l.Env.Config.Host, err)
	}
	target := u.Host
	var lis net.Listener
	err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		lis, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", apiPort))
		return err
	})
	if err != nil {
		l.t.Fatalf("labnet: listen for the API server in %s: %v", nsPath, err)
	}
	l.t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
}

// Physical is a device outside the cluster on the fabric: a namespace
// standing in for a router, where a test makes its VTEP by hand.
type Physical struct {
	Netns string
	IP    netip.Addr
	NIC   string
}

// AddPhysical puts a physical device on the fabric.
func (l *Lab) AddPhysical() *Physical {
	l.t.Helper()
	l.mu.Lock()
	ip := l.nextIP
	l.nextIP = ip.Next()
	l.seq++
	seq := l.seq
	l.mu.Unlock()
	p := &Physical{Netns: netnstest.New(l.t), IP: ip, NIC: "eth0"}
	fab := fmt.Sprintf("fab%d", seq)
	l.ip(p.Netns, "link", "set", "lo", "up")
	l.ip(p.Netns, "link", "add", p.NIC, "type", "veth", "peer", "name", fab, "netns", filepath.Base(l.Fabric))
	l.ip(p.Netns, "addr", "add", netip.PrefixFrom(ip, Subnet.Bits()).String(), "dev", p.NIC)
	l.ip(p.Netns, "link", "set", p.NIC, "up")
	l.ip(l.Fabric, "link", "set", fab, "master", "br0", "up")
	return p
}

// Pod is an emulated pod: a network namespace and a Pod object.
type Pod struct {
	lab         *Lab
	Namespace   string
	Name        string
	Node        *Node
	Netns       string
	ContainerID string
}

// AddPod makes a pod sandbox on node: its network namespace, and a Pod
// object with spec.nodeName and status.hostIP set as the kubelet would.
func (l *Lab) AddPod(node *Node, namespace, name string) *Pod {
	l.t.Helper()
	ctx := context.Background()
	p := &Pod{lab: l, Namespace: namespace, Name: name, Node: node, Netns: netnstest.New(l.t)}
	p.ContainerID = "c" + strings.TrimPrefix(filepath.Base(p.Netns), "cni-")
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			Containers: []corev1.Container{{Name: "router", Image: "router"}},
		},
	}
	must(l.t, l.Client.Create(ctx, obj))
	obj.Status.Phase = corev1.PodPending
	obj.Status.HostIP = node.IP.String()
	obj.Status.HostIPs = []corev1.HostIP{{IP: node.IP.String()}}
	must(l.t, l.Client.Status().Update(ctx, obj))
	return p
}

// CNI runs one CNI command for the pod as the runtime does: libcni with the
// node's conflist (the one meshnetd wrote) and CNI bin directory.
func (p *Pod) CNI(ctx context.Context, command string) (types.Result, error) {
	list, err := libcni.ConfListFromFile(filepath.Join(p.Node.ConfDir, cniconf.FileName))
	if err != nil {
		return nil, fmt.Errorf("load conflist of node %s: %w", p.Node.Name, err)
	}
	return p.CNIWith(ctx, command, list, p.Netns)
}

// CNIWith runs a command with a given conflist and CNI_NETNS.
func (p *Pod) CNIWith(ctx context.Context, command string, list *libcni.NetworkConfigList, netnsPath string) (types.Result, error) {
	c := libcni.NewCNIConfigWithCacheDir([]string{p.Node.BinDir}, filepath.Join(p.Node.Dir, "cache"), nil)
	rt := &libcni.RuntimeConf{
		ContainerID: p.ContainerID,
		NetNS:       netnsPath,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID},
		},
	}
	switch command {
	case "ADD":
		return c.AddNetworkList(ctx, list, rt)
	case "DEL":
		return nil, c.DelNetworkList(ctx, list, rt)
	case "CHECK":
		return nil, c.CheckNetworkList(ctx, list, rt)
	}
	return nil, fmt.Errorf("unknown CNI command %q", command)
}

// CNIStatus runs CNI STATUS of a conflist on the node, as the runtime does
// to learn whether the network is ready.
func (n *Node) CNIStatus(ctx context.Context, list *libcni.NetworkConfigList) error {
	c := libcni.NewCNIConfigWithCacheDir([]string{n.BinDir}, filepath.Join(n.Dir, "cache"), nil)
	return c.GetStatusNetworkList(ctx, list)
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

// Run runs a command in the pod's namespace.
func (p *Pod) Run(name string, args ...string) (string, error) {
	return netnstest.Run(p.Netns, name, args...)
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

// Nodes are the lab's nodes.
func (l *Lab) Nodes() []*Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Node(nil), l.nodes...)
}

func (l *Lab) ip(nsPath string, args ...string) {
	l.t.Helper()
	if out, err := netnstest.Run(nsPath, "ip", args...); err != nil {
		l.t.Fatalf("labnet: ip %s in %s: %v\n%s", strings.Join(args, " "), nsPath, err, out)
	}
}

// IP runs an ip command in a namespace, failing the test on error.
func (l *Lab) IP(nsPath string, args ...string) { l.t.Helper(); l.ip(nsPath, args...) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ignoreExists(err error) error {
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}
