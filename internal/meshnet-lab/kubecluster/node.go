package kubecluster

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Node is a real node: a network namespace on the node network and a
// mount namespace in which the node's own directories stand at the paths
// Kubernetes, containerd, CNI and meshnet use, running containerd, kubelet
// and kube-proxy.
type Node struct {
	c       *Cluster
	Name    string
	IP      netip.Addr
	PodCIDR netip.Prefix
	// Netns is the node's network namespace (hostNetwork pods share it);
	// MountNS the file its mount namespace is bound to.
	Netns, MountNS string
	Dir            string

	mu                          sync.Mutex
	containerd, kubelet, kproxy *process
}

// hostPaths are where the node's own directories stand inside its mount
// namespace; the DaemonSet's hostPath volumes resolve there.
var hostPaths = map[string]string{
	"/var/lib/kubelet":    "kubelet",
	"/var/log/pods":       "log/pods",
	"/var/log/containers": "log/containers",
	"/opt/cni/bin":        "cni/bin",
	"/etc/cni/net.d":      "cni/net.d",
	"/var/lib/cni":        "cni/lib",
	"/var/lib/meshnet":    "meshnet/lib",
	"/run/meshnet":        "meshnet/run",
	"/run/netns":          "netns",
	// containerd's socket stands where kubelet and the CRI tools expect it
	// (and its path stays short: unix sockets take 108 bytes at most).
	"/run/containerd": "containerd/run",
}

// newNode makes node i's namespaces, directories and CNI setup.
func (c *Cluster) newNode(i int) (*Node, error) {
	name := fmt.Sprintf("node-%d", i+1)
	ip := HostIP
	for range 10 + i {
		ip = ip.Next()
	}
	pod := PodCIDR.Addr().As4()
	pod[2] = byte(i + 1)
	n := &Node{c: c, Name: name, IP: ip, PodCIDR: netip.PrefixFrom(netip.AddrFrom4(pod), 24),
		Dir: filepath.Join(c.opts.Dir, "nodes", name)}
	for _, d := range append([]string{"containerd/root", "containerd/state"}, slices.Collect(maps.Values(hostPaths))...) {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	c.onClose(n.remove)
	var err error
	if n.Netns, err = c.netns(name); err != nil {
		return nil, err
	}
	if err := c.plug(n.Netns, ip, i+1); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	// The host, the control plane's machine, reaches the node's pods as a
	// control-plane node of kind or kubeadm does: the API server proxies
	// to aggregated APIs (meshnet's relay) at their pods' addresses.
	if err := run("ip", "route", "add", n.PodCIDR.String(), "via", ip.String(), "dev", hostNIC); err != nil {
		return nil, fmt.Errorf("node %s: route to its pods: %w", name, err)
	}
	if err := n.mountNamespace(); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := n.primaryCNI(); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}

// mountNamespace makes the node's mount namespace, bound to a file, with
// the node's directories mounted over hostPaths.
func (n *Node) mountNamespace() error {
	n.MountNS = filepath.Join(n.c.opts.Dir, "mnt", n.Name)
	if err := os.WriteFile(n.MountNS, nil, 0o600); err != nil {
		return err
	}
	// Shared as systemd makes / on real nodes: containerd requires the mount
	// holding a HostToContainer volume's path (/var/run/netns, through the
	// /var/run symlink: /) to be shared or slave.
	script := []string{"mount --make-rshared /"}
	for target, dir := range hostPaths {
		if _, err := os.Stat(target); os.IsNotExist(err) {
			// The mount point is made on the host's file system; remove it
			// at the end with what it holds, which only the cluster can
			// have put there: a kubelet being stopped was seen writing pod
			// log directories into the host's /var/log/pods once its
			// node's mounts were gone (a CI run, 05:32 on 2026-12-06).
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			n.c.onClose(func() error { _ = os.RemoveAll(target); return nil })
		}
		// Shared, so that the sandboxes' netns mounts reach meshnetd's
		// container (mountPropagation: HostToContainer needs it).
		// What the host has mounted there (iproute2's /run/netns) is
		// detached first: containerd checks the first mount it finds.
		script = append(script, fmt.Sprintf("while mountpoint -q %[2]s; do umount -l %[2]s; done; mount --bind %[1]s %[2]s && mount --make-shared %[2]s",
			filepath.Join(n.Dir, dir), target))
	}
	return run("unshare", "--mount="+n.MountNS, "--propagation", "private", "--", "/bin/sh", "-ec", strings.Join(script, "\n"))
}

// primaryCNI installs the primary CNI, containernetworking's bridge with
// host-local IPAM and masquerade, as the node's 10-bridge.conflist.
func (n *Node) primaryCNI() error {
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		data, err := os.ReadFile(filepath.Join(n.c.opts.Binaries.CNI, p))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.Dir, hostPaths["/opt/cni/bin"], p), data, 0o755); err != nil {
			return err
		}
	}
	gw := n.PodCIDR.Addr().Next()
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kubenet",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, n.PodCIDR, gw)
	return os.WriteFile(filepath.Join(n.Dir, hostPaths["/etc/cni/net.d"], "10-bridge.conflist"), []byte(conf), 0o644)
}

