//go:build kernel

package links

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

func newNS(t *testing.T) *Netns {
	t.Helper()
	n, err := OpenNetns(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func ping(ns *Netns, dst string, extra ...string) error {
	args := append([]string{"-c", "1", "-W", "1"}, extra...)
	out, err := netnstest.Run(ns.Path(), "ping", append(args, dst)...)
	if err != nil {
		return errors.New(strings.TrimSpace(out))
	}
	return nil
}

func mustPing(t *testing.T, ns *Netns, dst string, extra ...string) {
	t.Helper()
	if err := ping(ns, dst, extra...); err != nil {
		t.Fatalf("ping %s %v from %s: %v", dst, extra, ns.Path(), err)
	}
}

func mustNotPing(t *testing.T, ns *Netns, dst string, extra ...string) {
	t.Helper()
	if err := ping(ns, dst, extra...); err == nil {
		t.Fatalf("ping %s %v from %s passed, want it to fail", dst, extra, ns.Path())
	}
}

// mustDF proves a path MTU: a don't-fragment ping of exactly mtu bytes
// passes and one of mtu+1 fails.
func mustDF(t *testing.T, ns *Netns, dst string, mtu int) {
	t.Helper()
	mustPing(t, ns, dst, "-M", "do", "-s", strconv.Itoa(mtu-28))
	mustNotPing(t, ns, dst, "-M", "do", "-s", strconv.Itoa(mtu-27))
}

// links lists the interfaces in ns other than loopback.
func links(t *testing.T, ns *Netns) []string {
	t.Helper()
	ls, err := retryDump(ns, ns.h.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		if l.Attrs().Name != "lo" {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names
}

func mustLinks(t *testing.T, ns *Netns, want ...string) {
	t.Helper()
	if got := links(t, ns); !slices.Equal(got, want) {
		t.Fatalf("interfaces in %s: %v, want %v", ns.Path(), got, want)
	}
}

func mustState(t *testing.T, ns *Netns, name string) Reading {
	t.Helper()
	s, err := ReadLink(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustResult(t *testing.T, what string, got Result, err error, want Result) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

func mustLink(t *testing.T, ns *Netns, name string) netlink.Link {
	t.Helper()
	l, err := ns.h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns.Path(), err)
	}
	return l
}

func index(t *testing.T, ns *Netns, name string) int {
	t.Helper()
	l, err := ns.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// waitCarrier polls because carrier changes are applied by the kernel's
// link watch, not always within the netlink call that caused them.
func waitCarrier(t *testing.T, ns *Netns, name string, want bool) Reading {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s := mustState(t, ns, name)
		if s.Carrier == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:%s carrier %v, want %v (oper %s)", ns.Path(), name, s.Carrier, want, s.OperState)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pairOfPods(t *testing.T, mtu int) (Veth, *Netns, *Netns) {
	a, b := newNS(t), newNS(t)
	v := Veth{
		A: End{NS: a, Name: "eth1", MTU: mtu, Addrs: []netip.Prefix{pfx("10.0.0.1/30"), pfx("fd00::1/64")}},
		B: End{NS: b, Name: "eth1", MTU: mtu, Addrs: []netip.Prefix{pfx("10.0.0.2/30"), pfx("fd00::2/64")}},
	}
	return v, a, b
}

func TestKernelVeth(t *testing.T) {
	v, a, b := pairOfPods(t, 1400)
	res, err := EnsureVeth(v)
	mustResult(t, "first EnsureVeth", res, err, Created)

	for _, e := range []End{v.A, v.B} {
		s := mustState(t, e.NS, e.Name)
		if s.Kind != "veth" || !s.AdminUp || !s.Carrier || s.MTU != 1400 {
			t.Fatalf("%s: %+v, want an up veth with carrier and mtu 1400", e, s)
		}
		for _, p := range e.Addrs {
			if !slices.Contains(s.Addrs, p) {
				t.Fatalf("%s addresses %v lack %v", e, s.Addrs, p)
			}
		}
	}
	mustPing(t, a, "10.0.0.2")
	mustPing(t, b, "fd00::1")
	mustDF(t, a, "10.0.0.2", 1400)
	if s := mustState(t, b, "eth1"); s.Counters.RxPackets == 0 || s.Counters.RxBytes == 0 {
		t.Fatalf("counters after pings: %+v", s.Counters)
	}

	ia, ib := index(t, a, "eth1"), index(t, b, "eth1")
	res, err = EnsureVeth(v)
	mustResult(t, "second EnsureVeth", res, err, Unchanged)
	if index(t, a, "eth1") != ia || index(t, b, "eth1") != ib {
		t.Fatal("an unchanged veth was re-created")
	}

	v.A.MTU, v.B.MTU = 1300, 1300
	res, err = EnsureVeth(v)
	mustResult(t, "EnsureVeth with a new mtu", res, err, Updated)
	mustDF(t, b, "10.0.0.1", 1300)
}

func TestKernelVethReplacesStale(t *testing.T) {
	node := newNS(t)
	v, a, b := pairOfPods(t, 0)

	// A: a bridge holding the name. B: a veth whose peer was left in the
	// node under a temporary name, as a crash mid-setup would leave it.
	if err := a.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}}); err != nil {
		t.Fatal(err)
	}
	stale := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tmp0"}, PeerName: "eth1", PeerNamespace: netlink.NsFd(int(b.fd))}
	if err := node.h.LinkAdd(stale); err != nil {
		t.Fatal(err)
	}
	res, err := EnsureVeth(v)
	mustResult(t, "EnsureVeth over stale interfaces", res, err, Replaced)
	mustLinks(t, node)
	mustLinks(t, a, "eth1")
	mustLinks(t, b, "eth1")
	if k := mustState(t, a, "eth1").Kind; k != "veth" {
		t.Fatalf("eth1 in A is a %s", k)
	}
	mustPing(t, a, "10.0.0.2")

	// Only one end left, its peer gone elsewhere: also replaced.
	if err := Delete(b, "eth1"); err != nil {
		t.Fatal(err)
	}
	stale = &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}, PeerName: "tmp1", PeerNamespace: netlink.NsFd(int(node.fd))}
	if err := a.h.LinkAdd(stale); err != nil {
		t.Fatal(err)
	}
	res, err = EnsureVeth(v)
	mustResult(t, "EnsureVeth with one stray end", res, err, Replaced)
	mustLinks(t, node)
	mustPing(t, b, "10.0.0.1")
}

