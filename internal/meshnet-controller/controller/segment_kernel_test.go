//go:build kernel

package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// TestKernelBridgeSegmentAcrossNodes makes pod lan an L2 segment of
// segmentMembers hosts, half on its node (veths) and half on the other
// (VXLANs), with real meshnetds and controller. The pods are wired before
// lan's Topology says bridge, as a user turns an existing hub into a
// segment: once lan is Ready every port is in its bridge in the kernel at
// that moment, and hosts reach each other through it, on one node and
// across nodes. A cable pull at one member cuts that member off only.
// Without spec.bridge the bridge goes and its ports stay, plain, the hosts
// apart again.
func TestKernelBridgeSegmentAcrossNodes(t *testing.T) {
	const segmentMembers = 64
	lab := labnet.New(t, bins)
	a, b := lab.AddNode("node-a", "ens3"), lab.AddNode("node-b", "enp0s8")
	publishDaemons(t, lab, a, b)
	lab.Namespace("lab")
	mtu := int32(1400) // one MTU on every port: a veth's 1500 and a VXLAN's 1450 would differ
	port := func(uid int) v1beta1.Link {
		l := link(uid, fmt.Sprintf("h%d", uid), fmt.Sprintf("p%d", uid), "eth1", "", "")
		l.MTU = &mtu
		return l
	}
	member := func(uid int) v1beta1.Link {
		l := link(uid, "lan", "eth1", fmt.Sprintf("p%d", uid), fmt.Sprintf("10.9.0.%d/24", uid), "")
		l.MTU = &mtu
		return l
	}
	var ports []v1beta1.Link
	for uid := 1; uid <= segmentMembers; uid++ {
		ports = append(ports, port(uid))
	}
	topology(t, lab, "lan", ports...)
	hosts := map[int]*labnet.Pod{}
	for uid := 1; uid <= segmentMembers; uid++ {
		node := a // odd members on lan's node, even ones on the other
		if uid%2 == 0 {
			node = b
		}
		name := fmt.Sprintf("h%d", uid)
		topology(t, lab, name, member(uid))
		hosts[uid] = lab.AddPod(node, "lab", name)
	}
	hub := lab.AddPod(a, "lab", "lan")
	cni(t, hosts[1], "ADD") // before the hub: its ADD makes the veth
	cni(t, hub, "ADD")
	for uid := 2; uid <= segmentMembers; uid++ {
		cni(t, hosts[uid], "ADD")
	}
	startController(t, lab, a, "controller")
	waitStatus(t, lab, "lan", 60*time.Second, converged)
	if err := pings(hosts[1], "10.9.0.3", 2); err == nil {
		t.Fatalf("h1 reaches h3 through a pod that is not a segment yet")
	}

	edited := time.Now()
	mustEdit(t, lab, "lan", func(topo *v1beta1.Topology) { topo.Spec.Bridge = &v1beta1.Bridge{} })
	topo := waitStatus(t, lab, "lan", 20*time.Second, func(topo *v1beta1.Topology) bool {
		return converged(topo) && bridgeOf(topo, "p1") == v1beta1.DefaultBridgeName
	})
	t.Logf("%d ports in lan's bridge, Ready, %v after the edit", segmentMembers, time.Since(edited).Round(time.Millisecond))
	all, err := readAll(hub.Netns)
	if err != nil {
		t.Fatal(err)
	}
	for uid := 1; uid <= segmentMembers; uid++ { // the kernel at the moment the status says Ready
		p := fmt.Sprintf("p%d", uid)
		if s := all[p]; s.Master != v1beta1.DefaultBridgeName || !s.AdminUp || s.MTU != int(mtu) {
			t.Errorf("lan:%s when lan is Ready: master %q, up %v, mtu %d; want a port of br0, up, mtu %d", p, s.Master, s.AdminUp, s.MTU, mtu)
		}
		if ls := linkStatus(topo, p); ls == nil || ls.Bridge != v1beta1.DefaultBridgeName {
			t.Errorf("lan status of %s: %+v, want bridge br0", p, ls)
		}
	}
	// On lan's node, across nodes both ways, between two other nodes' hosts.
	for _, hop := range [][2]int{{1, 3}, {1, 2}, {2, 1}, {2, segmentMembers}, {segmentMembers - 1, segmentMembers}} {
		if err := pings(hosts[hop[0]], fmt.Sprintf("10.9.0.%d", hop[1]), 5); err != nil {
			t.Errorf("h%d to h%d over the segment: %v", hop[0], hop[1], err)
		}
	}

	// A cable pull at h2's port, a VXLAN from the other node: h2 is cut
	// off, h1 and h3 are not.
	mustEdit(t, lab, "h2", setState(new(v1beta1.LinkDown), "eth1"))
	waitKernel(t, hosts[2].Netns, "eth1", 10*time.Second, down)
	if err := pings(hosts[1], "10.9.0.2", 2); err == nil {
		t.Errorf("h1 reaches h2, whose cable is pulled")
	}
	if err := pings(hosts[1], "10.9.0.3", 5); err != nil {
		t.Errorf("h1 to h3 while h2 is cut off: %v", err)
	}
	mustEdit(t, lab, "h2", setState(nil, "eth1"))
	waitKernel(t, hosts[2].Netns, "eth1", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
	if err := pings(hosts[1], "10.9.0.2", 5); err != nil {
		t.Errorf("h1 to h2 once its cable is back: %v", err)
	}

	// Not a segment any more: the bridge goes, the ports stay.
	mustEdit(t, lab, "lan", func(topo *v1beta1.Topology) { topo.Spec.Bridge = nil })
	waitGone(t, hub.Netns, v1beta1.DefaultBridgeName, 20*time.Second)
	waitStatus(t, lab, "lan", 20*time.Second, func(topo *v1beta1.Topology) bool {
		return converged(topo) && bridgeOf(topo, "p1") == ""
	})
	if s := readState(t, hub.Netns, "p1"); s.Master != "" {
		t.Errorf("lan:p1 without the bridge: master %q", s.Master)
	}
	if err := pings(hosts[1], "10.9.0.2", 2); err == nil {
		t.Errorf("h1 reaches h2 once lan is not a segment")
	}
}

// bridgeOf is the bridge the status says link end intf is a port of; "-"
// when the status does not list it.
func bridgeOf(topo *v1beta1.Topology, intf string) string {
	if ls := linkStatus(topo, intf); ls != nil {
		return ls.Bridge
	}
	return "-"
}

// readAll reads every interface of the namespace at path.
func readAll(path string) (map[string]links.Interface, error) {
	n, err := links.OpenNetns(path)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	return links.ReadAll(n)
}
