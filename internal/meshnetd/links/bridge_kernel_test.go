//go:build kernel

package links

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelBridgeJoinsASegment wires three "routers" to a hub namespace
// whose ends are ports of one bridge: every router reaches every other
// through it (the bridge learns their MAC addresses), a port
// taken down cuts off its router only, and the ports read back with their
// bridge. The bridge itself has no address, IPv6 link-local included.
func TestKernelBridgeJoinsASegment(t *testing.T) {
	hub := newNS(t)
	var routers []*Netns
	for i := range 3 {
		r := newNS(t)
		routers = append(routers, r)
		v := Veth{
			A: End{NS: r, Name: "eth1", Addrs: []netip.Prefix{pfx(fmt.Sprintf("10.9.0.%d/24", i+1))}},
			B: End{NS: hub, Name: fmt.Sprintf("p%d", i+1), Bridge: "br0", NoIPv6LinkLocal: true},
		}
		res, err := EnsureVeth(v)
		mustResult(t, "ensure "+v.String(), res, err, Created)
		// Again: nothing to do.
		res, err = EnsureVeth(v)
		mustResult(t, "ensure again "+v.String(), res, err, Unchanged)
	}
	all, err := ReadAll(hub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p := fmt.Sprintf("p%d", i+1)
		if got := all[p].Master; got != "br0" {
			t.Errorf("%s: master %q, want br0", p, got)
		}
		if r := mustState(t, hub, p); r.Master != "br0" {
			t.Errorf("Read %s: master %q, want br0", p, r.Master)
		}
	}
	if br := all["br0"]; br.Kind != "bridge" || !br.AdminUp || len(br.Addrs) != 0 {
		t.Errorf("br0: %+v, want an up bridge without addresses", br.Reading)
	}
	mustPing(t, routers[0], "10.9.0.2")
	mustPing(t, routers[0], "10.9.0.3")
	mustPing(t, routers[1], "10.9.0.3")
	// A port down is a cable pull at that port: its router is cut off,
	// the others still reach each other.
	res := SetAdminDown(hub, nil, "p3")
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, routers[2], "eth1", false)
	mustNotPing(t, routers[0], "10.9.0.3")
	mustPing(t, routers[0], "10.9.0.2")

	// An interface that leaves the bridge is put back by its End, and
	// EnsurePorts puts back every one.
	netnstest.IP(t, hub.Path(), "link", "set", "p1", "nomaster")
	netnstest.IP(t, hub.Path(), "link", "set", "p2", "nomaster")
	moved, err := EnsurePorts(hub, "br0", []string{"p1", "p2", "missing"})
	if err != nil || moved != 2 {
		t.Fatalf("EnsurePorts: %d moved, %v; want 2", moved, err)
	}
	mustPing(t, routers[0], "10.9.0.2")

	// A pod's own interface of the bridge's name is never taken over.
	netnstest.IP(t, hub.Path(), "link", "add", "br9", "type", "veth", "peer", "name", "x9")
	if _, err := EnsureBridge(hub, "br9"); err == nil || !strings.Contains(err.Error(), "did not make") {
		t.Fatalf("EnsureBridge over a veth: %v, want refused", err)
	}

	// Without a bridge wanted, meshnet's bridges go, their ports stay.
	n, err := RemoveBridges(hub, "")
	if err != nil || n != 1 {
		t.Fatalf("RemoveBridges: %d, %v; want 1", n, err)
	}
	mustLinks(t, hub, "br9", "p1", "p2", "p3", "x9")
	if r := mustState(t, hub, "p1"); r.Master != "" {
		t.Errorf("p1 after the bridge went: master %q", r.Master)
	}
}