func TestKernelVethAdminDownIsCablePull(t *testing.T) {
	v, a, b := pairOfPods(t, 0)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	routes := []Route{
		{Dst: pfx("10.99.0.0/24"), Gw: netip.MustParseAddr("10.0.0.2"), Dev: "eth1"},
		{Dst: pfx("fd99::/64"), Gw: netip.MustParseAddr("fd00::2"), Dev: "eth1"},
		{Dst: pfx("10.98.0.0/24"), Dev: "eth1", Metric: 50},
	}
	for _, r := range routes {
		if err := AddRoute(a, r); err != nil {
			t.Fatal(err)
		}
	}
	mustPing(t, a, "10.0.0.2")

	down := SetAdminDown(a, nil, "eth1")
	if err := down.Err(); err != nil {
		t.Fatal(err)
	}
	saved := down.Saved["eth1"]
	if len(saved.Routes) != len(routes) || !slices.Contains(saved.Addrs, pfx("fd00::1/64")) {
		t.Fatalf("saved %+v, want the %d routes and fd00::1/64", saved, len(routes))
	}
	if s := waitCarrier(t, a, "eth1", false); s.AdminUp {
		t.Fatalf("A after SetAdminDown: %+v", s)
	}
	if s := waitCarrier(t, b, "eth1", false); !s.AdminUp {
		t.Fatalf("B after A went down: %+v, want admin up without carrier", s)
	}
	// What the kernel flushed, read back from it.
	if got, err := StaticRoutes(a, "eth1"); err != nil || len(got) != 0 {
		t.Fatalf("routes through a downed interface: %v, %v; want the kernel to have flushed them", got, err)
	}
	if s := mustState(t, a, "eth1"); slices.Contains(s.Addrs, pfx("fd00::1/64")) {
		t.Fatalf("fd00::1/64 survived admin down: %v", s.Addrs)
	}
	mustNotPing(t, b, "10.0.0.1")

	if err := SetAdminUp(a, nil, map[string]Saved{"eth1": saved}).Err(); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, a, "eth1", true)
	waitCarrier(t, b, "eth1", true)
	got, err := StaticRoutes(a, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if !slices.ContainsFunc(got, func(g Route) bool { return g.Dst == r.Dst && g.Gw == r.Gw && g.Dev == r.Dev }) {
			t.Fatalf("routes after SetAdminUp %v lack %v", got, r)
		}
	}
	mustPing(t, a, "10.0.0.2")
	mustPing(t, a, "fd00::2")
}

