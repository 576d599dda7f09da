//go:build vm

package netem

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshnet/meshnet/internal/shaping"
)

// The vm tests shape dev in namespace a; the packets go a -> b over a veth.
const dev = "eth1"

var (
	addrA = netip.MustParseAddr("10.99.0.1")
	addrB = netip.MustParseAddr("10.99.0.2")
)

type pair struct {
	a, b ns.NetNS
	c    *Conn // in a
}

func newPair(t testing.TB) *pair {
	t.Helper()
	p := &pair{a: newNS(t), b: newNS(t)}
	addVeth(t, p.a, dev, p.b, dev)
	ha, hb := netlinkAt(t, p.a), netlinkAt(t, p.b)
	la, lb := mustLink(t, ha, dev), mustLink(t, hb, dev)
	addAddr(t, ha, la, addrA)
	addAddr(t, hb, lb, addrB)
	// Static neighbours: ARP through a lossy qdisc would skew the counts.
	addNeigh(t, ha, la, addrB, lb.Attrs().HardwareAddr)
	addNeigh(t, hb, lb, addrA, la.Attrs().HardwareAddr)
	p.c = openConn(t, p.a)
	return p
}

func mustLink(t testing.TB, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func addAddr(t testing.TB, h *netlink.Handle, l netlink.Link, a netip.Addr) {
	t.Helper()
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatalf("add %s: %v", a, err)
	}
}

func addNeigh(t testing.TB, h *netlink.Handle, l netlink.Link, a netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	err := h.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4,
		State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: mac})
	if err != nil {
		t.Fatalf("add neighbour %s: %v", a, err)
	}
}

func (p *pair) apply(t testing.TB, s shaping.Spec) {
	t.Helper()
	if err := p.c.Apply(dev, s); err != nil {
		t.Fatal(err)
	}
}

