package labctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
)

// IsContainerlab reports whether path names a containerlab topology file,
// by containerlab's own naming: LAB.clab.yml or LAB.clab.yaml.
func IsContainerlab(path string) bool {
	return strings.HasSuffix(path, ".clab.yml") || strings.HasSuffix(path, ".clab.yaml")
}

// plugin is kubectl's meshnet plugin in dir, which applies containerlab
// files: the lab runs it as a user would, so that a lab file runs here as
// it runs on any cluster.
func plugin(dir string) (string, error) {
	p := filepath.Join(dir, "kubectl-meshnet")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("a containerlab file is applied with kubectl meshnet, which is not in %s (make build): %w", dir, err)
	}
	return p, nil
}

// checkContainerlab converts the lab file as kubectl meshnet clab apply
// --print does, before any node starts: a file that does not convert is
// refused at once, every problem named.
func checkContainerlab(cfg Config) error {
	if !cfg.Real {
		return fmt.Errorf("%s: a containerlab file runs its nodes' images, which the emulated lab has not (its pods are network namespaces): run it on real nodes, meshnet-lab up -real (make lab)", cfg.Topology)
	}
	p, err := plugin(cfg.BinDir)
	if err != nil {
		return err
	}
	cmd := exec.Command(p, "clab", "apply", cfg.Topology, "--print", "-n", cfg.Namespace)
	if out, err := cmd.Output(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s does not convert:\n%s", cfg.Topology, exit.Stderr)
		}
		return fmt.Errorf("kubectl meshnet clab apply %s --print: %w\n%s", cfg.Topology, err, out)
	}
	return nil
}

// serveContainerlab runs a containerlab file on real nodes: the cluster as
// serveReal makes it, the lab applied with kubectl meshnet clab apply
// --wait.
func serveContainerlab(ctx context.Context, cfg Config) (err error) {
	start := time.Now()
	c, err := startCluster(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cfg.Log.Info("removing the lab")
		err = errors.Join(err, c.Close())
	}()
	p, err := plugin(cfg.BinDir)
	if err != nil {
		return err
	}
	apply := exec.CommandContext(ctx, p, "--kubeconfig", c.Kubeconfig, "-n", cfg.Namespace, "clab", "apply", cfg.Topology, "--wait", "--timeout", "3m")
	out, err := apply.CombinedOutput()
	cfg.Log.Info("kubectl meshnet clab apply", "file", cfg.Topology, "output", string(out))
	if err != nil {
		return fmt.Errorf("kubectl meshnet clab apply %s: %w\n%s", cfg.Topology, err, out)
	}
	caFile, err := writeCA(ctx, c, cfg.Dir)
	if err != nil {
		return err
	}
	g := clabGuide{c: c, ns: cfg.Namespace, file: cfg.Topology, down: downCommand(cfg.Dir), binDir: cfg.BinDir, caFile: caFile}
	routed := time.Now()
	if err := g.waitRouted(ctx, time.Minute); err != nil {
		cfg.Log.Warn("the lab's hosts do not reach each other", "error", err)
	} else {
		cfg.Log.Info("the lab's routers converged", "from", g.from, "to", g.to, "took", time.Since(routed).Round(time.Millisecond))
	}
	g.took = time.Since(start)
	text, err := g.String(ctx)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, guideFile), []byte(text), 0o644); err != nil {
		return err
	}
	cfg.Log.Info("lab ready", "kubeconfig", c.Kubeconfig, "took", time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return nil
}

// clabGuide is what `meshnet-lab up -real LAB.clab.yml` prints, written
// from the lab as it runs: its pods and Topologies, and for the routers
// (pods of an FRR image) their routing protocol as vtysh reports it.
type clabGuide struct {
	c      *kubecluster.Cluster
	ns     string
	file   string
	down   string
	binDir string
	caFile string
	took   time.Duration
	// from, to: the first host, and the address of the last host, which
	// from reaches once the lab's routers converged ("" when the lab has
	// fewer than two hosts, or they do not).
	from, to string
}

