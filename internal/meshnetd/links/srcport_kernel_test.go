//go:build kernel

package links

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelVXLANSourcePortIsPinned: an end made with SrcPort sends every
// datagram from it, also those a pod with NET_ADMIN sends with another VNI
// (an FDB entry of its own), and the kernel refuses to change it; an end
// with another SrcPort is replaced.
func TestKernelVXLANSourcePortIsPinned(t *testing.T) {
	n1, n2 := underlayNodes(t)
	p1 := newNS(t)
	x := VXLAN{Node: n1, VNI: 100, Local: netip.MustParseAddr("192.168.50.1"), Remote: netip.MustParseAddr("192.168.50.2"), SrcPort: 40100,
		End: End{NS: p1, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.1/30")}}}
	res, err := EnsureVXLAN(x)
	mustResult(t, "EnsureVXLAN", res, err, Created)
	res, err = EnsureVXLAN(x)
	mustResult(t, "EnsureVXLAN again", res, err, Unchanged)

	// The pod re-points its end: another VNI, to the same node.
	if out, err := runIn(p1, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "eth1", "dst", "192.168.50.2", "vni", "777"); err != nil {
		t.Fatalf("bridge fdb append: %v\n%s", err, out)
	}
	if out, err := runIn(p1, "ip", "link", "set", "eth1", "type", "vxlan", "srcport", "50000", "50001"); err == nil {
		t.Errorf("the pod changed its end's source port:\n%s", out)
	}

	// Every datagram reaching the far node's port comes from 40100.
	type datagram struct {
		from netip.AddrPort
		vni  uint32
	}
	got := make(chan datagram, 64)
	err = ns.WithNetNSPath(n2.Path(), func(ns.NetNS) error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 168, 50, 2), Port: 4789})
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 2048)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					close(got)
					return
				}
				if n >= 8 {
					got <- datagram{from, uint32(buf[4])<<16 | uint32(buf[5])<<8 | uint32(buf[6])}
				}
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"10.0.0.2", "10.0.0.3"} {
		ping(p1, dst) // ARP requests: broadcast, to every FDB entry
	}
	vnis := map[uint32]int{}
	for d := range got {
		vnis[d.vni]++
		if d.from.Port() != 40100 {
			t.Errorf("a datagram with vni %d from port %d, want 40100", d.vni, d.from.Port())
		}
	}
	if vnis[100] == 0 || vnis[777] == 0 {
		t.Fatalf("datagrams by vni: %v, want the ARP requests with the end's VNI and the pod's 777", vnis)
	}

	x.SrcPort = 40200
	res, err = EnsureVXLAN(x)
	mustResult(t, "EnsureVXLAN with another source port", res, err, Replaced)
}

func runIn(n *Netns, name string, args ...string) (string, error) {
	return netnstest.Run(n.Path(), name, args...)
}