func (p *pair) get(t testing.TB) State {
	t.Helper()
	st, err := p.c.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tcShow is `tc -s qdisc show dev eth1` in n, from iproute2, which the vm
// tier puts in the VM.
func tcShow(t testing.TB, n ns.NetNS) string {
	t.Helper()
	return tcRun(t, n, "-s", "qdisc", "show", "dev", dev)
}

func tcRun(t testing.TB, n ns.NetNS, args ...string) string {
	t.Helper()
	out, err := exec.Command("tc", append([]string{"-n", filepath.Base(n.Path())}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// udpIn opens a UDP socket in n.
func udpIn(t testing.TB, n ns.NetNS, local netip.AddrPort, remote *netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := n.Do(func(ns.NetNS) (err error) {
		if remote != nil {
			c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(local), net.UDPAddrFromAddrPort(*remote))
		} else {
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(local))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(4 << 20)
	t.Cleanup(func() { c.Close() })
	return c
}

// Probes carry a sequence number, their send time, a pattern and a CRC32
// of all that, so the receiver tells intact, duplicated and corrupted ones.
func probe(buf []byte, seq uint64) {
	binary.BigEndian.PutUint64(buf[0:], seq)
	binary.BigEndian.PutUint64(buf[8:], uint64(time.Now().UnixNano()))
	for i := 16; i < len(buf)-4; i++ {
		buf[i] = byte(seq) + byte(i)
	}
	binary.BigEndian.PutUint32(buf[len(buf)-4:], crc32.ChecksumIEEE(buf[:len(buf)-4]))
}

func probeOK(buf []byte) bool {
	return len(buf) >= 20 && crc32.ChecksumIEEE(buf[:len(buf)-4]) == binary.BigEndian.Uint32(buf[len(buf)-4:])
}

// flow is a paced one-way stream of probes a -> b.
type flow struct {
	count   int
	size    int // UDP payload bytes
	gap     time.Duration
	noCheck bool // send without UDP checksum, so corrupted payloads arrive
	// during runs in the test's goroutine while the probes go out.
	during func()
}

type tally struct {
	sent, datagrams, corrupted int
	seen                       map[uint64]int // intact probes by sequence number
}

func (t tally) unique() int { return len(t.seen) }

func (t tally) duplicates() int {
	n := 0
	for _, c := range t.seen {
		n += c - 1
	}
	return n
}

// quiet is how long the receiver waits after the last probe: longer than
// any delay a test sets.
const quiet = time.Second

func (p *pair) run(t testing.TB, f flow) tally {
	t.Helper()
	dst := netip.AddrPortFrom(addrB, 9000)
	rx := udpIn(t, p.b, dst, nil)
	tx := udpIn(t, p.a, netip.AddrPortFrom(addrA, 9001), &dst)
	if f.noCheck {
		sc, err := tx.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := sc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
		}); err != nil || serr != nil {
			t.Fatalf("SO_NO_CHECK: %v %v", err, serr)
		}
	}
	res := tally{seen: map[uint64]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, err := rx.Read(buf)
			if err != nil {
				return
			}
			res.datagrams++
			if !probeOK(buf[:n]) {
				res.corrupted++
				continue
			}
			res.seen[binary.BigEndian.Uint64(buf)]++
		}
	})
	sendErr := make(chan error, 1)
	go func() {
		buf := make([]byte, f.size)
		start := time.Now()
		for i := range f.count {
			if d := time.Until(start.Add(time.Duration(i) * f.gap)); d > 0 {
				time.Sleep(d)
			}
			probe(buf, uint64(i))
			if _, err := tx.Write(buf); err != nil {
				sendErr <- err
				return
			}
			res.sent++ // read after sendErr
		}
		sendErr <- nil
	}()
	if f.during != nil {
		f.during()
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("send probe: %v", err)
	}
	time.Sleep(quiet)
	rx.Close()
	wg.Wait()
	return res
}

// rtts measures round trips a -> b -> a of count probes, gap apart; b
// echoes without shaping, so an RTT is the base RTT plus netem's delay.
func (p *pair) rtts(t testing.TB, count int, gap time.Duration) []time.Duration {
	t.Helper()
	srv := netip.AddrPortFrom(addrB, 7)
	echo := udpIn(t, p.b, srv, nil)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			echo.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	cl := udpIn(t, p.a, netip.AddrPortFrom(addrA, 7007), &srv)
	var (
		mu  sync.Mutex
		out []time.Duration
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, err := cl.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if !probeOK(buf[:n]) {
				continue
			}
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[8:])))
			mu.Lock()
			out = append(out, now.Sub(sent))
			mu.Unlock()
		}
	})
	buf := make([]byte, 64)
	start := time.Now()
	for i := range count {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		probe(buf, uint64(i))
		if _, err := cl.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(quiet)
	cl.Close()
	echo.Close()
	wg.Wait()
	if len(out) < count*9/10 {
		t.Fatalf("only %d of %d echoes came back", len(out), count)
	}
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// tcpGoodput sends size bytes a -> b over TCP and returns the payload rate
// in bits/s between the first and the last byte received.
func (p *pair) tcpGoodput(t testing.TB, size int) float64 {
	t.Helper()
	var ln net.Listener
	if err := p.b.Do(func(ns.NetNS) (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(addrB, 5001).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n           int64
		first, last time.Time
		err         error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		var r result
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if r.n == 0 {
					r.first = time.Now()
				}
				r.n += int64(n)
				r.last = time.Now()
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				r.err = err
				break
			}
		}
		done <- r
	}()
	var c net.Conn
	if err := p.a.Do(func(ns.NetNS) (err error) {
		c, err = net.Dial("tcp4", netip.AddrPortFrom(addrB, 5001).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	r := <-done
	if r.err != nil || r.n != int64(size) {
		t.Fatalf("received %d of %d bytes: %v", r.n, size, r.err)
	}
	return float64(r.n-1) * 8 / r.last.Sub(r.first).Seconds()
}

// snmp reads counters from /proc/net/snmp as seen from n, e.g. "Udp",
// "InCsumErrors".
func snmp(t testing.TB, n ns.NetNS, proto, name string) string {
	t.Helper()
	var b []byte
	if err := n.Do(func(ns.NetNS) (err error) {
		b, err = os.ReadFile("/proc/thread-self/net/snmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, name); i > 0 {
			return f[i]
		}
	}
	t.Fatalf("no %s %s in snmp", proto, name)
	return ""
}
