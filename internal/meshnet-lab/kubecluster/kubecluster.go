// Package kubecluster runs a Kubernetes cluster of real nodes on one
// machine, without Docker: kube-apiserver, etcd, kube-controller-manager and
// kube-scheduler on the host; nodes that are each a network namespace on a
// bridge (the node network) and a mount namespace of their own (their
// /var/lib/kubelet, /etc/cni/net.d, /opt/cni/bin, /run/netns,
// /var/lib/meshnet ... are directories of the node), each running its own
// containerd, kubelet and kube-proxy; and a registry on the host that every
// node's containerd uses as the mirror of docker.io, registry.k8s.io,
// ghcr.io and quay.io, holding images built here (internal/meshnet-lab/images: meshnet's,
// and routers and hosts cut from Debian's packages, FRR among them). Nothing
// but Debian's packages comes from outside the machine.
//
// meshnet is then installed on it as users install it: kubectl apply -k of
// a deploy/ overlay. The real-node test tier and `make lab` use it.
package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
	"github.com/meshnet/meshnet/internal/meshnet-lab/images"
	"github.com/meshnet/meshnet/internal/meshnet-lab/teardown"
)

// Network plan. The node network is its own (not the emulated lab's
// 10.250.0.0/24), so both can run side by side.
var (
	// Subnet is the node network; the host is its first address.
	Subnet = netip.MustParsePrefix("10.251.0.0/24")
	HostIP = Subnet.Addr().Next()
	// PodCIDR holds every node's pod range, PodCIDR's /24 number i+1 for
	// node i.
	PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	// ServiceCIDR is the range of ClusterIPs (kind's).
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
)

const (
	// APIPort is the API server's port on HostIP.
	APIPort = 6443
	// RegistryPort is the image registry's port on HostIP.
	RegistryPort = 5000
	// hostNIC is the host's interface on the node network.
	hostNIC = "meshnet-kube0"
	// NodeNIC is every node's interface on the node network, named as on
	// most real nodes (meshnet-cni's macvlan manifest uses it).
	NodeNIC = "eth0"
	// PauseImage is the sandbox image every node's containerd uses.
	PauseImage = "registry.k8s.io/pause:3.10"
)

// Binaries are the programs the cluster runs: Kubernetes' from Assets
// (hack/controlplane.sh --nodes), the primary CNI's plugins, and what the
// images are made of.
type Binaries struct {
	// Assets holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kube-proxy.
	Assets string
	// CNI holds the primary CNI's plugins: bridge, host-local, loopback.
	CNI string
	// Meshnet holds meshnetd, meshnet-controller and meshnet-cni (make build).
	Meshnet string
	// Pause is the pause image's entrypoint (hack/pause); Busybox a static
	// busybox, the router image's.
	Pause, Busybox string
}

// Options configure a cluster.
type Options struct {
	// Dir holds everything the cluster writes. It must exist.
	Dir string
	// Prefix starts the name of every network namespace and the hostname
	// of every node, so that Sweep finds them after a crash.
	Prefix   string
	Nodes    int
	Binaries Binaries
	// MeshnetImage is the name meshnet's image is published under, as the
	// deploy overlay names it (docker.io/library/meshnet:dev for meshnet:dev).
	MeshnetImage string
	// Overlay, when set, is the kustomize overlay meshnet is installed from
	// (Install) while the nodes start: its DaemonSet's pods start as each
	// node registers, not once every node is Ready, and New returns once
	// meshnet is installed.
	Overlay string
	Log     *slog.Logger
}

// Cluster is a running cluster. Close removes every trace of it.
type Cluster struct {
	opts Options
	log  *slog.Logger

	ControlPlane *controlplane.ControlPlane
	Client       client.WithWatch
	Kube         kubernetes.Interface
	Registry     *images.Registry
	// Kubeconfig is an admin kubeconfig file for kubectl.
	Kubeconfig string

	mu    sync.Mutex
	undo  teardown.Stack
	nodes []*Node
}

