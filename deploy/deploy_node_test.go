//go:build node

package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/kubecluster"
	"github.com/meshnet/meshnet/internal/kubecluster/kubeclustertest"
)

// overlay is how this cluster installs meshnet: the kind overlay (a
// locally built meshnet:dev, pulled if not present, here from the
// cluster's registry).
const overlay = "overlays/kind"

// TestNodeMeshnetAsInstalled installs meshnet with kubectl apply -k on two
// real nodes and runs meshnet-cni-style manifests (Topology and Pod
// objects in one List, image alpine) as real pods: links made at pod
// creation, pinged from inside the containers.
func TestNodeMeshnetAsInstalled(t *testing.T) {
	ctx := context.Background()
	c := kubeclustertest.New(t, 2)
	start := time.Now()
	if err := c.Install(ctx, overlay); err != nil {
		t.Fatalf("install meshnet: %v", err)
	}
	t.Logf("meshnet installed and Ready in %v", time.Since(start).Round(time.Millisecond))

	t.Run("DaemonSetOnEveryNode", func(t *testing.T) {
		pods := podsOf(t, c, "meshnet", "app.kubernetes.io/name=meshnetd")
		nodes := map[string]bool{}
		for _, p := range pods {
			if !podReady(&p) {
				t.Errorf("meshnetd pod %s on %s is not Ready", p.Name, p.Spec.NodeName)
			}
			nodes[p.Spec.NodeName] = true
		}
		for _, n := range c.Nodes() {
			if !nodes[n.Name] {
				t.Errorf("no meshnetd pod on %s", n.Name)
			}
		}
	})
	t.Run("ConflistSortsFirstAndKeepsPrimary", func(t *testing.T) {
		for _, n := range c.Nodes() {
			dir := filepath.Join(n.Dir, "cni", "net.d")
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) == 0 || entries[0].Name() != cniconf.FileName {
				t.Errorf("%s: %s sorts first in %v, want %s", n.Name, dir, names(entries), cniconf.FileName)
				continue
			}
			var conf struct {
				Name    string
				Plugins []struct{ Type string }
			}
			data, _ := os.ReadFile(filepath.Join(dir, cniconf.FileName))
			if err := json.Unmarshal(data, &conf); err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			if len(conf.Plugins) < 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[len(conf.Plugins)-1].Type != cniconf.PluginType || conf.Name != "kubenet" {
				t.Errorf("%s: conflist %s plugins %v, want the primary's network kubenet with bridge first and meshnet last", n.Name, conf.Name, conf.Plugins)
			}
		}
	})
	t.Run("ControllerHasOneLeader", func(t *testing.T) {
		var leases coordinationv1.LeaseList
		if err := c.Client.List(ctx, &leases, client.InNamespace("meshnet")); err != nil {
			t.Fatal(err)
		}
		pods := podsOf(t, c, "meshnet", "app.kubernetes.io/name=meshnet-controller")
		var holders []string
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				holders = append(holders, *l.Spec.HolderIdentity)
			}
		}
		if len(holders) != 1 {
			t.Fatalf("leases held in meshnet: %v, want exactly one", holders)
		}
		found := false
		for _, p := range pods {
			found = found || strings.HasPrefix(holders[0], p.Name)
		}
		if !found {
			t.Errorf("lease holder %q is none of the controller's pods", holders[0])
		}
	})

	t.Run("VethOnOneNode", func(t *testing.T) {
		// Both routers on one node: the other node cordoned while they are
		// scheduled.
		ns := "veth"
		other := c.Nodes()[1].Name
		kubectl(t, c, "cordon", other)
		applyManifest(t, c, ns, twoRouters)
		waitRunning(t, c, ns, "r1", "r2")
		kubectl(t, c, "uncordon", other)
		r1, r2 := pod(t, c, ns, "r1"), pod(t, c, ns, "r2")
		if r1.Spec.NodeName != r2.Spec.NodeName {
			t.Fatalf("r1 on %s, r2 on %s: want one node", r1.Spec.NodeName, r2.Spec.NodeName)
		}
		ping(t, c, ns, "r1", "12.12.12.2")
		ping(t, c, ns, "r2", "12.12.12.1")
		waitLinkKind(t, c, ns, "r1", v1beta1.LinkKindVeth)
		// The eth0 of each pod is still the primary CNI's.
		out := kubectl(t, c, "-n", ns, "exec", "r1", "--", "ip", "-4", "addr", "show", "eth0")
		if !strings.Contains(out, "10.244.") {
			t.Errorf("r1's eth0 is not the primary CNI's (10.244.0.0/16):\n%s", out)
		}
	})
	t.Run("VXLANAcrossNodes", func(t *testing.T) {
		ns := "vxlan"
		nodes := c.Nodes()
		// The Topologies first, then one pod per node, the other node
		// cordoned while each is scheduled.
		applyManifest(t, c, ns, strings.SplitN(twoRouters, "- apiVersion: v1\n", 2)[0])
		kubectl(t, c, "cordon", nodes[1].Name)
		applyManifest(t, c, ns, routerPod("r1"))
		waitRunning(t, c, ns, "r1")
		kubectl(t, c, "uncordon", nodes[1].Name)
		kubectl(t, c, "cordon", nodes[0].Name)
		applyManifest(t, c, ns, routerPod("r2"))
		waitRunning(t, c, ns, "r2")
		kubectl(t, c, "uncordon", nodes[0].Name)
		r1, r2 := pod(t, c, ns, "r1"), pod(t, c, ns, "r2")
		if r1.Spec.NodeName == r2.Spec.NodeName {
			t.Fatalf("r1 and r2 both on %s: want two nodes", r1.Spec.NodeName)
		}
		ping(t, c, ns, "r1", "12.12.12.2")
		ping(t, c, ns, "r2", "12.12.12.1")
		waitLinkKind(t, c, ns, "r1", v1beta1.LinkKindVXLAN)
		waitLinkKind(t, c, ns, "r2", v1beta1.LinkKindVXLAN)
	})
}

