//go:build kernel

package controller_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// TestKernelPhysicalAndMacvlanAddedAtRuntime adds to running r1 a link to a
// physical device (a VTEP outside the cluster) and one to its node's NIC,
// edits of its Topology alone: both are made as CNI ADD makes them, the
// status shows their kinds and the VXLAN parameters the device needs, both
// carry pings; removed, neither is left.
func TestKernelPhysicalAndMacvlanAddedAtRuntime(t *testing.T) {
	p := newPair(t)
	router := p.lab.AddPhysical()
	phy := link(30, "rtr1", "eth7", "ge-0.0.1", "10.0.30.1/30", "")
	phy.LinkOptions = &v1beta1.LinkOptions{RemoteVTEP: router.IP.String(), VNI: 4343}
	mgmt := link(31, v1beta1.PeerHost, "mgmt0", p.a.NIC, "10.250.0.150/24", "")
	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) { topo.Spec.Links = append(topo.Spec.Links, phy, mgmt) })

	topo := waitStatus(t, p.lab, "r1", 20*time.Second, func(topo *v1beta1.Topology) bool {
		ph, mv := linkStatus(topo, "eth7"), linkStatus(topo, "mgmt0")
		return converged(topo) && ph != nil && ph.Kind == v1beta1.LinkKindPhy && ph.Physical != nil && mv != nil && mv.Kind == v1beta1.LinkKindMacvlan
	})
	// The device's operator configures it from the status alone.
	ph := linkStatus(topo, "eth7").Physical
	p.lab.IP(router.Netns, "link", "add", "vx0", "type", "vxlan", "id", fmt.Sprint(ph.VNI), "remote", ph.LocalVTEP,
		"local", ph.RemoteVTEP, "dstport", fmt.Sprint(ph.UDPPort), "dev", router.NIC, "nolearning")
	p.lab.IP(router.Netns, "addr", "add", "10.0.30.2/30", "dev", "vx0")
	p.lab.IP(router.Netns, "link", "set", "vx0", "up")
	if err := pings(p.r1, "10.0.30.2", 5); err != nil {
		t.Errorf("over the physical link added at runtime: %v", err)
	}
	if err := pings(p.r1, p.b.IP.String(), 5); err != nil {
		t.Errorf("over the macvlan added at runtime: %v", err)
	}

	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
		topo.Spec.Links = slices.DeleteFunc(topo.Spec.Links, func(l v1beta1.Link) bool { return l.UID == 30 || l.UID == 31 })
	})
	waitGone(t, p.r1.Netns, "eth7", 10*time.Second)
	waitGone(t, p.r1.Netns, "mgmt0", 10*time.Second)
	waitStatus(t, p.lab, "r1", 20*time.Second, func(topo *v1beta1.Topology) bool {
		return converged(topo) && linkStatus(topo, "eth7") == nil && linkStatus(topo, "mgmt0") == nil
	})
}

// TestKernelBothEndsEditedAtOnce adds a VXLAN link to both ends' Topologies
// at the same moment, then removes it while the far node's meshnetd is
// stopped: the link is made once, and the removal finishes when that
// meshnetd is back, with nothing of it left on either node.
func TestKernelBothEndsEditedAtOnce(t *testing.T) {
	p := newPair(t)
	var wg sync.WaitGroup
	for end, name := range map[int]string{1: "r1", 3: "r3"} {
		wg.Go(func() {
			mustEdit(t, p.lab, name, func(topo *v1beta1.Topology) { topo.Spec.Links = append(topo.Spec.Links, vxlanLink(end)) })
		})
	}
	wg.Wait()
	waitMade(t, p.r1.Netns, "eth9", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
	waitMade(t, p.r3.Netns, "eth9", 10*time.Second, func(s links.Reading) bool { return s.AdminUp })
	if err := pings(p.r1, "10.0.20.2", 10); err != nil {
		t.Fatalf("over the link both ends added at once: %v", err)
	}

	p.b.Stop()
	dropVXLAN(t, p)
	waitGone(t, p.r1.Netns, "eth9", 10*time.Second)
	readState(t, p.r3.Netns, "eth9") // r3's end stays while its node's meshnetd is away
	p.b.Start()
	waitGone(t, p.r3.Netns, "eth9", 30*time.Second)
	waitStatus(t, p.lab, "r3", 30*time.Second, func(topo *v1beta1.Topology) bool {
		return converged(topo) && linkStatus(topo, "eth9") == nil
	})
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Errorf("r1's own VXLAN to r3 after the removal: %v", err)
	}
}
