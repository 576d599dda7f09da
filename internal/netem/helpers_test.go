//go:build kernel || vm

package netem

import (
	"errors"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	tc "github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNS makes a network namespace removed at the end of the test.
func newNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("make netns: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		if err := testutils.UnmountNS(n); err != nil {
			t.Errorf("remove netns %s: %v", n.Path(), err)
		}
	})
	return n
}

func handleOf(n ns.NetNS) netns.NsHandle { return netns.NsHandle(n.Fd()) }

// openConn is a Conn on n closed at the end of the test.
func openConn(t testing.TB, n ns.NetNS) *Conn {
	t.Helper()
	c, err := Open(handleOf(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// netlinkAt is a vishvananda/netlink handle in n.
func netlinkAt(t testing.TB, n ns.NetNS) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(handleOf(n), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// tcAt is a go-tc socket in n, for qdiscs that are not meshnet's.
func tcAt(t testing.TB, n ns.NetNS) *tc.Tc {
	t.Helper()
	c, err := tc.Open(&tc.Config{NetNS: int(n.Fd())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addVeth makes a veth pair a (in na) - b (in nb), both up.
func addVeth(t testing.TB, na ns.NetNS, a string, nb ns.NetNS, b string) {
	t.Helper()
	ha := netlinkAt(t, na)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: a},
		PeerName:      b,
		PeerNamespace: netlink.NsFd(nb.Fd()),
	}
	if err := ha.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s/%s: %v", a, b, err)
	}
	for _, l := range []struct {
		h    *netlink.Handle
		name string
	}{{ha, a}, {netlinkAt(t, nb), b}, {ha, "lo"}, {netlinkAt(t, nb), "lo"}} {
		link, err := l.h.LinkByName(l.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.h.LinkSetUp(link); err != nil {
			t.Fatalf("set %s up: %v", l.name, err)
		}
	}
}

// tbfHandle is the handle of the foreign tbf qdisc the tests add.
const tbfHandle = 1 << 16

// addTbf installs a tbf root qdisc by hand, as an operator's tc would.
func addTbf(t testing.TB, n ns.NetNS, dev string) {
	t.Helper()
	link, err := netlinkAt(t, n).LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	burst := uint32(32 << 10)
	err = tcAt(t, n).Qdisc().Add(&tc.Object{
		Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(link.Attrs().Index), Handle: tbfHandle, Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "tbf", Tbf: &tc.Tbf{
			Parms: &tc.TbfQopt{Mtu: 1514, Limit: 0x5000, Rate: tc.RateSpec{Rate: 125000, Linklayer: 1, CellLog: 3}},
			Burst: &burst,
		}},
	})
	if err != nil {
		t.Fatalf("add tbf on %s: %v", dev, err)
	}
}

// requireTbf checks that dev still has the hand-made tbf.
func requireTbf(t testing.TB, c *Conn, dev string) {
	t.Helper()
	st, err := c.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	if st.Owner != OwnerForeign || st.Kind != "tbf" || st.Handle != tbfHandle {
		t.Fatalf("%s: root is %v %s %s, want the foreign tbf 1:", dev, st.Owner, st.Kind, formatHandle(st.Handle))
	}
}

// requireForeignErr checks err is a ForeignQdiscError naming the tbf.
func requireForeignErr(t testing.TB, err error, dev string) {
	t.Helper()
	var fe *ForeignQdiscError
	if !errors.Is(err, ErrForeignQdisc) || !errors.As(err, &fe) || fe.Kind != "tbf" || fe.Handle != tbfHandle || fe.Dev != dev {
		t.Fatalf("got %v, want a ForeignQdiscError naming tbf 1: on %s", err, dev)
	}
}

// requireDefault checks dev has the kernel's default root qdisc again.
func requireDefault(t testing.TB, c *Conn, dev string) {
	t.Helper()
	st, err := c.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	if st.Owner != OwnerNone || st.Handle != 0 {
		t.Fatalf("%s: root is %v %s %s, want the kernel's default", dev, st.Owner, st.Kind, formatHandle(st.Handle))
	}
}
