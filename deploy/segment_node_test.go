//go:build node

package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
)

// lanLab is a containerlab file of three FRR routers on one bridge.
const lanLab = "../examples/frr-ospf-lan/frr-ospf-lan.clab.yml"

// ospfNeighbour is a line of vtysh's show ip ospf neighbor: the
// neighbour's router id and its state/role.
var ospfNeighbour = regexp.MustCompile(`(?m)^(10\.10\.10\.\d+)\s+\d+\s+(\S+)`)

// broadcastSegmentAcrossNodes runs lanLab as kubectl meshnet clab apply
// converts it, with the pods placed so that the segment spans both nodes:
// router1 and router2 on the first with nothing else, router3 and lan1
// (the bridge) on the second, so that lan1 has two VXLAN ports and a veth.
// OSPF runs over it as a broadcast network: one DR and one BDR are
// elected and each router is Full with the other two. A cable pull at
// router3's port cuts router3 off (its neighbours lose it, the others stay
// Full); the cable put back brings it back, Full.
func broadcastSegmentAcrossNodes(t *testing.T, c *kubecluster.Cluster, ns string) {
	ctx := context.Background()
	data, err := os.ReadFile(lanLab)
	if err != nil {
		t.Fatal(err)
	}
	lab, err := clabfile.Parse(data, os.DirFS(filepath.Dir(lanLab)), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := lab.Objects(ns)
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	place := map[string]string{"router1": nodes[0].Name, "router2": nodes[0].Name, "router3": nodes[1].Name, "lan1": nodes[1].Name}
	for i := range objs.Pods {
		objs.Pods[i].Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": place[objs.Pods[i].Name]}
	}
	var manifest bytes.Buffer
	if err := objs.WriteYAML(&manifest); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	applyManifest(t, c, ns, manifest.String())
	kubectl(t, c, "-n", ns, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=3m")
	kubectl(t, c, "-n", ns, "wait", "--for=condition=Ready", "topology", "--all", "--timeout=1m")
	t.Logf("the segment lab's pods and Topologies Ready %v after the apply", time.Since(start).Round(time.Second))
	defer func() {
		if t.Failed() {
			for _, r := range []string{"router1", "router2", "router3"} {
				out, err := c.Kubectl(ctx, "-n", ns, "exec", r, "--", "sh", "-c", "ip -d link show eth1; vtysh -c 'show ip ospf interface eth1'")
				t.Logf("%s (%v):\n%s", r, err, out)
			}
			t.Logf("$ kubectl meshnet links\n%s", kubectlMeshnet(t, c.Kubeconfig, ns, "links"))
		}
	}()
	out := kubectlMeshnet(t, c.Kubeconfig, ns, "links", "lan1")
	if strings.Count(out, "vxlan") != 2 || strings.Count(out, "veth") != 1 {
		t.Errorf("lan1's ports: want two VXLANs (router1, router2) and a veth (router3):\n%s", out)
	}

	roles := func() (map[string]map[string]string, string) {
		all, seen := map[string]map[string]string{}, ""
		for _, r := range []string{"router1", "router2", "router3"} {
			out, _ := c.Kubectl(ctx, "-n", ns, "exec", r, "--", "vtysh", "-c", "show ip ospf neighbor")
			seen += r + ":\n" + out
			all[r] = map[string]string{}
			for _, m := range ospfNeighbour.FindAllStringSubmatch(out, -1) {
				all[r][m[1]] = m[2]
			}
		}
		return all, seen
	}
	full := func(r string, n int) func() (bool, string) {
		return func() (bool, string) {
			all, seen := roles()
			k := 0
			for _, st := range all[r] {
				if strings.HasPrefix(st, "Full/") {
					k++
				}
			}
			return k == n && len(all[r]) == n, seen
		}
	}
	for _, r := range []string{"router1", "router2", "router3"} {
		eventually(t, 2*time.Minute, r+"'s two OSPF neighbours Full over the segment", full(r, 2))
	}
	t.Logf("every OSPF neighbour Full %v after the apply", time.Since(start).Round(time.Second))
	// One DR and one BDR, as each router sees the others.
	all, seen := roles()
	dr, bdr := map[string]bool{}, map[string]bool{}
	for _, ns := range all {
		for id, st := range ns {
			switch st {
			case "Full/DR":
				dr[id] = true
			case "Full/Backup":
				bdr[id] = true
			}
		}
	}
	if len(dr) != 1 || len(bdr) != 1 {
		t.Errorf("DRs %v, BDRs %v; want one of each:\n%s", dr, bdr, seen)
	}
	ping(t, c, ns, "router1", "10.10.10.3")

	pulled := time.Now()
	kubectlMeshnet(t, c.Kubeconfig, ns, "down", "router3", "eth1")
	eventually(t, 30*time.Second, "router1 without router3, Full with router2", full("router1", 1))
	t.Logf("router3's cable pulled: router1 lost it %v after kubectl meshnet down started", time.Since(pulled).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "router2 without router3", full("router2", 1))
	if _, err := c.Kubectl(ctx, "-n", ns, "exec", "router1", "--", "ping", "-c", "1", "-W", "1", "10.0.0.3"); err == nil {
		t.Errorf("router1 reaches router3, whose cable is pulled")
	}
	kubectlMeshnet(t, c.Kubeconfig, ns, "up", "router3", "eth1")
	for _, r := range []string{"router1", "router2", "router3"} {
		eventually(t, time.Minute, r+"'s two OSPF neighbours Full once the cable is back", full(r, 2))
	}
	// The routers' running configurations saved, the bridge skipped.
	dir := t.TempDir()
	kubectlMeshnet(t, c.Kubeconfig, ns, "save", "--lab", "frr-ospf-lan", "--dir", dir)
	for i := 1; i <= 3; i++ {
		saved, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("router%d", i), "frr.conf"))
		if err != nil || !strings.Contains(string(saved), "router ospf") || !strings.Contains(string(saved), fmt.Sprintf("ip address 10.0.0.%d/24", i)) {
			t.Errorf("router%d's saved configuration: %v\n%s", i, err, saved)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "lan1")); err == nil {
		t.Error("the bridge's pod, which runs no FRR, has a saved configuration")
	}

	// Full comes before the routes of the new SPF run are installed.
	eventually(t, 30*time.Second, "router1 reaching router3's loopback again", func() (bool, string) {
		out, err := c.Kubectl(ctx, "-n", ns, "exec", "router1", "--", "ping", "-c", "1", "-W", "1", "10.10.10.3")
		return err == nil, out
	})
}