// Start starts the node's containerd, kubelet and kube-proxy.
func (n *Node) Start() error {
	if err := n.startRuntime(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kproxy != nil {
		return nil
	}
	kubeconfig, err := n.c.kubeconfig("system:kube-proxy:"+n.Name, "system:masters")
	if err != nil {
		return err
	}
	conf := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(kubeProxyConfig, kubeconfig, n.Name, n.IP, PodCIDR)), 0o644); err != nil {
		return err
	}
	p, err := n.c.start("kube-proxy on "+n.Name, n.Netns, filepath.Join(n.c.opts.Binaries.Assets, "kube-proxy"),
		"--config="+conf, "--v=1")
	if err != nil {
		return err
	}
	n.kproxy = p
	return nil
}

// startRuntime starts containerd and kubelet, as a node's boot does.
func (n *Node) startRuntime() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	const sock = "/run/containerd/containerd.sock" // in the node's mount namespace
	if n.containerd == nil {
		conf := filepath.Join(n.Dir, "containerd.toml")
		mirror := "http://" + netip.AddrPortFrom(HostIP, RegistryPort).String()
		data := fmt.Sprintf(containerdConfig, filepath.Join(n.Dir, "containerd/root"), filepath.Join(n.Dir, "containerd/state"), sock,
			PauseImage) + mirrorsConfig(mirror)
		if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
			return err
		}
		p, err := n.c.start("containerd on "+n.Name, n.Netns+"|"+n.MountNS, "containerd", "--config", conf)
		if err != nil {
			return err
		}
		n.containerd = p
		// The socket as the host sees it: through containerd's own root.
		if err := waitSocket(fmt.Sprintf("/proc/%d/root%s", p.pid(), sock), p, 30*time.Second); err != nil {
			return fmt.Errorf("containerd on %s: %w", n.Name, err)
		}
	}
	if n.kubelet == nil {
		kubeconfig, err := n.c.kubeconfig("system:node:"+n.Name, "system:masters")
		if err != nil {
			return err
		}
		conf := filepath.Join(n.Dir, "kubelet.yaml")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(kubeletConfig, n.IP, "unix://"+sock)), 0o644); err != nil {
			return err
		}
		p, err := n.c.start("kubelet on "+n.Name, n.Netns+"|"+n.MountNS, filepath.Join(n.c.opts.Binaries.Assets, "kubelet"),
			"--config="+conf, "--kubeconfig="+kubeconfig, "--hostname-override="+n.Name, "--node-ip="+n.IP.String(), "--v=1")
		if err != nil {
			return err
		}
		n.kubelet = p
	}
	return nil
}

// PID is the process ID of the node's component now running:
// "containerd", "kubelet" or "kube-proxy"; 0 when it is not running.
func (n *Node) PID(component string) int {
	n.mu.Lock()
	p := map[string]*process{"containerd": n.containerd, "kubelet": n.kubelet, "kube-proxy": n.kproxy}[component]
	n.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.pid()
}

func (n *Node) kubeletLog() string {
	data, _ := os.ReadFile(filepath.Join(n.c.opts.Dir, "logs", "kubelet on "+n.Name+".log"))
	return string(data)
}

// remove stops the node and everything it ran, then removes its
// namespaces and directories.
func (n *Node) remove() error {
	n.mu.Lock()
	procs := []*process{n.kproxy, n.kubelet, n.containerd}
	n.kproxy, n.kubelet, n.containerd = nil, nil, nil
	n.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if p != nil {
			if err := p.stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := killNode(n); err != nil {
		errs = append(errs, err)
	}
	if n.MountNS != "" {
		if err := unmount(n.MountNS); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(n); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove node %s: %v", n.Name, errs)
	}
	return nil
}

// waitSocket waits until a unix socket accepts connections.
func waitSocket(path string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited: %v\n%s", p.state(), tail(p.log(), 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served after %v\n%s", path, timeout, tail(p.log(), 20))
		}
	}
}

// containerdConfig: root, state, socket, sandbox image; mirrorsConfig
// follows it.
// CAP_SYS_RESOURCE is denied on this kind of host: a negative
// oom_score_adj fails, so restrict_oom_score_adj.
const containerdConfig = `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`

// mirroredRegistries are the registries whose images the cluster's
// registry serves in their stead (mirrorPath names them there): docker.io
// for alpine, busybox, frrouting/frr and network-multitool,
// registry.k8s.io for pause, ghcr.io for meshnet and hellt's
// network-multitool, quay.io for FRR's own image.
func mirroredRegistries() []string {
	return []string{"docker.io", "registry.k8s.io", "ghcr.io", "quay.io"}
}

// mirrorsConfig is containerd's CRI section naming endpoint the mirror of
// every mirrored registry.
func mirrorsConfig(endpoint string) string {
	var b strings.Builder
	for _, reg := range mirroredRegistries() {
		fmt.Fprintf(&b, "  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.%q]\n    endpoint = [%q]\n", reg, endpoint)
	}
	return b.String()
}

// kubeletConfig: address, runtime endpoint. cgroup v1 and no swap
// accounting on this kind of host; no QoS cgroups, so that nodes on one
// machine do not fight over one cgroup tree. The API server reaches the
// kubelet for exec and logs; only the node network can reach it.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
containerRuntimeEndpoint: %s
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
readOnlyPort: 0
healthzPort: 0
serializeImagePulls: false
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  imagefs.available: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
`

// kubeProxyConfig: kubeconfig, hostname, bind address, cluster CIDR.
// conntrack limits are the host's (one kernel for every node): left alone.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: %s
clusterCIDR: %s
healthzBindAddress: ""
metricsBindAddress: ""
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`
