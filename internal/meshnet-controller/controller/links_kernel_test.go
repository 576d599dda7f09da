//go:build kernel

package controller_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// TestKernelLinksAddedAndRemovedAtRuntime edits running pods' Topologies:
// a veth (same node) and a VXLAN (two nodes) added to both ends appear,
// wired as CNI ADD wires them, and carry pings; removed from both ends,
// nothing of them is left on either node. The pods' other links are never
// touched.
func TestKernelLinksAddedAndRemovedAtRuntime(t *testing.T) {
	p := newPair(t)
	before := ifindex(t, p, "eth1")

	addLink := func(l v1beta1.Link) func(*v1beta1.Topology) {
		return func(topo *v1beta1.Topology) { topo.Spec.Links = append(topo.Spec.Links, l) }
	}
	dropLink := func(uid int) func(*v1beta1.Topology) {
		return func(topo *v1beta1.Topology) {
			topo.Spec.Links = slices.DeleteFunc(topo.Spec.Links, func(l v1beta1.Link) bool { return l.UID == uid })
		}
	}
	// veth r1:eth3 - r2:eth2, then VXLAN r1:eth4 - r3:eth2.
	mustEdit(t, p.lab, "r1", addLink(link(10, "r2", "eth3", "eth2", "10.0.10.1/30", "10.0.10.2/30")))
	mustEdit(t, p.lab, "r2", addLink(link(10, "r1", "eth2", "eth3", "10.0.10.2/30", "10.0.10.1/30")))
	mustEdit(t, p.lab, "r1", addLink(link(11, "r3", "eth4", "eth2", "10.0.11.1/30", "10.0.11.2/30")))
	mustEdit(t, p.lab, "r3", addLink(link(11, "r1", "eth2", "eth4", "10.0.11.2/30", "10.0.11.1/30")))
	waitMade(t, p.r1.Netns, "eth3", 10*time.Second, up)
	waitMade(t, p.r2.Netns, "eth2", 10*time.Second, up)
	waitMade(t, p.r1.Netns, "eth4", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
	waitMade(t, p.r3.Netns, "eth2", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
	if err := pings(p.r1, "10.0.10.2", 5); err != nil {
		t.Errorf("over the veth added at runtime: %v", err)
	}
	if err := pings(p.r1, "10.0.11.2", 5); err != nil {
		t.Errorf("over the VXLAN added at runtime: %v", err)
	}
	waitStatus(t, p.lab, "r1", 20*time.Second, func(topo *v1beta1.Topology) bool {
		veth, vxlan := linkStatus(topo, "eth3"), linkStatus(topo, "eth4")
		return converged(topo) && veth != nil && veth.Kind == v1beta1.LinkKindVeth && vxlan != nil && vxlan.Kind == v1beta1.LinkKindVXLAN
	})

	mustEdit(t, p.lab, "r1", dropLink(11))
	mustEdit(t, p.lab, "r3", dropLink(11))
	mustEdit(t, p.lab, "r1", dropLink(10))
	mustEdit(t, p.lab, "r2", dropLink(10))
	for _, end := range []struct {
		netns, intf string
	}{{p.r1.Netns, "eth3"}, {p.r2.Netns, "eth2"}, {p.r1.Netns, "eth4"}, {p.r3.Netns, "eth2"}} {
		waitGone(t, end.netns, end.intf, 10*time.Second)
	}
	if after := ifindex(t, p, "eth1"); after != before {
		t.Errorf("r1's eth1 was re-made (ifindex %s, then %s): a runtime edit touched a link it does not change", before, after)
	}
	if err := pings(p.r1, "10.0.1.2", 3); err != nil {
		t.Errorf("r1's first link after the edits: %v", err)
	}
	waitStatus(t, p.lab, "r1", 20*time.Second, func(topo *v1beta1.Topology) bool {
		return converged(topo) && linkStatus(topo, "eth3") == nil && linkStatus(topo, "eth4") == nil
	})
}

// waitMade waits until intf exists in the namespace and ok holds.
func waitMade(t testing.TB, nsPath, intf string, within time.Duration, ok func(links.Reading) bool) {
	t.Helper()
	waitIntf(t, nsPath, intf, within, "made as expected", func(s links.Reading, err error) bool { return err == nil && ok(s) })
}

// waitGone waits until intf no longer exists in the namespace.
func waitGone(t testing.TB, nsPath, intf string, within time.Duration) {
	t.Helper()
	waitIntf(t, nsPath, intf, within, "removed", func(_ links.Reading, err error) bool { return err != nil })
}

// waitIntf polls intf in the namespace until done holds of its state (or
// of the error reading it: no such interface).
func waitIntf(t testing.TB, nsPath, intf string, within time.Duration, what string, done func(links.Reading, error) bool) {
	t.Helper()
	n, err := links.OpenNetns(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	deadline := time.Now().Add(within)
	for {
		s, err := links.ReadLink(n, intf)
		if done(s, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s not %s within %v: %+v, %v", intf, nsPath, what, within, s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ifindex is the interface index of r1's intf, which changes when the
// interface is made again.
func ifindex(t testing.TB, p *pair, intf string) string {
	t.Helper()
	out, err := p.r1.Run("ip", "-o", "link", "show", intf)
	if err != nil {
		t.Fatalf("ip link show %s in r1: %v\n%s", intf, err, out)
	}
	index, _, _ := strings.Cut(out, ":")
	return index
}

// vxlanLink is r1:eth9 - r3:eth9 (uid 20, 10.0.20.0/30): the link the cycle
// test and benchmark add and remove.
func vxlanLink(end int) v1beta1.Link {
	if end == 1 {
		return link(20, "r3", "eth9", "eth9", "10.0.20.1/30", "10.0.20.2/30")
	}
	return link(20, "r1", "eth9", "eth9", "10.0.20.2/30", "10.0.20.1/30")
}

// addVXLAN adds vxlanLink to both ends' Topologies; dropVXLAN removes it.
func addVXLAN(t testing.TB, p *pair) {
	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) { topo.Spec.Links = append(topo.Spec.Links, vxlanLink(1)) })
	mustEdit(t, p.lab, "r3", func(topo *v1beta1.Topology) { topo.Spec.Links = append(topo.Spec.Links, vxlanLink(3)) })
}

func dropVXLAN(t testing.TB, p *pair) {
	drop := func(topo *v1beta1.Topology) {
		topo.Spec.Links = slices.DeleteFunc(topo.Spec.Links, func(l v1beta1.Link) bool { return l.UID == 20 })
	}
	mustEdit(t, p.lab, "r1", drop)
	mustEdit(t, p.lab, "r3", drop)
}

// TestKernelVXLANAddRemoveCycles adds and removes a VXLAN link 100 times:
// it carries a ping each time, and at the end nothing of it is left on
// either node.
func TestKernelVXLANAddRemoveCycles(t *testing.T) {
	p := newPair(t)
	const cycles = 100
	for i := range cycles {
		addVXLAN(t, p)
		waitMade(t, p.r1.Netns, "eth9", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
		waitMade(t, p.r3.Netns, "eth9", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
		if i%10 == 0 {
			if err := pings(p.r1, "10.0.20.2", 20); err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
		}
		dropVXLAN(t, p)
		waitGone(t, p.r1.Netns, "eth9", 10*time.Second)
		waitGone(t, p.r3.Netns, "eth9", 10*time.Second)
	}
	// Nothing of the link on either node: no eth9 in the pods, no VXLAN of
	// its VNI in the nodes.
	for _, n := range []string{p.a.Netns, p.b.Netns} {
		out, err := exec.Command("ip", "-n", filepath.Base(n), "-d", "link", "show", "type", "vxlan").CombinedOutput()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "eth9") {
			t.Errorf("a VXLAN of the removed link is left in %s:\n%s", n, out)
		}
	}
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Errorf("r1's own VXLAN after %d cycles: %v", cycles, err)
	}
}

// BenchmarkKernelAddVXLANToFirstPing measures a runtime link add as a user
// sees it: from the edit of the first end's Topology (both ends edited one
// after the other, as kubectl apply of two objects does) until the first
// ping over the new VXLAN passes; p50 and p99 over 100 adds.
func BenchmarkKernelAddVXLANToFirstPing(b *testing.B) {
	p := newPair(b)
	const adds = 100
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range adds {
			start := time.Now()
			addVXLAN(b, p)
			for {
				if _, err := p.r1.Run("ping", "-c", "1", "-W", "0.2", "10.0.20.2"); err == nil {
					break
				}
				if time.Since(start) > 10*time.Second {
					b.Fatalf("add %d: no ping over the new link within 10s", i)
				}
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			dropVXLAN(b, p)
			waitGone(b, p.r3.Netns, "eth9", 10*time.Second)
			b.StartTimer()
		}
	}
	b.StopTimer()
	reportLatencies(b, "adds", lat)
}

// TestKernelLostLinksAreMadeAgain deletes links from running pods'
// namespaces, as a crash between the kernel's change and meshnetd's record,
// or someone's ip link delete, leaves them: r1's veth to r2 (both ends go)
// and r3's end of its VXLAN to r1, on the other node. At the controller's
// next pass over the pods each is wired again, carries pings, and the
// statuses say Ready.
func TestKernelLostLinksAreMadeAgain(t *testing.T) {
	p := newPair(t)
	for _, c := range []struct {
		pod  *labnet.Pod
		intf string
	}{{p.r1, "eth1"}, {p.r3, "eth1"}} {
		if out, err := c.pod.Run("ip", "link", "del", c.intf); err != nil {
			t.Fatalf("ip link del %s in %s: %v\n%s", c.intf, c.pod.Name, err, out)
		}
	}
	// The controller's resync (10s in this lab) finds them lost.
	waitMade(t, p.r1.Netns, "eth1", 30*time.Second, up)
	waitMade(t, p.r2.Netns, "eth1", 30*time.Second, up)
	waitMade(t, p.r3.Netns, "eth1", 30*time.Second, up)
	for _, ip := range []string{"10.0.1.2", "10.0.2.2"} {
		if err := pings(p.r1, ip, 3); err != nil {
			t.Error(err)
		}
	}
	for _, name := range []string{"r1", "r2", "r3"} {
		waitStatus(t, p.lab, name, 30*time.Second, converged)
	}
}
