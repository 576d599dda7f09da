package labctl

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/restapi"
	"github.com/meshnet/meshnet/internal/topofile"
)

// guide is what `meshnet-lab up` prints: where things are and real
// commands to try on this lab's own pods and links.
type guide struct {
	lab        *lab.Lab
	d          *lab.Deployment
	f          *topofile.File
	kubeconfig string
	token      string
	binDir     string
	down       string // the command that removes the lab
	netem      error  // why netem does not work here; nil when it does
}

func (g guide) String() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	ns := g.d.Namespace
	w("meshnet lab is up: %d pods on %d nodes, namespace %s, API server %s",
		len(g.d.Pods), len(g.lab.Nodes()), ns, g.lab.ControlPlane.Config.Host)
	for _, n := range g.lab.Nodes() {
		var pods []string
		for _, p := range g.d.Pods {
			if p.Node == n {
				pods = append(pods, p.Name)
			}
		}
		w("  %-8s %s  meshnetd gRPC %s:%d, REST %s:%d  pods %s", n.Name, n.IP, n.IP, lab.GRPCPort, n.IP, lab.HTTPPort, strings.Join(pods, " "))
	}
	for _, p := range g.d.Physicals {
		w("  %-8s %s  physical device (netns %s)", p.Name, p.IP, filepath.Base(p.Netns))
	}
	if g.netem != nil {
		w("")
		w("WARNING: this kernel cannot shape links: %v.", g.netem)
		if errors.Is(g.netem, netem.ErrNoNetem) {
			w("  Netem edits will show Degraded in the status, with that reason. Every other part works here;")
			w("  `make lab-vm` runs the same lab inside a qemu VM with a stock Debian kernel, which has sch_netem.")
		}
	}
	l, ok := g.exampleLink()
	if !ok {
		return b.String()
	}
	local, peer := l.Endpoints[0], l.Endpoints[1]
	pod := g.d.Pod(local.Name)
	node := pod.Node
	grpcurl := "grpcurl"
	if _, err := os.Stat(filepath.Join(g.binDir, "grpcurl")); err == nil {
		grpcurl = filepath.Join(g.binDir, "grpcurl")
	}
	grpc := fmt.Sprintf("%s:%d", node.IP, lab.GRPCPort)
	rest := fmt.Sprintf("http://%s:%d/v1/namespaces/%s/pods/%s", node.IP, lab.HTTPPort, ns, local.Name)
	auth := fmt.Sprintf(`"authorization: Bearer $(cat %s)"`, g.token)
	w("")
	w("Try it (%s's %s is wired to %s's %s; %s is on %s):", local.Name, local.Intf, peer.Name, peer.Intf, local.Name, node.Name)
	w("  export KUBECONFIG=%s", g.kubeconfig)
	w("  kubectl get topo -n %s", ns)
	w("  kubectl get topo -n %s %s -o yaml          # status: what the kernel has", ns, local.Name)
	w("  kubectl edit topo -n %s %s                 # on link %s add:  netem: {delay: 50ms}", ns, local.Name, local.Intf)
	if ip := addr(peer.IP); ip != "" {
		w("  ip netns exec %s ping -c 3 %s", filepath.Base(pod.Netns), ip)
	}
	w("  %s -plaintext %s list", grpcurl, grpc)
	w(`  %s -plaintext -H %s -d '{"namespace":"%s","pod":"%s","interface":"%s","state":"LINK_STATE_DOWN"}' %s meshnet.v1.LinkService/SetLinkState`,
		grpcurl, auth, ns, local.Name, local.Intf, grpc)
	w(`  %s -plaintext -H %s -d '{"namespace":"%s","pod":"%s","interface":"%s","state":"LINK_STATE_UP"}' %s meshnet.v1.LinkService/SetLinkState`,
		grpcurl, auth, ns, local.Name, local.Intf, grpc)
	w("  curl -s %s/links", rest)
	w(`  curl -s -X PUT -H %s -d '{"delay":"0.020s","lossPercent":10}' %s/links/%s/netem`, auth, rest, local.Intf)
	w(`  curl -s -X DELETE -H %s %s/links/%s/netem`, auth, rest, local.Intf)
	w(`  curl -sN -H %s "%s/links/%s/capture?max_packets=4&duration=3s" | tshark -r -   # its traffic, live; or | wireshark -k -i -`, auth, rest, local.Intf)
	// After the runtime changes above: kubectl meshnet writes the state
	// into the Topology, which the controller then keeps.
	kubectlMeshnet(w, g.binDir, ns, local.Name, local.Intf)
	w("  curl -s http://%s:%d/v1/namespaces/%s/graph       # what Grafana's Node Graph draws", node.IP, lab.HTTPPort, ns)
	w("  curl -s http://%s:%d/metrics | grep meshnet_link_", node.IP, lab.HTTPPort)
	w("%s", pageLine("http", node.IP.String(), ns))
	w("Logs: %s (the lab), %s, %s", filepath.Join(g.lab.Dir(), logFile), filepath.Join(g.lab.Dir(), "meshnet-controller.log"), node.LogFile)
	w("Remove every trace: %s", g.down)
	return b.String()
}

// kubectlMeshnet writes the guides' kubectl meshnet lines, when binDir
// has the plugin (kubectl finds it on PATH), and reports whether it did.
func kubectlMeshnet(w func(string, ...any), binDir, ns, pod, intf string) bool {
	if _, err := os.Stat(filepath.Join(binDir, "kubectl-meshnet")); err != nil {
		return false
	}
	w("  export PATH=%s:$PATH                       # kubectl finds its plugin kubectl-meshnet there", binDir)
	w("  kubectl meshnet links -n %s", ns)
	w("  kubectl meshnet down %s %s -n %s             # a cable pull, kept in the Topology", pod, intf, ns)
	w("  kubectl meshnet up %s %s -n %s               # the Topology now says state: up: the controller keeps the link up", pod, intf, ns)
	w("  kubectl meshnet graph -n %s", ns)
	return true
}

// pageLine is the guides' line naming the topology page of namespace ns,
// as the meshnetd at ip serves it (scheme https when it serves TLS).
func pageLine(scheme, ip, ns string) string {
	return fmt.Sprintf("Topology page, live (click a link for both of its ends): %s://%s:%d%s?namespace=%s",
		scheme, ip, lab.HTTPPort, restapi.TopologyPath, ns)
}

// exampleLink is the first link between two pods, or else the first link.
func (g guide) exampleLink() (topofile.Link, bool) {
	for _, l := range g.f.Links {
		if l.IsPod(0) && l.IsPod(1) {
			return l, true
		}
	}
	for _, l := range g.f.Links {
		if l.IsPod(0) {
			return l, true
		}
	}
	return topofile.Link{}, false
}

// addr is the address of an interface address in CIDR notation.
func addr(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ""
	}
	return p.Addr().String()
}
