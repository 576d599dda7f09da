//go:build vm

package vmcheck

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestVMNetemDelayRaisesRTT proves the VM's kernel has working netem: 40 ms
// of delay on one end of a veth raises the round-trip time by 40 ms.
func TestVMNetemDelayRaisesRTT(t *testing.T) {
	const delay = 40 * time.Millisecond
	a, b := newNS(t), newNS(t)
	ha, hb := handleAt(t, a), handleAt(t, b)

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "veth-a"},
		PeerName:      "veth-b",
		PeerNamespace: netlink.NsFd(int(b.Fd())),
	}
	if err := ha.LinkAdd(veth); err != nil {
		t.Fatalf("add veth pair: %v", err)
	}
	linkA := setUp(t, ha, "veth-a", "10.99.0.1/30")
	setUp(t, hb, "veth-b", "10.99.0.2/30")

	server := udpEcho(t, b, "10.99.0.2:0")
	client := udpDial(t, a, server)
	base := medianRTT(t, client, 21)

	qdisc := netlink.NewNetem(
		netlink.QdiscAttrs{LinkIndex: linkA.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		netlink.NetemQdiscAttrs{Latency: uint32(delay.Microseconds())},
	)
	if err := ha.QdiscAdd(qdisc); err != nil {
		t.Fatalf("add netem qdisc on veth-a: %v", err)
	}
	qdiscs, err := ha.QdiscList(linkA)
	if err != nil {
		t.Fatalf("list qdiscs of veth-a: %v", err)
	}
	i := slices.IndexFunc(qdiscs, func(q netlink.Qdisc) bool { return q.Type() == "netem" })
	if i < 0 {
		t.Fatalf("veth-a has no netem qdisc after adding one: %v", qdiscs)
	}
	// netlink v1.3.1 sends latency in microseconds but reads back the
	// kernel's psched ticks unconverted.
	ticks := qdiscs[i].(*netlink.Netem).Latency
	if got := time.Duration(float64(ticks)/netlink.TickInUsec()) * time.Microsecond; got.Round(time.Microsecond*10) != delay {
		t.Fatalf("netem latency read back = %v (%d ticks), want %v", got, ticks, delay)
	}

	delayed := medianRTT(t, client, 21)
	rise := delayed - base
	t.Logf("median RTT %v without netem, %v with netem delay %v: +%v", base, delayed, delay, rise)
	if lo, hi := delay*8/10, delay*12/10; rise < lo || rise > hi {
		t.Fatalf("netem delay %v raised the median RTT by %v, want %v..%v", delay, rise, lo, hi)
	}
}

// TestVMIPRoute2Works proves the host's ip, tc and ping run in the VM on a
// named network namespace, as tests that shell out to them need.
func TestVMIPRoute2Works(t *testing.T) {
	name := filepath.Base(newNS(t).Path())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip netns exec %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("ip", "link", "set", "lo", "up")
	run("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", "100us", "distribution", "normal")
	if out := run("tc", "qdisc", "show", "dev", "lo"); !strings.Contains(out, "netem") || !strings.Contains(out, "delay 1ms") {
		t.Fatalf("tc qdisc show dev lo = %q, want a netem qdisc with delay 1ms", out)
	}
	run("ping", "-c", "1", "-W", "5", "127.0.0.1")
}

// newNS makes a named network namespace that the test removes.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		if err := testutils.UnmountNS(n); err != nil {
			t.Errorf("remove network namespace: %v", err)
		}
	})
	return n
}

// handleAt opens a netlink socket in n, so no thread has to switch to it.
func handleAt(t *testing.T, n ns.NetNS) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(int(n.Fd())), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", n.Path(), err)
	}
	t.Cleanup(h.Close)
	return h
}

// setUp brings lo and the named link up, with addr on the link.
func setUp(t *testing.T, h *netlink.Handle, name, addr string) netlink.Link {
	t.Helper()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("set lo up: %v", err)
	}
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("find %s: %v", name, err)
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(link, a); err != nil {
		t.Fatalf("add %s to %s: %v", addr, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
	return link
}

// udpEcho serves UDP echo on addr in n; sockets stay in the namespace they
// were made in, so only the socket's creation runs in n.
func udpEcho(t *testing.T, n ns.NetNS, addr string) *net.UDPAddr {
	t.Helper()
	var conn *net.UDPConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(mustAddrPort(t, addr)))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, n.Path(), err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			m, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			conn.WriteToUDP(buf[:m], from)
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr)
}

func udpDial(t *testing.T, n ns.NetNS, server *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp4", nil, server)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s: %v", server, n.Path(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// medianRTT sends probes one at a time and returns the median round trip,
// after one unmeasured probe that resolves the neighbour.
func medianRTT(t *testing.T, conn *net.UDPConn, probes int) time.Duration {
	t.Helper()
	var rtts []time.Duration
	for seq := range probes + 1 {
		rtt, err := probe(conn, uint64(seq))
		if err != nil {
			t.Fatalf("probe %d to %s: %v", seq, conn.RemoteAddr(), err)
		}
		if seq > 0 {
			rtts = append(rtts, rtt)
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

func probe(conn *net.UDPConn, seq uint64) (time.Duration, error) {
	msg := binary.BigEndian.AppendUint64(nil, seq)
	start := time.Now()
	if _, err := conn.Write(msg); err != nil {
		return 0, err
	}
	buf := make([]byte, 64)
	for {
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return 0, err
		}
		m, err := conn.Read(buf)
		if err != nil {
			return 0, err
		}
		if bytes.Equal(buf[:m], msg) {
			return time.Since(start), nil
		}
		// A late echo of an earlier probe: keep waiting for this one.
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