// New starts the control plane, the registry with the images, and the
// nodes, and waits until every node is Ready (and meshnet is installed, with
// Options.Overlay). On error, what was started is removed again.
func New(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("nodes: %d, want at least 1", opts.Nodes)
	}
	if err := opts.Binaries.check(); err != nil {
		return nil, err
	}
	c = &Cluster{opts: opts, log: opts.Log}
	c.onClose(removeSharedCgroupParent) // last, after every node
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
			c = nil
		}
	}()
	// Sandboxes' mount namespaces are bound to files here; binding needs a
	// private mount (util-linux's unshare --mount=FILE).
	nsDir := filepath.Join(opts.Dir, "mnt")
	if err := privateMount(nsDir); err != nil {
		return c, err
	}
	c.onClose(func() error { return unmount(nsDir) })
	if err := os.MkdirAll(filepath.Join(opts.Dir, "logs"), 0o755); err != nil {
		return c, err
	}
	if err := c.fabric(); err != nil {
		return c, err
	}
	if err := c.nodesForward(); err != nil {
		return c, err
	}
	// The images are made and pushed while the control plane starts: both
	// are needed only once the nodes start.
	var wg sync.WaitGroup
	bg, stop := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			stop()
		}
		wg.Wait()
		stop()
	}()
	regDone := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); regDone <- c.registry(bg) }()
	apiLog, err := os.Create(filepath.Join(opts.Dir, "logs", "kube-apiserver.log"))
	if err != nil {
		return c, err
	}
	c.onClose(apiLog.Close)
	start := time.Now()
	if c.ControlPlane, err = controlplane.StartWith(opts.Binaries.Assets, controlplane.Options{Log: apiLog,
		Address: HostIP, Port: APIPort, ServiceCIDR: ServiceCIDR.String(), ServiceAccounts: true,
		Args: map[string]string{"kubelet-preferred-address-types": "InternalIP"},
	}); err != nil {
		return c, err
	}
	c.onClose(c.ControlPlane.Stop)
	c.Client, c.Kube = c.ControlPlane.Client, c.ControlPlane.Kube
	c.log.Info("API server ready", "api", c.ControlPlane.Config.Host, "took", time.Since(start).Round(time.Millisecond))
	if c.Kubeconfig, err = c.kubeconfig("admin", "system:masters"); err != nil {
		return c, err
	}
	if err := c.controllers(); err != nil {
		return c, err
	}
	var applyErr error
	if opts.Overlay != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.apply(bg, opts.Overlay); err != nil {
				applyErr = fmt.Errorf("install meshnet from %s: %w", opts.Overlay, err)
			}
		}()
	}
	if err := <-regDone; err != nil {
		return c, err
	}
	err = c.startNodes()
	wg.Wait()
	if err := errors.Join(err, applyErr); err != nil {
		return c, err
	}
	if err := c.waitNodesReady(ctx); err != nil {
		return c, err
	}
	c.log.Info("cluster ready", "nodes", opts.Nodes, "took", time.Since(start).Round(time.Millisecond))
	if opts.Overlay != "" {
		if err := c.waitInstalled(ctx); err != nil {
			return c, fmt.Errorf("install meshnet from %s: %w", opts.Overlay, err)
		}
		c.log.Info("meshnet installed", "overlay", opts.Overlay, "took", time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// startNodes starts every node at once.
func (c *Cluster) startNodes() error {
	var wg sync.WaitGroup
	errs := make([]error, c.opts.Nodes)
	for i := range c.opts.Nodes {
		n, err := c.newNode(i)
		if err != nil {
			wg.Wait()
			return err
		}
		wg.Go(func() { errs[i] = n.Start() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (b Binaries) check() error {
	need := map[string]string{}
	for _, n := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		need[n] = filepath.Join(b.Assets, n)
	}
	for _, n := range []string{"bridge", "host-local", "loopback"} {
		need["CNI plugin "+n] = filepath.Join(b.CNI, n)
	}
	for _, n := range []string{"meshnetd", "meshnet-controller", "meshnet-cni"} {
		need[n] = filepath.Join(b.Meshnet, n)
	}
	need["pause"], need["busybox"] = b.Pause, b.Busybox
	for _, n := range []string{"containerd", "containerd-shim-runc-v2", "runc", "iptables", "nsenter", "unshare"} {
		if _, err := exec.LookPath(n); err != nil {
			return fmt.Errorf("%s is not installed (hack/deps.sh installs it): %w", n, err)
		}
	}
	var errs []error
	for what, path := range need {
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("binaries missing (hack/controlplane.sh --nodes builds Kubernetes', make build meshnet's): %w", errors.Join(errs...))
	}
	return nil
}

// Nodes are the cluster's nodes.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Node is the node of that name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.opts.Dir }

// FabricNetns is the path of the node network's namespace: a capture on
// its interfaces (-i any) sees every frame between the nodes and the host.
func (c *Cluster) FabricNetns() string {
	return filepath.Join(teardown.NetnsDir, c.opts.Prefix+"fabric")
}

func (c *Cluster) onClose(f func() error) { c.undo.Push(f) }

// Close stops everything the cluster started, in reverse order, and
// removes what it made; it tries every step and returns every error.
func (c *Cluster) Close() error { return c.undo.Close() }

// waitNodesReady waits until every node's Node object is Ready.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var list corev1.NodeList
		err := c.Client.List(ctx, &list)
		ready := 0
		var not []string
		for _, n := range list.Items {
			ok := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ok = true
				}
			}
			if ok {
				ready++
			} else {
				not = append(not, n.Name)
			}
		}
		if err == nil && ready == c.opts.Nodes {
			return nil
		}
		select {
		case <-ctx.Done():
			var logs []string
			for _, n := range c.Nodes() {
				logs = append(logs, n.Name+" kubelet:\n"+tail(n.kubeletLog(), 30))
			}
			return fmt.Errorf("%d of %d nodes Ready after 3m (not ready: %s; list error: %v)\n%s", ready, c.opts.Nodes,
				strings.Join(not, ", "), err, strings.Join(logs, "\n"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Namespace creates a namespace if missing (its default ServiceAccount
// comes from kube-controller-manager).
func (c *Cluster) Namespace(ctx context.Context, name string) error {
	err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Kubectl runs kubectl with the admin kubeconfig and returns what it
// printed on stdout; when it fails, stdout and stderr (kubectl's own
// messages, and a command's under kubectl exec), which the error holds too.
// kubectl's stderr is left out of a success's output: it logs there, even
// when all went well ("Unknown stream id 1, discarding message").
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		out := stdout.String() + stderr.String()
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return stdout.String(), nil
}

// Install applies a kustomize overlay of meshnet (kubectl apply
// --server-side -k DIR), as users install it, and waits until meshnetd's
// DaemonSet is Ready on every node and meshnet-controller is Available.
func (c *Cluster) Install(ctx context.Context, overlay string) error {
	if err := c.apply(ctx, overlay); err != nil {
		return err
	}
	return c.waitInstalled(ctx)
}

// apply applies a kustomize overlay of meshnet, as users do.
func (c *Cluster) apply(ctx context.Context, overlay string) error {
	_, err := c.Kubectl(ctx, "apply", "--server-side", "-k", overlay)
	return err
}

// waitInstalled waits until meshnetd's DaemonSet is Ready on every node and
// meshnet-controller is Available.
func (c *Cluster) waitInstalled(ctx context.Context) error {
	if _, err := c.Kubectl(ctx, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=180s"); err != nil {
		return errors.Join(err, c.describe(ctx, "meshnet"))
	}
	if _, err := c.Kubectl(ctx, "-n", "meshnet", "rollout", "status", "deployment/meshnet-controller", "--timeout=180s"); err != nil {
		return errors.Join(err, c.describe(ctx, "meshnet"))
	}
	return nil
}

// describe returns, as an error, what kubectl says of the pods of a
// namespace, for a failure's message.
func (c *Cluster) describe(ctx context.Context, namespace string) error {
	out, _ := c.Kubectl(ctx, "-n", namespace, "get", "pods", "-o", "wide")
	ev, _ := c.Kubectl(ctx, "-n", namespace, "get", "events", "--sort-by=.lastTimestamp")
	var logs []string
	var pods corev1.PodList
	_ = c.Client.List(ctx, &pods, client.InNamespace(namespace))
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				continue
			}
			args := []string{"-n", namespace, "logs", p.Name, "-c", cs.Name, "--tail=15"}
			if cs.RestartCount > 0 {
				args = append(args, "--previous")
			}
			l, _ := c.Kubectl(ctx, args...)
			logs = append(logs, fmt.Sprintf("logs of %s/%s:\n%s", p.Name, cs.Name, l))
		}
	}
	return fmt.Errorf("pods of %s:\n%s\nevents:\n%s\n%s", namespace, out, tail(ev, 30), strings.Join(logs, "\n"))
}