// capsLab is a containerlab file with node names that are not pod names,
// a group, a bridge and an exec command that fails.
const capsLab = "testdata/clab-caps/caps.clab.yml"

// containerlabNamesAndExec runs capsLab unchanged with kubectl meshnet clab
// apply --wait: PC1, PC2, PC3 and SW_1 become pods pc1, pc2, pc3 and
// sw-1; the failing exec command of PC1 is warned about, naming the node,
// the field and the command, the commands after it ran, and the container
// was not restarted; PC1 reaches PC2 over the bridge; kubectl meshnet
// takes PC1 for pc1; the LinkFault the file puts on PC3's link holds it
// down; kubectl meshnet exec runs in two nodes of the group at once.
func containerlabNamesAndExec(t *testing.T, c *kubecluster.Cluster, ns string) {
	ctx := context.Background()
	if err := c.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	args := []string{"--kubeconfig", c.Kubeconfig, "-n", ns, "clab", "apply", capsLab, "--wait"}
	code := meshnetctl.Main(args, &stdout, &stderr)
	t.Logf("$ kubectl meshnet %s\n%s%s", strings.Join(args[4:], " "), stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("clab apply: exit %d", code)
	}
	const warning = `Warning: containerlab exec on node PC1: topology.nodes.PC1.exec[1] "ip link set eth9 up" failed with exit status 1`
	if !strings.Contains(stderr.String(), warning) {
		t.Errorf("clab apply --wait does not warn:\n%s", warning)
	}
	p := pod(t, c, ns, "pc1")
	if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 || p.Labels["clab-node-name"] != "PC1" {
		t.Errorf("pod pc1: %d restarts, label clab-node-name %q; want none, PC1", n, p.Labels["clab-node-name"])
	}
	if out, err := c.Kubectl(ctx, "-n", ns, "exec", "pc1", "--", "ip", "route", "show", "10.9.9.0/24"); err != nil || !strings.Contains(out, "via 10.0.9.2") {
		t.Errorf("PC1's third exec command, after the one that failed, did not run: %q, %v", out, err)
	}
	ping(t, c, ns, "pc1", "10.0.9.2")
	if out := kubectlMeshnet(t, c.Kubeconfig, ns, "links", "PC1"); !strings.Contains(out, "sw-1:eth1") {
		t.Errorf("kubectl meshnet links PC1 does not list pc1's link to sw-1:\n%s", out)
	}
	// The fault of the file holds PC3's cable pulled, both ends.
	eventually(t, 30*time.Second, "PC3's link held down by the lab's LinkFault", func() (bool, string) {
		out, err := c.Kubectl(ctx, "-n", ns, "get", "linkfault", "pc3-eth1-fault-0", "-o", "jsonpath={.status.phase}")
		links := kubectlMeshnet(t, c.Kubeconfig, ns, "links", "PC3")
		return err == nil && out == "Active" && strings.Contains(links, "down"), out + "\n" + links
	})
	// The group's nodes at once, each line after the node's name.
	out := kubectlMeshnet(t, c.Kubeconfig, ns, "exec", "PC1", "PC2", "--group", "hosts", "--", "ip", "-br", "addr", "show", "eth1")
	if !regexp.MustCompile(`(?m)^PC1: eth1@\S+\s+(UP|UNKNOWN)\s+10\.0\.9\.1/24`).MatchString(out) || !regexp.MustCompile(`(?m)^PC2: eth1@\S+\s+(UP|UNKNOWN)\s+10\.0\.9\.2/24`).MatchString(out) {
		t.Errorf("kubectl meshnet exec --group hosts: want a line of each host, after its name:\n%s", out)
	}
}
