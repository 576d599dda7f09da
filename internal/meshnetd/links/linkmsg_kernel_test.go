//go:build kernel

package links

import (
	"net"
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelDecodeLinkAgreesWithTheLibrary reads real interfaces of every
// kind meshnet makes (veth, one end down; VXLAN; macvlan; lo) with ReadAll
// and Read, whose lean decoder reads only what a Reading says, and with
// the netlink library's full decoding: the same kind, flags, state and MTU.
func TestKernelDecodeLinkAgreesWithTheLibrary(t *testing.T) {
	n1, n2 := underlayNodes(t)
	p1, p2 := newNS(t), newNS(t)
	x := VXLAN{Node: n1, VNI: 4242, Local: netip.MustParseAddr("192.168.50.1"), Remote: netip.MustParseAddr("192.168.50.2"),
		End: End{NS: p1, Name: "vx1", Addrs: []netip.Prefix{pfx("10.0.0.1/30")}}}
	if _, err := EnsureVXLAN(x); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureVeth(Veth{A: End{NS: p1, Name: "v1", MTU: 1400}, B: End{NS: p2, Name: "v2", MTU: 1400}}); err != nil {
		t.Fatal(err)
	}
	if r := SetAdminDown(p2, nil, "v2"); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if _, err := EnsureMacvlan(Macvlan{Node: n2, Parent: "ens5", Trusted: []string{"ens5"}, End: End{NS: p1, Name: "mv1"}}); err != nil {
		t.Fatal(err)
	}
	all, err := ReadAll(p1)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("ReadAll: %v, want lo, vx1, v1 and mv1", all)
	}
	for name, got := range all {
		l, err := p1.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		a := l.Attrs()
		want := Reading{Kind: l.Type(), AdminUp: a.Flags&net.FlagUp != 0, Carrier: a.RawFlags&unix.IFF_LOWER_UP != 0,
			OperState: a.OperState.String(), MTU: a.MTU}
		got.Addrs, got.Counters = nil, Counters{}
		if !reflect.DeepEqual(got.Reading, want) || got.Index != a.Index {
			t.Errorf("%s: ReadAll %+v (index %d), the library %+v (index %d)", name, got.Reading, got.Index, want, a.Index)
		}
		one, ok, err := Read(p1, name)
		if err != nil || !ok {
			t.Fatalf("Read %s: %v, %v", name, ok, err)
		}
		one.Addrs, one.Counters = nil, Counters{}
		if !reflect.DeepEqual(one.Reading, want) {
			t.Errorf("%s: Read %+v, the library %+v", name, one.Reading, want)
		}
		if st := a.Statistics; name == "vx1" && st != nil && all[name].Counters.TxPackets > st.TxPackets {
			t.Errorf("%s: %d packets sent before the library read %d", name, all[name].Counters.TxPackets, st.TxPackets)
		}
	}
	if _, ok, err := Read(p1, "nope"); ok || err != nil {
		t.Errorf("Read of no interface: %v, %v; want not found", ok, err)
	}
}