// underlay joins two node namespaces with a veth carrying 192.168.50.0/24
// (and fd50::/64); the NICs are named differently on each node.
func underlayNodes(t *testing.T) (n1, n2 *Netns) {
	n1, n2 = newNS(t), newNS(t)
	_, err := EnsureVeth(Veth{
		A: End{NS: n1, Name: "eth0", Addrs: []netip.Prefix{pfx("192.168.50.1/24"), pfx("fd50::1/64")}},
		B: End{NS: n2, Name: "ens5", Addrs: []netip.Prefix{pfx("192.168.50.2/24"), pfx("fd50::2/64")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return n1, n2
}

func TestKernelVXLAN(t *testing.T) {
	n1, n2 := underlayNodes(t)
	p1, p2 := newNS(t), newNS(t)
	vni := VNI("lab", "p1", "p2", 1)
	x1 := VXLAN{Node: n1, VNI: vni, Local: netip.MustParseAddr("192.168.50.1"), Remote: netip.MustParseAddr("192.168.50.2"),
		End: End{NS: p1, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.1/30")}}}
	// The other node picks its source address itself.
	x2 := VXLAN{Node: n2, VNI: vni, Remote: netip.MustParseAddr("192.168.50.1"),
		End: End{NS: p2, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.2/30")}}}
	for _, x := range []VXLAN{x1, x2} {
		res, err := EnsureVXLAN(x)
		mustResult(t, "first EnsureVXLAN", res, err, Created)
	}
	// Each node chose its own underlay device.
	for _, c := range []struct {
		pod, node *Netns
		nic       string
	}{{p1, n1, "eth0"}, {p2, n2, "ens5"}} {
		l, err := c.pod.h.LinkByName("eth1")
		if err != nil {
			t.Fatal(err)
		}
		vx := l.(*netlink.Vxlan)
		if vx.VtepDevIndex != index(t, c.node, c.nic) || vx.Learning || vx.Port != v1beta1.DefaultVXLANPort || uint32(vx.VxlanId) != vni {
			t.Fatalf("vxlan in %s: %+v, want parent %s, learning off, port 4789, vni %d", c.pod.Path(), vx, c.nic, vni)
		}
	}
	mustLinks(t, n1, "eth0")
	if s := mustState(t, p1, "eth1"); s.Kind != "vxlan" || s.MTU != 1450 || !s.Carrier {
		t.Fatalf("vxlan end: %+v, want kind vxlan, mtu 1500-50, carrier", s)
	}
	mustPing(t, p1, "10.0.0.2")
	mustDF(t, p2, "10.0.0.1", 1450)

	res, err := EnsureVXLAN(x1)
	mustResult(t, "second EnsureVXLAN", res, err, Unchanged)

	big := x1
	big.End.MTU = 1451
	if _, err := EnsureVXLAN(big); err == nil || !strings.Contains(err.Error(), "exceeds parent mtu 1500") {
		t.Fatalf("EnsureVXLAN with mtu 1451 over a 1500 underlay: %v, want an mtu error", err)
	}

	// VXLAN does not carry carrier: the remote end's down leaves the local
	// end with carrier, so the remote must be taken down by its own node.
	if err := SetAdminDown(p2, nil, "eth1").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if s := mustState(t, p1, "eth1"); !s.Carrier || !s.AdminUp {
		t.Fatalf("local vxlan end after the remote went down: %+v, want carrier kept", s)
	}
	mustNotPing(t, p1, "10.0.0.2")

	// A changed remote replaces the device.
	moved := x1
	moved.Remote = netip.MustParseAddr("192.168.50.9")
	res, err = EnsureVXLAN(moved)
	mustResult(t, "EnsureVXLAN with a new remote", res, err, Replaced)
}

func TestKernelVXLANIPv6Underlay(t *testing.T) {
	n1, n2 := underlayNodes(t)
	p1, p2 := newNS(t), newNS(t)
	for _, x := range []VXLAN{
		{Node: n1, VNI: 42, Remote: netip.MustParseAddr("fd50::2"), End: End{NS: p1, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.1/30")}}},
		{Node: n2, VNI: 42, Remote: netip.MustParseAddr("fd50::1"), End: End{NS: p2, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.2/30")}}},
	} {
		if _, err := EnsureVXLAN(x); err != nil {
			t.Fatal(err)
		}
	}
	if s := mustState(t, p1, "eth1"); s.MTU != 1430 {
		t.Fatalf("vxlan over IPv6 mtu %d, want 1500-70", s.MTU)
	}
	mustDF(t, p1, "10.0.0.2", 1430)
}

func TestKernelVXLANCollision(t *testing.T) {
	n1, n2 := underlayNodes(t)
	p1, p2, p3 := newNS(t), newNS(t), newNS(t)
	if _, err := EnsureVXLAN(VXLAN{Node: n1, VNI: 5001, Remote: netip.MustParseAddr("192.168.50.2"), End: End{NS: p1, Name: "eth1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVXLAN(VXLAN{Node: n2, VNI: 5001, Remote: netip.MustParseAddr("192.168.50.1"), End: End{NS: p2, Name: "eth1"}}); err != nil {
		t.Fatal(err)
	}
	// Same VNI and port on the same node towards another remote, into
	// another pod: the kernel still counts the device moved into p1.
	_, err := EnsureVXLAN(VXLAN{Node: n1, VNI: 5001, Remote: netip.MustParseAddr("192.168.50.3"), End: End{NS: p3, Name: "eth2"}})
	if !errors.Is(err, ErrVNIInUse) {
		t.Fatalf("second vxlan with vni 5001 on one node: %v, want ErrVNIInUse", err)
	}
	mustLinks(t, p3)
	mustLinks(t, n1, "eth0")

	got, err := ListVXLANs(n1, p1, p2, p3)
	if err != nil {
		t.Fatal(err)
	}
	want := []VXLANDevice{{Netns: p1.Path(), Name: "eth1", VNI: 5001, Port: v1beta1.DefaultVXLANPort, Remote: netip.MustParseAddr("192.168.50.2")}}
	if !slices.Equal(got, want) {
		t.Fatalf("ListVXLANs(node 1): %+v, want %+v (p2's device belongs to node 2)", got, want)
	}
}

func TestKernelMacvlan(t *testing.T) {
	node, pod := newNS(t), newNS(t)
	// Host NICs: veths with their peers up in the node (this kernel has no
	// dummy driver), so they have carrier as a cabled NIC would.
	for _, nic := range []string{"ens9", "ens10"} {
		if _, err := EnsureVeth(Veth{A: End{NS: node, Name: nic}, B: End{NS: node, Name: nic + "p"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The host side: a bridge-mode macvlan on the same NIC in the node.
	host := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "hostside", ParentIndex: index(t, node, "ens9")}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := node.h.LinkAdd(host); err != nil {
		t.Fatal(err)
	}
	if _, err := (End{NS: node, Name: "hostside", Addrs: []netip.Prefix{pfx("10.1.0.254/24")}}).finish(false); err != nil {
		t.Fatal(err)
	}

	m := Macvlan{Node: node, Parent: "ens9", End: End{NS: pod, Name: "eth1", Addrs: []netip.Prefix{pfx("10.1.0.1/24")}}}
	if _, err := EnsureMacvlan(m); err == nil || !strings.Contains(err.Error(), "parent ens9 is a veth") {
		t.Fatalf("EnsureMacvlan on an untrusted veth: %v, want refused", err)
	}
	mustLinks(t, pod)
	m.Trusted = []string{"ens9", "ens10"}
	res, err := EnsureMacvlan(m)
	mustResult(t, "first EnsureMacvlan", res, err, Created)
	if s := mustState(t, pod, "eth1"); s.Kind != "macvlan" || s.MTU != 1500 || !s.Carrier {
		t.Fatalf("macvlan end: %+v", s)
	}
	mustPing(t, pod, "10.1.0.254")
	mustDF(t, pod, "10.1.0.254", 1500)

	res, err = EnsureMacvlan(m)
	mustResult(t, "second EnsureMacvlan", res, err, Unchanged)

	big := m
	big.End.MTU = 9000
	if _, err := EnsureMacvlan(big); err == nil || !strings.Contains(err.Error(), "exceeds parent ens9 mtu 1500") {
		t.Fatalf("EnsureMacvlan with mtu 9000 on a 1500 NIC: %v", err)
	}

	m.Parent = "ens10"
	res, err = EnsureMacvlan(m)
	mustResult(t, "EnsureMacvlan on another NIC", res, err, Replaced)
	l, err := pod.h.LinkByName("eth1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().ParentIndex != index(t, node, "ens10") {
		t.Fatal("macvlan not moved to ens10")
	}
	mustNotPing(t, pod, "10.1.0.254")
}

// TestKernelMacvlanParentsOfTheNodeOnly: a pod's host end, a bridge and a
// bridge's port are refused as parents, naming what they are, and nothing
// is made in the pod; a trusted name is taken.
func TestKernelMacvlanParentsOfTheNodeOnly(t *testing.T) {
	node, pod, other := newNS(t), newNS(t), newNS(t)
	// Another pod's interface, as a primary CNI wires it: its host end in
	// the node, the other end in the pod, and a second one on a bridge.
	if _, err := EnsureVeth(Veth{A: End{NS: node, Name: "veth1a2b"}, B: End{NS: other, Name: "eth0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVeth(Veth{A: End{NS: node, Name: "veth3c4d"}, B: End{NS: other, Name: "eth9"}}); err != nil {
		t.Fatal(err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}
	if err := node.h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := node.h.LinkSetMasterByIndex(mustLink(t, node, "veth3c4d"), index(t, node, "cni0")); err != nil {
		t.Fatal(err)
	}
	for parent, says := range map[string]string{
		"veth1a2b": "parent veth1a2b is a veth (a pod's end or a cable to another namespace), not a NIC of the node",
		"cni0":     "parent cni0 is a bridge (a pod network's)",
		"veth3c4d": "parent veth3c4d is a veth",
	} {
		_, err := EnsureMacvlan(Macvlan{Node: node, Parent: parent, End: End{NS: pod, Name: "eth1"}})
		if err == nil || !strings.Contains(err.Error(), says) || !errors.Is(err, ErrUntrustedParent) {
			t.Errorf("macvlan on %s: %v, want refused saying %q, as ErrUntrustedParent", parent, err, says)
		}
	}
	// A port that is neither: a macvlan of the node's on a bridge.
	port := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: index(t, node, "veth1a2b")}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := node.h.LinkAdd(port); err != nil {
		t.Fatal(err)
	}
	if err := node.h.LinkSetMasterByIndex(mustLink(t, node, "mv0"), index(t, node, "cni0")); err != nil {
		t.Fatal(err)
	}
	if err := CheckParent(mustLink(t, node, "mv0"), nil); err == nil || !strings.Contains(err.Error(), "parent mv0 is a port of a bridge or bond") {
		t.Errorf("a bridge's port: %v, want refused", err)
	}
	mustLinks(t, pod)
	if _, err := EnsureMacvlan(Macvlan{Node: node, Parent: "veth1a2b", Trusted: []string{"veth1a2b"}, End: End{NS: pod, Name: "eth1"}}); err != nil {
		t.Fatalf("macvlan on a trusted parent: %v", err)
	}
}

func TestKernelDeleteLeavesNothing(t *testing.T) {
	n1, n2 := underlayNodes(t)
	v, a, b := pairOfPods(t, 0)
	p1, p2 := newNS(t), newNS(t)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVXLAN(VXLAN{Node: n1, VNI: 7, Remote: netip.MustParseAddr("192.168.50.2"), End: End{NS: p1, Name: "eth1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVXLAN(VXLAN{Node: n2, VNI: 7, Remote: netip.MustParseAddr("192.168.50.1"), End: End{NS: p2, Name: "eth1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureMacvlan(Macvlan{Node: n1, Parent: "eth0", Trusted: []string{"eth0"}, End: End{NS: p1, Name: "eth2"}}); err != nil {
		t.Fatal(err)
	}
	mustLinks(t, p1, "eth1", "eth2")

	// One veth end takes its peer along.
	for _, d := range []struct {
		ns   *Netns
		name string
	}{{a, "eth1"}, {p1, "eth1"}, {p1, "eth2"}, {p2, "eth1"}, {a, "eth1"}, {b, "eth1"}} {
		if err := Delete(d.ns, d.name); err != nil {
			t.Fatalf("Delete %s:%s: %v", d.ns.Path(), d.name, err)
		}
	}
	for _, ns := range []*Netns{a, b, p1, p2} {
		mustLinks(t, ns)
	}
	mustLinks(t, n1, "eth0")
	mustLinks(t, n2, "ens5")
}

// TestKernelDeleteGroupTakesEveryEnd: every end meshnet makes in a pod (a
// veth's, a VXLAN's, a macvlan's) is in Group, and DeleteGroup removes
// them in one request, the veth's peer in the other pod with it, and
// leaves the pod's other interfaces alone.
func TestKernelDeleteGroupTakesEveryEnd(t *testing.T) {
	n1, _ := underlayNodes(t)
	v, a, b := pairOfPods(t, 0)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVXLAN(VXLAN{Node: n1, VNI: 7, Remote: netip.MustParseAddr("192.168.50.2"), End: End{NS: a, Name: "eth2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureMacvlan(Macvlan{Node: n1, Parent: "eth0", Trusted: []string{"eth0"}, End: End{NS: a, Name: "eth3"}}); err != nil {
		t.Fatal(err)
	}
	// An interface of the pod's own, not meshnet's.
	if err := a.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "own0"}, PeerName: "own1"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"eth1", "eth2", "eth3"} {
		if g := mustLink(t, a, name).Attrs().Group; g != Group {
			t.Errorf("%s: group %#x, want %#x", name, g, Group)
		}
	}
	if err := DeleteGroup(a); err != nil {
		t.Fatal(err)
	}
	mustLinks(t, a, "own0", "own1")
	mustLinks(t, b)
	if err := DeleteGroup(a); err != nil {
		t.Errorf("DeleteGroup of a pod without meshnet's ends: %v, want nil", err)
	}
}

func TestKernelRoutes(t *testing.T) {
	v, a, _ := pairOfPods(t, 0)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	r := Route{Dst: pfx("10.77.0.0/16"), Gw: netip.MustParseAddr("10.0.0.2"), Dev: "eth1"}
	if err := AddRoute(a, r); err != nil {
		t.Fatal(err)
	}
	if err := AddRoute(a, r); err == nil {
		t.Fatal("adding an existing route succeeded")
	}
	out, err := netnstest.Run(a.Path(), "ip", "route", "show", "10.77.0.0/16")
	if err != nil || !strings.Contains(out, "10.77.0.0/16 via 10.0.0.2 dev eth1 proto static") {
		t.Fatalf("ip route after AddRoute: %q %v", out, err)
	}
	r.Metric = 10
	if err := ReplaceRoute(a, r); err != nil {
		t.Fatal(err)
	}
	def := Route{Dst: pfx("0.0.0.0/0"), Gw: netip.MustParseAddr("10.0.0.2")}
	if err := ReplaceRoute(a, def); err != nil {
		t.Fatal(err)
	}
	got, err := StaticRoutes(a, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	def.Dev, def.Table, r.Table = "eth1", 254, 254
	if !slices.Contains(got, r) || !slices.Contains(got, def) {
		t.Fatalf("StaticRoutes %v, want %v and %v", got, r, def)
	}
	for range 2 {
		if err := DeleteRoute(a, def); err != nil {
			t.Fatal(err)
		}
	}
	if err := DeleteRoute(a, Route{Dst: pfx("10.5.0.0/16"), Dev: "nosuch0"}); err != nil {
		t.Fatalf("deleting a route through a missing device: %v", err)
	}
	if out, _ := netnstest.Run(a.Path(), "ip", "route", "show", "default"); out != "" {
		t.Fatalf("default route still there: %q", out)
	}
}

// TestKernelEndsAnnounceThemselves: an end with an address comes up with
// arp_notify set, read back from the kernel, so it sends a gratuitous ARP
// (a peer that asked for it before it existed need not wait a second for
// its next ARP retry).
func TestKernelEndsAnnounceThemselves(t *testing.T) {
	v, a, b := pairOfPods(t, 0)
	if _, err := EnsureVeth(v); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*Netns{a, b} {
		out, err := netnstest.Run(ns.Path(), "cat", "/proc/sys/net/ipv4/conf/eth1/arp_notify")
		if err != nil || strings.TrimSpace(out) != "1" {
			t.Errorf("%s: arp_notify %q (%v), want 1", ns.Path(), out, err)
		}
	}
}
