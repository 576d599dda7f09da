//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

var bins labnet.Binaries

func TestMain(m *testing.M) { os.Exit(labnet.Main(m, &bins)) }

// link is one end of a Topology link.
func link(uid int, peer, local, peerIntf, localIP, peerIP string) v1beta1.Link {
	return v1beta1.Link{UID: uid, PeerPod: peer, LocalIntf: local, PeerIntf: peerIntf, LocalIP: localIP, PeerIP: peerIP}
}

func topology(t testing.TB, lab *labnet.Lab, namespace, name string, ls ...v1beta1.Link) *v1beta1.Topology {
	t.Helper()
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}
	if err := lab.Client.Create(context.Background(), topo); err != nil {
		t.Fatalf("create Topology %s/%s: %v", namespace, name, err)
	}
	return topo
}

func cni(t testing.TB, p *labnet.Pod, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.CNI(ctx, cmd); err != nil {
		t.Fatalf("CNI %s %s/%s: %v\nnode %s log:\n%s", cmd, p.Namespace, p.Name, err, p.Node.Name, tail(p.Node.Log()))
	}
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

func ping(t testing.TB, p *labnet.Pod, ip string, extra ...string) {
	t.Helper()
	if err := tryPing(p, ip, extra...); err != nil {
		t.Fatal(err)
	}
}

// tryPing pings once, retrying once: the first packet may wait for ARP.
func tryPing(p *labnet.Pod, ip string, extra ...string) error {
	return pingN(p, ip, 2, extra...)
}

func pingN(p *labnet.Pod, ip string, tries int, extra ...string) error {
	args := append([]string{"-c", "1", "-W", "1"}, extra...)
	var (
		out string
		err error
	)
	for range tries {
		if out, err = p.Run("ping", append(args, ip)...); err == nil {
			return nil
		}
	}
	return fmt.Errorf("ping %s from %s/%s: %v\n%s", ip, p.Namespace, p.Name, err, out)
}

// waitStatus waits for a Topology's status, which meshnet-controller
// writes (started on first use).
func waitStatus(t testing.TB, lab *labnet.Lab, namespace, name string, ok func(*v1beta1.TopologyStatus) bool) *v1beta1.Topology {
	t.Helper()
	lab.Controller()
	topo := &v1beta1.Topology{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, topo); err != nil {
			t.Fatal(err)
		}
		if ok(&topo.Status) {
			return topo
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology %s/%s status never as expected: %+v", namespace, name, topo.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ready(st *v1beta1.TopologyStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == v1beta1.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// TestKernelVethAndVXLAN wires r1 and r2 on node a (veth) and r1 to r3 on
// node b (VXLAN), the nodes using different NIC names, and pings over both.
func TestKernelVethAndVXLAN(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "ens3")
	b := lab.AddNode("node-b", "enp0s8")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30"),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", "10.0.2.2/30"))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, lab, "lab", "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "10.0.2.1/30"))
	r1 := lab.AddPod(a, "lab", "r1")
	r2 := lab.AddPod(a, "lab", "r2")
	r3 := lab.AddPod(b, "lab", "r3")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	cni(t, r3, "ADD")
	ping(t, r1, "10.0.1.2")
	ping(t, r2, "10.0.1.1")
	ping(t, r1, "10.0.2.2")
	ping(t, r3, "10.0.2.1")
	cni(t, r1, "CHECK")

	topo := waitStatus(t, lab, "lab", "r1", ready)
	st := topo.Status
	if st.SrcIP != a.IP.String() || st.NetNS != r1.Netns || st.ContainerID != r1.ContainerID || st.Node != "node-a" {
		t.Errorf("status src_ip %q net_ns %q container_id %q node %q, want %s %s %s node-a", st.SrcIP, st.NetNS, st.ContainerID, st.Node, a.IP, r1.Netns, r1.ContainerID)
	}
	kinds := map[int]v1beta1.LinkKind{}
	for _, l := range st.Links {
		kinds[l.UID] = l.Kind
	}
	if kinds[1] != v1beta1.LinkKindVeth || kinds[2] != v1beta1.LinkKindVXLAN {
		t.Errorf("status link kinds %v, want 1:veth 2:vxlan", kinds)
	}

	// DEL works from the pod store alone: the peers' Topologies are gone.
	for _, name := range []string{"r2", "r3"} {
		if err := lab.Client.Delete(context.Background(), &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	cni(t, r1, "DEL")
	for _, p := range []*labnet.Pod{r1, r2, r3} {
		names, err := labnet.Links(p.Netns)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 {
			t.Errorf("%s has %v after r1's DEL, want only lo", p.Name, names)
		}
	}
	cni(t, r1, "DEL") // idempotent
}

// TestKernelDelClearsTheSandboxStatus: a pod's DEL, its Topology kept (a
// pod deleted, its Topology left for the next one), clears the sandbox
// fields meshnetd wrote at ADD, so that the status names no sandbox that
// is gone, and the write is not refused over and over.
func TestKernelDelClearsTheSandboxStatus(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD")
	waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool {
		return st.ContainerID == r1.ContainerID && st.NetNS != "" && st.SrcIP == a.IP.String()
	})
	cni(t, r1, "DEL")
	waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool {
		return st.ContainerID == "" && st.NetNS == "" && st.SrcIP == ""
	})
	if log := a.Log(); strings.Contains(log, "topology status not written") {
		t.Errorf("meshnetd's status writes were refused:\n%s", tail(log))
	}
}
