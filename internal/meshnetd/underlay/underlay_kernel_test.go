//go:build kernel

package underlay

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// underlayLab is a node with a VXLAN device per VNI towards its peer node
// (10.0.0.2, fd00::2 through p0), and a stranger (a pod, say) on another
// interface (10.0.1.2, fd00:1::2 through s0). The node routes between them.
type underlayLab struct {
	node, peer, stranger string
}

func newUnderlayLab(t *testing.T, vnis ...int) underlayLab {
	t.Helper()
	l := underlayLab{node: netnstest.New(t), peer: netnstest.New(t), stranger: netnstest.New(t)}
	ip := func(path string, args ...string) { t.Helper(); netnstest.IP(t, path, args...) }
	for _, c := range [][]string{
		{"net.ipv4.ip_forward=1"}, {"net.ipv6.conf.all.forwarding=1"},
		// The guard, not the kernel's own filter, is what is proven.
		{"net.ipv4.conf.all.rp_filter=0"}, {"net.ipv4.conf.default.rp_filter=0"},
	} {
		if out, err := netnstest.Run(l.node, "sysctl", "-qw", c[0]); err != nil {
			t.Fatalf("sysctl %s: %v\n%s", c[0], err, out)
		}
	}
	ip(l.node, "link", "add", "p0", "type", "veth", "peer", "name", "p1", "netns", l.peer)
	ip(l.node, "link", "add", "s0", "type", "veth", "peer", "name", "s1", "netns", l.stranger)
	for _, c := range []struct{ ns, dev, v4, v6 string }{
		{l.node, "p0", "10.0.0.1/24", "fd00::1/64"}, {l.peer, "p1", "10.0.0.2/24", "fd00::2/64"},
		{l.node, "s0", "10.0.1.1/24", "fd00:1::1/64"}, {l.stranger, "s1", "10.0.1.2/24", "fd00:1::2/64"},
	} {
		ip(c.ns, "addr", "add", c.v4, "dev", c.dev)
		ip(c.ns, "addr", "add", c.v6, "dev", c.dev, "nodad")
		ip(c.ns, "link", "set", c.dev, "up")
	}
	ip(l.peer, "route", "add", "10.0.1.0/24", "via", "10.0.0.1")
	ip(l.stranger, "route", "add", "10.0.0.0/24", "via", "10.0.1.1")
	for _, v := range vnis {
		remote := "10.0.0.2"
		if v >= 300 {
			remote = "fd00::2"
		}
		dev := "vx" + strconv.Itoa(v)
		ip(l.node, "link", "add", dev, "type", "vxlan", "id", strconv.Itoa(v), "remote", remote, "dstport", "4789", "dev", "p0", "nolearning")
		ip(l.node, "link", "set", dev, "up")
	}
	return l
}

// send sends one VXLAN datagram with vni from the namespace at path, from
// src to dst.
func send(t *testing.T, path string, src, dst netip.AddrPort, vni uint32) {
	t.Helper()
	pkt := make([]byte, 8, 8+60)
	pkt[0] = 0x08 // the VNI is valid
	binary.BigEndian.PutUint32(pkt[4:], vni<<8)
	pkt = append(pkt, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5)
	pkt = append(pkt, make([]byte, 46)...)
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(src), net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(pkt)
		return err
	})
	if err != nil {
		t.Fatalf("send vni %d from %s to %s: %v", vni, src, dst, err)
	}
}