// waitRouted waits until the lab's routers' OSPF converged and
// the lab's first host reaches its last host, as the routers converge after
// their pods started (a few seconds more): the guide's first traceroute then
// shows the shortest path. A lab whose hosts do not reach each
// other within the time has a guide without traceroutes.
func (g *clabGuide) waitRouted(ctx context.Context, within time.Duration) error {
	var pods corev1.PodList
	if err := g.c.Client.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		return err
	}
	var hosts []corev1.Pod
	for _, p := range pods.Items {
		if !frrImage(p) {
			hosts = append(hosts, p)
		}
	}
	deadline := time.Now().Add(within)
	if err := g.waitConverged(ctx, pods.Items, deadline); err != nil {
		return err
	}
	from, to := g.hostPair(ctx, hosts)
	if to == "" {
		return nil
	}
	for {
		if _, err := g.c.Kubectl(ctx, "-n", g.ns, "exec", from, "--", "ping", "-c", "1", "-W", "1", to); err == nil {
			g.from, g.to = from, to
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not reach %s within %v", from, to, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// frrImage tells a router of the lab: FRR's images, on its registries and
// as the lab's registry serves them.
func frrImage(p corev1.Pod) bool {
	return len(p.Spec.Containers) > 0 && strings.Contains(p.Spec.Containers[0].Image, "frr")
}

func (g *clabGuide) String(ctx context.Context) (string, error) {
	var pods corev1.PodList
	if err := g.c.Client.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		return "", err
	}
	var topos v1beta1.TopologyList
	if err := g.c.Client.List(ctx, &topos, client.InNamespace(g.ns)); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	byNode := map[string][]string{}
	var routers []corev1.Pod
	for _, p := range pods.Items {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		if frrImage(p) {
			routers = append(routers, p)
		}
	}
	w("meshnet lab %s is up on real nodes in %v: %d pods on %d nodes (kubelet, containerd), namespace %s, API server %s",
		filepath.Base(g.file), g.took.Round(time.Second), len(pods.Items), len(g.c.Nodes()), g.ns, g.c.ControlPlane.Config.Host)
	for _, n := range g.c.Nodes() {
		w("  %-8s %s  pods %s", n.Name, n.IP, strings.Join(byNode[n.Name], " "))
	}
	w("")
	w("Try it:")
	w("  export KUBECONFIG=%s", g.c.Kubeconfig)
	w("  export PATH=%s:$PATH                       # kubectl finds its plugin kubectl-meshnet there", g.binDir)
	w("  kubectl get pods,topo -n %s -o wide", g.ns)
	w("  kubectl meshnet links -n %s", g.ns)
	if len(routers) > 0 {
		r := routers[0].Name
		out, _ := g.c.Kubectl(ctx, "-n", g.ns, "exec", r, "--", "vtysh", "-c", "show running-config")
		switch {
		case strings.Contains(out, "router ospf"):
			w("  kubectl exec -n %s %s -- vtysh -c 'show ip ospf neighbor'   # its OSPF neighbours, Full", g.ns, r)
		case strings.Contains(out, "router bgp"):
			w("  kubectl exec -n %s %s -- vtysh -c 'show bgp summary'         # its BGP sessions", g.ns, r)
		}
		w("  kubectl exec -n %s %s -- vtysh -c 'show ip route'", g.ns, r)
	}
	trace := ""
	if g.to != "" {
		trace = fmt.Sprintf("kubectl exec -n %s %s -- traceroute -n -q 1 -w 1 -m 8 %s", g.ns, g.from, g.to)
		w("  %s   # the path from %s to %s", trace, g.from, g.to)
	}
	if pod, intf, peer, ok := cable(topos.Items, routers); ok {
		w("  kubectl meshnet down %s %s -n %s   # pull the cable %s:%s - %s: both ends down, kept in the Topology", pod, intf, g.ns, pod, intf, peer)
		if trace != "" {
			w("  %s   # around the pulled cable: the routers saw its carrier go", trace)
		}
		w("  kubectl meshnet up %s %s -n %s     # put it back", pod, intf, g.ns)
		if trace != "" {
			w("  sleep 15; %s   # the first path again, once the routers are neighbours again (about 10 s)", trace)
		}
	}
	w("  kubectl meshnet graph -n %s", g.ns)
	if pod, intf, _, ok := cable(topos.Items, routers); ok {
		w("  kubectl meshnet capture %s %s -n %s -c 4 --duration 3s -w - | tshark -r -   # its packets, live, through the API server; or | wireshark -k -i -", pod, intf, g.ns)
	}
	if len(pods.Items) > 0 {
		p := pods.Items[0]
		api := nodeAPI{binDir: g.binDir, caFile: g.caFile, hostIP: p.Status.HostIP}
		api.lines(w, "ListLinks", fmt.Sprintf(`{"namespace":"%s","pod":"%s"}`, g.ns, p.Name), "the same, straight from the node's meshnetd",
			fmt.Sprintf("/v1/namespaces/%s/pods/%s/links", g.ns, p.Name), "and over REST")
		w("%s", pageLine(api.scheme(), p.Status.HostIP, g.ns))
		w("Paste a token into the page's token field: kubectl -n meshnet create token meshnet-operator --audience meshnetd (any token that may list the namespace's Topologies).")
	}
	w("Change the lab: edit %s, then kubectl meshnet clab apply %s -n %s", g.file, g.file, g.ns)
	w("Remove it: %s", g.down)
	return b.String(), nil
}

// waitConverged waits until the lab's routers that run OSPF have
// converged (ospfConverged): a Full adjacency over each of their links to
// another router, and the same complete database everywhere. The hosts
// may reach each other before, over the first adjacencies up, by a longer
// path than the guide's first traceroute is to show.
func (g *clabGuide) waitConverged(ctx context.Context, pods []corev1.Pod, deadline time.Time) error {
	var topos v1beta1.TopologyList
	if err := g.c.Client.List(ctx, &topos, client.InNamespace(g.ns)); err != nil {
		return err
	}
	var routers []corev1.Pod
	for _, p := range pods {
		if frrImage(p) {
			routers = append(routers, p)
		}
	}
	isRouter := func(name string) bool {
		return slices.ContainsFunc(routers, func(p corev1.Pod) bool { return p.Name == name })
	}
	wantFull := map[string]int{}
	var ospf []string
	for _, r := range routers {
		for _, t := range topos.Items {
			if t.Name == r.Name {
				for _, l := range t.Spec.Links {
					if isRouter(l.PeerPod) {
						wantFull[r.Name]++
					}
				}
			}
		}
		conf, _ := g.c.Kubectl(ctx, "-n", g.ns, "exec", r.Name, "--", "vtysh", "-c", "show running-config")
		if wantFull[r.Name] > 0 && strings.Contains(conf, "router ospf") {
			ospf = append(ospf, r.Name)
		}
	}
	if len(ospf) == 0 {
		return nil
	}
	for {
		views, err := g.ospfViews(ctx, ospf)
		if err == nil {
			err = ospfConverged(views, wantFull)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the routers' OSPF has not converged: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Converged, then the shortest paths: each router runs SPF within its
	// throttle (examples/frr-ospf: 50 ms, at most 500 ms).
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	return nil
}

// ospfViews reads the OSPF state of the routers.
func (g *clabGuide) ospfViews(ctx context.Context, routers []string) ([]ospfView, error) {
	args := []string{"-n", g.ns, "exec", "", "--", "vtysh"}
	for _, c := range ospfCommands {
		args = append(args, "-c", c)
	}
	var views []ospfView
	for _, r := range routers {
		args[3] = r
		out, err := g.c.Kubectl(ctx, args...)
		if err != nil {
			return nil, err
		}
		v, err := parseOSPFView(r, strings.NewReader(out))
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	return views, nil
}

// hostPair is the first host and the IPv4 address of the last host's
// first link (as its kernel has it, exec having set it), for a traceroute
// across the lab; "" when the lab has fewer than two hosts.
func (g *clabGuide) hostPair(ctx context.Context, hosts []corev1.Pod) (from, to string) {
	if len(hosts) < 2 {
		return "", ""
	}
	last := hosts[len(hosts)-1].Name
	out, err := g.c.Kubectl(ctx, "-n", g.ns, "exec", last, "--", "ip", "-4", "-o", "addr", "show", "eth1")
	if err != nil {
		return "", ""
	}
	f := strings.Fields(out)
	i := slices.Index(f, "inet")
	if i < 0 || i+1 >= len(f) {
		return "", ""
	}
	addr, _, _ := strings.Cut(f[i+1], "/")
	return hosts[0].Name, addr
}

// cable is the first link between two routers, as the first router's
// Topology lists it: pulling it makes the routers find another path.
func cable(topos []v1beta1.Topology, routers []corev1.Pod) (pod, intf, peer string, ok bool) {
	isRouter := func(name string) bool {
		return slices.ContainsFunc(routers, func(p corev1.Pod) bool { return p.Name == name })
	}
	for _, r := range routers {
		for _, t := range topos {
			if t.Name != r.Name {
				continue
			}
			for _, l := range t.Spec.Links {
				if isRouter(l.PeerPod) {
					return t.Name, l.LocalIntf, l.PeerPod + ":" + l.PeerIntf, true
				}
			}
		}
	}
	return "", "", "", false
}
