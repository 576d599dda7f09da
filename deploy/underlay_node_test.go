//go:build node

package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/meshnetd/underlay"
)

// intruderPod is an unprivileged pod (a user's, no capability, no way to
// gain one) pinned to node, with a writable /x for a tool.
func intruderPod(name, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  securityContext:
    runAsUser: 1000
    runAsNonRoot: true
  containers:
  - image: alpine
    name: pod
    command: ["/bin/sh", "-c", "sleep 2000000000000"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [ALL]
    volumeMounts:
    - name: x
      mountPath: /x
  volumes:
  - name: x
    emptyDir: {}
`, name, node)
}

// underlayKeepsToLinkEnds is issue 45's first attack on namespace ns's r1
// (node A) and r2 (node B), linked by VXLAN: a pod of another namespace,
// unprivileged, sends to node A's VXLAN port a datagram with the link's
// VNI carrying an ARP request, from node A itself and from node B (where
// the pod network masquerades it to node B's address, the far end's).
// Neither reaches r1's eth1: r1 learns no neighbour from it, node A's
// guard counts the first and node B's the second, and r1 still pings r2.
// The same datagram sent as node B (the far end, root in its namespace)
// does reach r1: the attack is real and only the guard stops it.
func underlayKeepsToLinkEnds(t *testing.T, c *kubecluster.Cluster, ns string) {
	ctx := context.Background()
	r1, r2 := pod(t, c, ns, "r1"), pod(t, c, ns, "r2")
	nodeA, nodeB := c.Node(r1.Spec.NodeName), c.Node(r2.Spec.NodeName)
	// The VNI as anyone computes it; the far end's datagram below proves
	// it is the link's.
	vni := strconv.FormatUint(uint64(links.VNI(ns, "r1", "r2", 1)), 10)

	tool := filepath.Join(t.TempDir(), "vxlansend")
	build := exec.Command("go", "build", "-o", tool, "./testdata/vxlansend")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vxlansend: %v\n%s", err, out)
	}
	const intruders = "intruder"
	applyManifest(t, c, intruders, intruderPod("same-node", nodeA.Name)+"---\n"+intruderPod("other-node", nodeB.Name))
	waitRunning(t, c, intruders, "same-node", "other-node")
	for _, p := range []string{"same-node", "other-node"} {
		f, err := os.Open(tool)
		if err != nil {
			t.Fatal(err)
		}
		cp := exec.CommandContext(ctx, "kubectl", "--kubeconfig", c.Kubeconfig, "-n", intruders, "exec", "-i", p, "--",
			"sh", "-c", "cat > /x/vxlansend && chmod 755 /x/vxlansend")
		cp.Stdin = f
		out, err := cp.CombinedOutput()
		f.Close()
		if err != nil {
			t.Fatalf("copy vxlansend into %s: %v\n%s", p, err, out)
		}
	}
	if out := kubectl(t, c, "-n", intruders, "exec", "same-node", "--", "id", "-u"); strings.TrimSpace(out) != "1000" {
		t.Fatalf("the intruder runs as uid %s, want 1000", out)
	}

	to := nodeA.IP.String() + ":4789"
	args := func(sender string) []string {
		return []string{"-to", to, "-vni", vni, "-sender", sender, "-target", "12.12.12.1"}
	}
	learned := func(sender string) bool {
		t.Helper()
		out := kubectl(t, c, "-n", ns, "exec", "r1", "--", "ip", "neigh", "show", sender, "dev", "eth1")
		return strings.Contains(out, "02:00:00:00:0b:ad")
	}
	dropped := func(n *kubecluster.Node) map[underlay.Reason]uint64 {
		t.Helper()
		d, err := underlay.ReadDropped(n.Netns)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		return d
	}
	eventually := func(cond func() bool) bool {
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if cond() {
				return true
			}
		}
		return false
	}

	// As the far end (node B, from the source port its meshnetd pinned
	// r2's end to) the datagram is the link's own: r1 learns the sender.
	// It proves the datagram would do harm from anyone.
	sport := recordedLink(t, nodeB, ns, "r2", 1).SrcPort
	if sport == 0 {
		t.Fatalf("r2's end has no source port of its own")
	}
	control := append(args("12.12.12.97"), "-sport", strconv.Itoa(int(sport)))
	if out, err := exec.Command("nsenter", append([]string{"--net=" + nodeB.Netns, "--", tool}, control...)...).CombinedOutput(); err != nil {
		t.Fatalf("vxlansend as node %s: %v\n%s", nodeB.Name, err, out)
	}
	if !eventually(func() bool { return learned("12.12.12.97") }) {
		t.Fatalf("the far end's datagram did not reach r1: the test proves nothing")
	}

	beforeA, beforeB := dropped(nodeA), dropped(nodeB)
	for _, a := range []struct{ pod, sender string }{{"same-node", "12.12.12.98"}, {"other-node", "12.12.12.99"}} {
		out, err := c.Kubectl(ctx, append([]string{"-n", intruders, "exec", a.pod, "--", "/x/vxlansend"}, args(a.sender)...)...)
		if err != nil {
			t.Fatalf("vxlansend from %s: %v\n%s", a.pod, err, out)
		}
	}
	if !eventually(func() bool {
		return dropped(nodeA)[underlay.NotFarEnd] > beforeA[underlay.NotFarEnd] && dropped(nodeB)[underlay.Forwarded] > beforeB[underlay.Forwarded]
	}) {
		t.Errorf("drops on node %s %v (were %v), on node %s %v (were %v): want one %s on %s and one %s on %s",
			nodeA.Name, dropped(nodeA), beforeA, nodeB.Name, dropped(nodeB), beforeB, underlay.NotFarEnd, nodeA.Name, underlay.Forwarded, nodeB.Name)
	}
	for _, sender := range []string{"12.12.12.98", "12.12.12.99"} {
		if learned(sender) {
			t.Errorf("r1 learned %s from an intruder's datagram: it reached the link", sender)
		}
	}
	ping(t, c, ns, "r1", "12.12.12.2")
	t.Logf("vni %s: the far end's datagram reached r1; the same from an unprivileged pod on %s and on %s did not (drops: %s %v, %s %v)",
		vni, nodeA.Name, nodeB.Name, nodeA.Name, dropped(nodeA), nodeB.Name, dropped(nodeB))

	// A router of the intruder's, with NET_ADMIN (not privileged) and a
	// VXLAN link of its own from node A to node B, re-points its end: an
	// FDB entry with the victims' VNI to node B, which its node's socket
	// sends from node A's address. Node B tells it from r1's end by the
	// source port, and r2 learns nothing.
	applyManifest(t, c, intruders, netAdminRouters(nodeA.Name, nodeB.Name))
	waitRunning(t, c, intruders, "x1", "x2")
	ping(t, c, intruders, "x1", "12.12.12.96")
	beforeB = dropped(nodeB)
	kubectl(t, c, "-n", intruders, "exec", "x1", "--", "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "eth1", "dst", nodeB.IP.String(), "vni", vni)
	// Broadcast ARP requests for a free address go to every FDB entry.
	c.Kubectl(ctx, "-n", intruders, "exec", "x1", "--", "ping", "-c", "2", "-W", "1", "12.12.12.90")
	if !eventually(func() bool { return dropped(nodeB)[underlay.NotFarEndsPort] > beforeB[underlay.NotFarEndsPort] }) {
		t.Errorf("drops on node %s: %v (were %v), want the re-pointed end's as %s", nodeB.Name, dropped(nodeB), beforeB, underlay.NotFarEndsPort)
	}
	out := kubectl(t, c, "-n", ns, "exec", "r2", "--", "ip", "neigh", "show", "12.12.12.95", "dev", "eth1")
	if strings.Contains(out, "lladdr") {
		t.Errorf("r2 learned x1 (12.12.12.95) from its re-pointed end: %s", out)
	}
	ping(t, c, ns, "r2", "12.12.12.1")
	t.Logf("x1's end re-pointed to vni %s: dropped by node %s (%v); r2 learned nothing", vni, nodeB.Name, dropped(nodeB))
	kubectl(t, c, "delete", "namespace", intruders, "--wait=false")
}

// recordedLink is link uid of pod ns/name as its node's meshnetd recorded
// it (the pod store under the node's /var/lib/meshnet).
func recordedLink(t *testing.T, n *kubecluster.Node, ns, name string, uid int) podstore.Link {
	t.Helper()
	store, err := podstore.Open(filepath.Join(n.Dir, "meshnet", "lib", "pods"))
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := store.Get(podstore.Key{Namespace: ns, Name: name})
	if !ok {
		t.Fatalf("node %s has no record of %s/%s", n.Name, ns, name)
	}
	for _, l := range rec.Links {
		if l.UID == uid {
			return l
		}
	}
	t.Fatalf("node %s's record of %s/%s has no link %d", n.Name, ns, name, uid)
	return podstore.Link{}
}

// netAdminRouters are two routers with NET_ADMIN and NET_RAW (not
// privileged), x1 on nodeA and x2 on nodeB, linked by eth1.
func netAdminRouters(nodeA, nodeB string) string {
	var b strings.Builder
	for _, r := range []struct{ name, peer, ip, node string }{{"x1", "x2", "12.12.12.95/24", nodeA}, {"x2", "x1", "12.12.12.96/24", nodeB}} {
		fmt.Fprintf(&b, `apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: %[1]s
spec:
  links:
  - uid: 1
    peer_pod: %[2]s
    local_intf: eth1
    local_ip: %[3]s
    peer_intf: eth1
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  nodeName: %[4]s
  containers:
  # The lab's Linux host image: iproute2's bridge, which the router
  # image's busybox lacks.
  - image: wbitt/network-multitool
    name: pod
    command: ["/bin/sh", "-c", "sleep 2000000000000"]
    securityContext:
      capabilities:
        add: [NET_ADMIN, NET_RAW]
---
`, r.name, r.peer, r.ip, r.node)
	}
	return b.String()
}