// rxPackets is the packets dev has received, as ip -s reads them.
func rxPackets(t *testing.T, path, dev string) uint64 {
	t.Helper()
	out, err := netnstest.Run(path, "ip", "-j", "-s", "link", "show", dev)
	if err != nil {
		t.Fatalf("ip -s link show %s: %v\n%s", dev, err, out)
	}
	var l []struct {
		Stats struct {
			RX struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 1 {
		t.Fatalf("ip -s link show %s: %v\n%s", dev, err, out)
	}
	return l[0].Stats.RX.Packets
}

// delivered sends a datagram and reports whether dev received it: the
// datagram is decapsulated, if at all, before Write returns, and the
// counters are read back after.
func delivered(t *testing.T, l underlayLab, from string, src, dst netip.AddrPort, vni uint32, dev string) bool {
	t.Helper()
	before := rxPackets(t, l.node, dev)
	send(t, from, src, dst, vni)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if rxPackets(t, l.node, dev) > before {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func droppedBy(t *testing.T, g *Guard) map[Reason]uint64 {
	t.Helper()
	n, err := g.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

var (
	peer4     = netip.MustParseAddr("10.0.0.2")
	peer6     = netip.MustParseAddr("fd00::2")
	toNode4   = ap("10.0.1.1:4789")
	toNode6   = ap("[fd00:1::1]:4789")
	fromPeer4 = ap("10.0.0.2:40000")
	fromPeer6 = ap("[fd00::2]:40000")
)

// TestKernelGuardKeepsLinksToTheirFarEnds proves, on the kernel's own
// decapsulation, that a link's VNI is taken from its far end only, that
// no one can pass for the far end nor send as the node, and that
// everything else passes.
func TestKernelGuardKeepsLinksToTheirFarEnds(t *testing.T) {
	l := newUnderlayLab(t, 100, 200, 300)
	// Unguarded, anyone reaches a link: the datagram the guard is for.
	if !delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 100, "vx100") {
		t.Fatal("without the guard the stranger's datagram did not arrive: the test proves nothing")
	}

	g, err := Open(l.node, map[string]Tunnel{
		"lab/r1/eth1": {Remote: peer4, Port: 4789, VNI: 100},
		"lab/r1/eth3": {Remote: peer6, Port: 4789, VNI: 300},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	if !delivered(t, l, l.peer, fromPeer4, ap("10.0.0.1:4789"), 100, "vx100") {
		t.Error("the far end's datagram did not arrive")
	}
	if !delivered(t, l, l.peer, fromPeer6, ap("[fd00::1]:4789"), 300, "vx300") {
		t.Error("the far end's datagram (IPv6 underlay) did not arrive")
	}
	if delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 100, "vx100") {
		t.Error("a stranger's datagram arrived in the link")
	}
	if delivered(t, l, l.stranger, ap("[fd00:1::2]:40000"), toNode6, 300, "vx300") {
		t.Error("a stranger's datagram (IPv6) arrived in the link")
	}
	if n := droppedBy(t, g); n[NotFarEnd] != 2 {
		t.Errorf("dropped %v, want 2 %s", n, NotFarEnd)
	}

	// The stranger passes for the far end: its address on its own
	// interface, which the node does not route the far end through.
	netnstest.IP(t, l.stranger, "addr", "add", "10.0.0.2/32", "dev", "s1")
	if delivered(t, l, l.stranger, fromPeer4, toNode4, 100, "vx100") {
		t.Error("a datagram spoofing the far end's address arrived in the link")
	}
	if n := droppedBy(t, g); n[Spoofed] != 1 {
		t.Errorf("dropped %v, want 1 %s", n, Spoofed)
	}
	netnstest.IP(t, l.stranger, "addr", "del", "10.0.0.2/32", "dev", "s1")

	// A VNI of no link of the node's (the pod network's own VXLAN) passes.
	if !delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 200, "vx200") {
		t.Error("a datagram with a VNI the guard does not hold was dropped")
	}

	// Through the node to the peer: to the links' port dropped, to
	// another port forwarded.
	if !forwarded(t, l, 5000) {
		t.Error("a datagram to another port was not forwarded: the test proves nothing")
	}
	if forwarded(t, l, 4789) {
		t.Error("the node forwarded a datagram to the links' port")
	}
	if n := droppedBy(t, g); n[Forwarded] != 1 {
		t.Errorf("dropped %v, want 1 %s", n, Forwarded)
	}
	// What the Guard counts is what anyone reads from outside meshnetd,
	// and nft lists the table.
	if n, err := ReadDropped(l.node); err != nil || n[NotFarEnd] != 2 || n[Spoofed] != 1 || n[Forwarded] != 1 {
		t.Errorf("ReadDropped: %v, %v; want 2 %s, 1 %s, 1 %s", n, err, NotFarEnd, Spoofed, Forwarded)
	}
	if out, err := netnstest.Run(l.node, "nft", "list", "table", "inet", TableName); err != nil {
		t.Errorf("nft list table inet %s: %v\n%s", TableName, err, out)
	}

	// A released link's VNI is guarded no more; one admitted is.
	if err := g.Release("lab/r1/eth1"); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit("lab/r2/eth1", Tunnel{Remote: peer4, Port: 4789, VNI: 200}); err != nil {
		t.Fatal(err)
	}
	if !delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 100, "vx100") {
		t.Error("a released VNI is still guarded")
	}
	if delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 200, "vx200") {
		t.Error("an admitted VNI is not guarded")
	}
	if !delivered(t, l, l.peer, fromPeer4, ap("10.0.0.1:4789"), 200, "vx200") {
		t.Error("an admitted link's far end did not get through")
	}
}

// TestKernelGuardKeepsToTheFarEndsPort: a far end that sends from a port
// of its own (SrcPort) is told from every other end of its node by it: a
// datagram from the far end's address with its VNI but another source
// port (another end re-pointed by a pod with NET_ADMIN) is dropped; from
// the port, it arrives; a far end admitted with no port (a physical peer)
// passes from any port.
func TestKernelGuardKeepsToTheFarEndsPort(t *testing.T) {
	l := newUnderlayLab(t, 100, 200, 300)
	g, err := Open(l.node, map[string]Tunnel{
		"lab/r1/eth1": {Remote: peer4, Port: 4789, VNI: 100, SrcPort: 40100},
		"lab/r1/eth2": {Remote: peer4, Port: 4789, VNI: 200},
		"lab/r1/eth3": {Remote: peer6, Port: 4789, VNI: 300, SrcPort: 40300},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	toNode := ap("10.0.0.1:4789")
	if !delivered(t, l, l.peer, ap("10.0.0.2:40100"), toNode, 100, "vx100") {
		t.Error("the far end's datagram from its port did not arrive")
	}
	if delivered(t, l, l.peer, ap("10.0.0.2:40200"), toNode, 100, "vx100") {
		t.Error("a datagram from the far end's node but another end's port arrived")
	}
	if !delivered(t, l, l.peer, ap("[fd00::2]:40300"), ap("[fd00::1]:4789"), 300, "vx300") {
		t.Error("the far end's datagram from its port (IPv6) did not arrive")
	}
	if delivered(t, l, l.peer, ap("[fd00::2]:40301"), ap("[fd00::1]:4789"), 300, "vx300") {
		t.Error("a datagram from another port (IPv6) arrived")
	}
	for _, port := range []string{"40200", "50000"} {
		if !delivered(t, l, l.peer, ap("10.0.0.2:"+port), toNode, 200, "vx200") {
			t.Errorf("a far end admitted with any port: from port %s dropped", port)
		}
	}
	if n := droppedBy(t, g); n[NotFarEndsPort] != 2 || n[NotFarEnd] != 0 {
		t.Errorf("dropped %v, want 2 %s", n, NotFarEndsPort)
	}
	// The far end's port learned later (Admit again): then only it passes.
	if err := g.Admit("lab/r1/eth2", Tunnel{Remote: peer4, Port: 4789, VNI: 200, SrcPort: 40200}); err != nil {
		t.Fatal(err)
	}
	if delivered(t, l, l.peer, ap("10.0.0.2:50000"), toNode, 200, "vx200") {
		t.Error("once the far end's port is known, another port still passes")
	}
	if !delivered(t, l, l.peer, ap("10.0.0.2:40200"), toNode, 200, "vx200") {
		t.Error("once the far end's port is known, it does not pass")
	}
}

// forwarded sends a datagram from the stranger through the node to the
// peer's port and reports whether the peer got it.
func forwarded(t *testing.T, l underlayLab, port uint16) bool {
	t.Helper()
	got := make(chan bool, 1)
	err := ns.WithNetNSPath(l.peer, func(ns.NetNS) error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2), Port: int(port)})
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			for {
				// The node's own VXLAN devices send to the peer's 4789 too
				// (IPv6 neighbour discovery): only the stranger's counts.
				_, from, err := c.ReadFromUDPAddrPort(make([]byte, 2048))
				if err != nil || from.Addr().Unmap() == netip.MustParseAddr("10.0.1.2") {
					got <- err == nil
					return
				}
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatalf("listen on the peer: %v", err)
	}
	send(t, l.stranger, ap("10.0.1.2:40000"), netip.AddrPortFrom(peer4, port), 100)
	return <-got
}

// TestKernelGuardRestartAndReplace: a second Open (a restarted meshnetd)
// replaces the table with its own entries at once; Replace keeps a fresh
// admission its list lacks and drops a stale one.
func TestKernelGuardRestartAndReplace(t *testing.T) {
	l := newUnderlayLab(t, 100, 200)
	first, err := Open(l.node, map[string]Tunnel{"lab/r1/eth1": {Remote: peer4, Port: 4789, VNI: 200}})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	g, err := Open(l.node, map[string]Tunnel{"lab/r1/eth1": {Remote: peer4, Port: 4789, VNI: 100}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	opened := time.Now()
	if delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 100, "vx100") {
		t.Error("after the restart the link is not guarded")
	}
	if !delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 200, "vx200") {
		t.Error("after the restart the previous Guard's entry is still there")
	}

	if err := g.Admit("lab/r2/eth1", Tunnel{Remote: peer4, Port: 4789, VNI: 200}); err != nil {
		t.Fatal(err)
	}
	// r2 is being made (not in the list yet); r1, admitted earlier, is gone.
	grace := time.Since(opened) / 2
	if err := g.Replace(map[string]Tunnel{}, grace); err != nil {
		t.Fatal(err)
	}
	if got := g.Tunnels(); len(got) != 1 || got[0].VNI != 200 {
		t.Errorf("entries after Replace: %v, want vni 200's only", got)
	}
	if !delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 100, "vx100") {
		t.Error("Replace left a stale entry")
	}
	if delivered(t, l, l.stranger, ap("10.0.1.2:40000"), toNode4, 200, "vx200") {
		t.Error("Replace dropped an entry admitted within its grace")
	}
	if err := g.Replace(map[string]Tunnel{}, 0); err != nil {
		t.Fatal(err)
	}
	if got := g.Tunnels(); len(got) != 0 {
		t.Errorf("entries after Replace with no grace: %v", got)
	}
}

// BenchmarkKernelAdmit measures what the guard adds to the wiring of one
// VXLAN end, Admit (before the end is made) and Release (after it is
// removed), with the table already holding entries of other links; it
// reports the kernel memory (slab) the entries take.
func BenchmarkKernelAdmit(b *testing.B) {
	for _, held := range []int{0, 1024, 10000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			path := netnstest.New(b)
			slabBefore := slab(b)
			owners := map[string]Tunnel{}
			for i := range held {
				owners[fmt.Sprintf("lab/r%d/eth1", i)] = Tunnel{Remote: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 4789, VNI: uint32(i + 1)}
			}
			start := time.Now()
			g, err := Open(path, owners)
			if err != nil {
				b.Fatal(err)
			}
			open := time.Since(start)
			defer g.Close()
			slabHeld := slab(b) - slabBefore
			t := Tunnel{Remote: peer4, Port: 4789, VNI: 1 << 20}
			b.ResetTimer()
			for b.Loop() {
				if err := g.Admit("lab/new/eth1", t); err != nil {
					b.Fatal(err)
				}
				if err := g.Release("lab/new/eth1"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(open.Microseconds())/1000, "open-ms")
			if held > 0 {
				b.ReportMetric(float64(slabHeld)/float64(held), "slab-B/entry")
			}
		})
	}
}

// slab is the kernel's slab memory in bytes (/proc/meminfo).
func slab(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Slab:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no Slab in /proc/meminfo")
	return 0
}
