package kubecluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images"
	"github.com/meshnet/meshnet/internal/meshnet-lab/images/debian"
)

// fabric makes the node network: a bridge in its own namespace, with the
// host on it at HostIP (the API server and the registry listen there).
func (c *Cluster) fabric() error {
	fab, err := c.netns("fabric")
	if err != nil {
		return err
	}
	steps := [][]string{
		{"nsenter", "--net=" + fab, "--", "ip", "link", "set", "lo", "up"},
		{"nsenter", "--net=" + fab, "--", "ip", "link", "add", "br0", "type", "bridge"},
		{"nsenter", "--net=" + fab, "--", "ip", "link", "set", "br0", "up"},
		{"ip", "link", "add", hostNIC, "type", "veth", "peer", "name", "fab0", "netns", filepath.Base(fab)},
		{"ip", "addr", "add", netip.PrefixFrom(HostIP, Subnet.Bits()).String(), "dev", hostNIC},
		{"ip", "link", "set", hostNIC, "up"},
		{"nsenter", "--net=" + fab, "--", "ip", "link", "set", "fab0", "master", "br0", "up"},
	}
	for i, s := range steps {
		if err := run(s...); err != nil {
			return fmt.Errorf("node network: %w", err)
		}
		if i == 3 {
			c.onClose(func() error { return run("ip", "link", "delete", hostNIC) })
		}
	}
	return nil
}

// inheritDevconf is the host's net.core.devconf_inherit_init_net.
const inheritDevconf = "/proc/sys/net/core/devconf_inherit_init_net"

// nodesForward has the nodes forward IPv4, and their pods inherit it, as on
// a real node: there init_net forwards (kubelet and every CNI need it) and a
// new network namespace starts with init_net's IPv4 settings, so a Linux
// router pod forwards without being told, as under containerlab (Docker's
// host forwards too). A lab node is not init_net, so the host has new
// namespaces copy the settings of the namespace that creates them (mode 3,
// the node's for its containerd's sandboxes, the host's for anything
// else, as before) until the cluster closes; the host's own forwarding is
// left alone.
func (c *Cluster) nodesForward() error {
	old, err := os.ReadFile(inheritDevconf)
	if err != nil {
		return fmt.Errorf("pods' IPv4 forwarding: %w", err)
	}
	if err := os.WriteFile(inheritDevconf, []byte("3"), 0o644); err != nil {
		return fmt.Errorf("pods' IPv4 forwarding: set %s to 3: %w", inheritDevconf, err)
	}
	c.onClose(func() error { return os.WriteFile(inheritDevconf, old, 0o644) })
	return nil
}