// twoRouters is a manifest in meshnet-cni's own test form (tests/2node.yml
// there): Topology and Pod objects in one List, pods of image alpine with
// the default pull policy, a sleeping shell as command.
const twoRouters = `apiVersion: v1
kind: List
items:
- apiVersion: networkop.co.uk/v1beta1
  kind: Topology
  metadata:
    name: r1
  spec:
    links:
    - uid: 1
      peer_pod: r2
      local_intf: eth1
      local_ip: 12.12.12.1/24
      peer_intf: eth1
      peer_ip: 12.12.12.2/24
- apiVersion: networkop.co.uk/v1beta1
  kind: Topology
  metadata:
    name: r2
  spec:
    links:
    - uid: 1
      peer_pod: r1
      local_intf: eth1
      local_ip: 12.12.12.2/24
      peer_intf: eth1
      peer_ip: 12.12.12.1/24
- apiVersion: v1
  kind: Pod
  metadata:
    name: r1
  spec:
    containers:
    - image: alpine
      name: pod
      command: ["/bin/sh", "-c", "sleep 2000000000000"]
- apiVersion: v1
  kind: Pod
  metadata:
    name: r2
  spec:
    containers:
    - image: alpine
      name: pod
      command: ["/bin/sh", "-c", "sleep 2000000000000"]
`

// routerPod is the Pod of twoRouters named name, alone.
func routerPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - image: alpine
    name: pod
    command: ["/bin/sh", "-c", "sleep 2000000000000"]
`, name)
}

// waitLinkKind waits until the status of the Topology name (written by
// meshnet-controller from what meshnetd read in the kernel) reports its
// first link up, with carrier, of kind.
func waitLinkKind(t *testing.T, c *kubecluster.Cluster, ns, name string, kind v1beta1.LinkKind) {
	t.Helper()
	var topo v1beta1.Topology
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &topo)
		if err == nil && len(topo.Status.Links) > 0 {
			l := topo.Status.Links[0]
			if l.Kind == kind && l.State == v1beta1.LinkUp && l.Carrier {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology %s/%s: status %+v (error %v), want its first link %s, up, with carrier", ns, name, topo.Status, err, kind)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func kubectl(t *testing.T, c *kubecluster.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyManifest applies a manifest in namespace ns, creating ns.
func applyManifest(t *testing.T, c *kubecluster.Cluster, ns, manifest string) {
	t.Helper()
	if err := c.Namespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "apply", "-f", f)
}

func waitRunning(t *testing.T, c *kubecluster.Cluster, ns string, pods ...string) {
	t.Helper()
	args := append([]string{"-n", ns, "wait", "--for=condition=Ready", "--timeout=180s"}, prefixed("pod/", pods)...)
	if _, err := c.Kubectl(context.Background(), args...); err != nil {
		out, _ := c.Kubectl(context.Background(), "-n", ns, "describe", "pods")
		t.Fatalf("%v\n%s", err, out)
	}
}

func ping(t *testing.T, c *kubecluster.Cluster, ns, pod, addr string) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "ping", "-c", "3", "-W", "2", addr)
	if err != nil {
		t.Fatalf("ping %s from %s: %v", addr, pod, err)
	}
	if !strings.Contains(out, " 0% packet loss") {
		t.Fatalf("ping %s from %s:\n%s", addr, pod, out)
	}
}

func pod(t *testing.T, c *kubecluster.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func podsOf(t *testing.T, c *kubecluster.Cluster, ns, selector string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func prefixed(prefix string, s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = prefix + v
	}
	return out
}