// plug connects a node's namespace to the node network as NodeNIC with ip.
func (c *Cluster) plug(nsPath string, ip netip.Addr, seq int) error {
	fab := c.FabricNetns()
	peer := fmt.Sprintf("fab%d", seq)
	steps := [][]string{
		{"nsenter", "--net=" + nsPath, "--", "ip", "link", "set", "lo", "up"},
		// A node forwards IPv4 (nodesForward).
		{"nsenter", "--net=" + nsPath, "--", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
		{"nsenter", "--net=" + nsPath, "--", "ip", "link", "add", NodeNIC, "type", "veth", "peer", "name", peer, "netns", filepath.Base(fab)},
		{"nsenter", "--net=" + nsPath, "--", "ip", "addr", "add", netip.PrefixFrom(ip, Subnet.Bits()).String(), "dev", NodeNIC},
		{"nsenter", "--net=" + nsPath, "--", "ip", "link", "set", NodeNIC, "up"},
		{"nsenter", "--net=" + fab, "--", "ip", "link", "set", peer, "master", "br0", "up"},
		// No default route (nothing may leave the machine), but ClusterIPs
		// need a route to be DNATed by kube-proxy, as a real node's
		// default route gives them.
		{"nsenter", "--net=" + nsPath, "--", "ip", "route", "add", ServiceCIDR.String(), "via", HostIP.String(), "dev", NodeNIC},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// kubeconfig writes a kubeconfig of a user in group (client certificate
// from the control plane's CA) and returns its path.
func (c *Cluster) kubeconfig(user, group string) (string, error) {
	u, err := c.ControlPlane.Env.AddUser(envtest.User{Name: user, Groups: []string{group}}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", user, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return "", err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = fmt.Sprintf("https://%s", netip.AddrPortFrom(HostIP, APIPort))
	}
	path := filepath.Join(c.opts.Dir, strings.ReplaceAll(user, ":", "-")+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// controllers starts kube-controller-manager and kube-scheduler on the host.
func (c *Cluster) controllers() error {
	kcmConfig, err := c.kubeconfig("system:kube-controller-manager", "system:masters")
	if err != nil {
		return err
	}
	schedConfig, err := c.kubeconfig("system:kube-scheduler", "system:masters")
	if err != nil {
		return err
	}
	ca := filepath.Join(c.opts.Dir, "ca.crt")
	if err := os.WriteFile(ca, c.ControlPlane.Config.CAData, 0o644); err != nil {
		return err
	}
	saKey := filepath.Join(c.ControlPlane.Env.ControlPlane.APIServer.CertDir, "sa-signer.key")
	a := c.opts.Binaries.Assets
	kcm, err := c.start("kube-controller-manager", "", filepath.Join(a, "kube-controller-manager"),
		"--kubeconfig="+kcmConfig, "--authentication-kubeconfig="+kcmConfig, "--authorization-kubeconfig="+kcmConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--service-cluster-ip-range="+ServiceCIDR.String(), "--cluster-cidr="+PodCIDR.String(),
		"--root-ca-file="+ca, "--service-account-private-key-file="+saKey, "--use-service-account-credentials=false",
		// Fast reactions for tests and labs: a node's pods are evicted only by hand.
		"--node-monitor-grace-period=60s", "--concurrent-deployment-syncs=5",
	)
	if err != nil {
		return err
	}
	c.onClose(kcm.stop)
	sched, err := c.start("kube-scheduler", "", filepath.Join(a, "kube-scheduler"),
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0")
	if err != nil {
		return err
	}
	c.onClose(sched.stop)
	return nil
}

// registry serves the images the nodes pull: the pause image, the router
// image as docker.io's alpine and busybox, meshnet's image, and the lab's
// FRR and Linux host images (cut from Debian's packages, fetched into
// debian.CacheDir() on first use) under the names lab files give them
// (images.FRRNames, images.HostNames).
func (c *Cluster) registry(ctx context.Context) error {
	r, err := images.ServeRegistry(netip.AddrPortFrom(HostIP, RegistryPort).String(), c.log)
	if err != nil {
		return err
	}
	c.Registry = r
	c.onClose(r.Close)
	b := c.opts.Binaries
	pause, err := images.Pause(b.Pause)
	if err != nil {
		return err
	}
	router, err := images.Router(b.Busybox)
	if err != nil {
		return err
	}
	meshnet, err := images.Meshnet(b.Meshnet)
	if err != nil {
		return err
	}
	push := map[string]v1.Image{
		mirrorPath(PauseImage):          pause,
		mirrorPath("alpine:latest"):     router,
		mirrorPath("busybox:latest"):    router,
		mirrorPath(c.opts.MeshnetImage): meshnet,
	}
	if err := c.labImages(ctx, push); err != nil {
		return err
	}
	for ref, img := range push {
		if err := r.Push(ctx, ref, img); err != nil {
			return err
		}
	}
	return nil
}

// labImages builds the FRR and host images and adds them to push under
// every name lab files give them.
func (c *Cluster) labImages(ctx context.Context, push map[string]v1.Image) error {
	for _, lab := range []struct {
		packages func() []string
		build    func(tree string) (v1.Image, error)
		names    func() []string
	}{
		{images.FRRPackages, images.FRR, images.FRRNames},
		{images.HostPackages, images.Host, images.HostNames},
	} {
		start := time.Now()
		tree, err := debian.Fetch(ctx, debian.CacheDir(), lab.packages())
		if err != nil {
			return fmt.Errorf("lab images: %w", err)
		}
		img, err := lab.build(tree.Dir)
		if err != nil {
			return err
		}
		c.log.Info("lab image built from Debian packages", "name", lab.names()[0], "packages", len(tree.Packages),
			"tree", tree.Dir, "took", time.Since(start).Round(time.Millisecond))
		// docker.io's and quay.io's frrouting/frr share mirror paths: the
		// same image either way.
		for _, name := range lab.names() {
			if reg, _ := splitImage(name); !slices.Contains(mirroredRegistries(), reg) {
				return fmt.Errorf("lab image %s: the nodes do not use this registry as the mirror of %s", name, reg)
			}
			push[mirrorPath(name)] = img
		}
	}
	return nil
}

// mirrorPath is the path a registry mirror is asked for an image:
// meshnet:dev -> library/meshnet:dev, registry.k8s.io/pause:3.10 ->
// pause:3.10, ghcr.io/a/b:t -> a/b:t.
func mirrorPath(image string) string {
	_, p := splitImage(image)
	return p
}

// splitImage splits an image name into its registry and mirrorPath's
// path, as containerd reads the name (docker.io when it names none).
func splitImage(image string) (registry, path string) {
	first, rest, ok := strings.Cut(image, "/")
	if !ok {
		return "docker.io", "library/" + image
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		if first == "docker.io" && !strings.Contains(rest, "/") {
			return first, "library/" + rest
		}
		return first, rest
	}
	return "docker.io", image
}
