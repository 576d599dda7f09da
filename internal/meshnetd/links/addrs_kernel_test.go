//go:build kernel

package links

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// ipBatch runs ip -batch in ns with the given commands.
// vethNetns is a namespace of n veth ends (n even), d0 to d<n-1>, d<i>
// with address 10.<i/256>.<i%256>.1/24, closed at the end of t.
func vethNetns(t testing.TB, n int) *Netns {
	t.Helper()
	ns, err := OpenNetns(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	var cmds []string
	for i := 0; i < n; i += 2 {
		cmds = append(cmds, fmt.Sprintf("link add d%d type veth peer name d%d", i, i+1))
	}
	for i := range n {
		cmds = append(cmds, fmt.Sprintf("addr add 10.%d.%d.1/24 dev d%d", i/256, i%256, i))
	}
	ipBatch(t, ns, cmds...)
	return ns
}

func ipBatch(t testing.TB, ns *Netns, cmds ...string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batch")
	if err := os.WriteFile(f, []byte(strings.Join(cmds, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := netnstest.Run(ns.Path(), "ip", "-batch", f); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
}

// addrKey is what a comparison of addresses looks at.
func addrKey(a netlink.Addr) string {
	peer := ""
	if a.Peer != nil {
		peer = a.Peer.String()
	}
	return fmt.Sprintf("%s peer=%s scope=%d index=%d", a.IPNet, peer, a.Scope, a.LinkIndex)
}

// TestKernelAddrsOfOneInterface: the kernel-filtered dump returns what
// vishvananda's AddrList(link) returns, for both families and for a
// point-to-point address, and nothing of another interface.
func TestKernelAddrsOfOneInterface(t *testing.T) {
	ns := newNS(t)
	ipBatch(t, ns,
		"link add d0 type veth peer name d1",
		"addr add 10.0.0.1/24 dev d0", "addr add 2001:db8::1/64 dev d0 nodad",
		"addr add 10.9.0.1 peer 10.9.0.2/32 dev d0",
		"addr add 10.0.1.1/24 dev d1", "addr add 2001:db8:1::1/64 dev d1 nodad",
		"link set d0 up", "link set d1 up")
	for _, name := range []string{"d0", "d1"} {
		l, err := ns.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range []int{netlink.FAMILY_ALL, netlink.FAMILY_V4, netlink.FAMILY_V6} {
			want, err := ns.h.AddrList(l, fam)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ns.addrsOf(l.Attrs().Index, fam)
			if err != nil {
				t.Fatalf("addrsOf %s family %d: %v", name, fam, err)
			}
			var g, w []string
			for _, a := range got {
				g = append(g, addrKey(a))
			}
			for _, a := range want {
				w = append(w, addrKey(a))
			}
			slices.Sort(g)
			slices.Sort(w)
			if !slices.Equal(g, w) || len(g) == 0 {
				t.Errorf("%s family %d:\n got %q\nwant %q", name, fam, g, w)
			}
		}
	}
}

// BenchmarkKernelReadLinkWideNetns reads one interface's state in a
// namespace of n interfaces (veths) with an address each: with a kernel-filtered
// address dump its cost does not grow with n (with AddrList(link) it did,
// which made wiring a pod of N links O(N²)).
func BenchmarkKernelReadLinkWideNetns(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		b.Run(fmt.Sprintf("interfaces=%d", n), func(b *testing.B) {
			ns := vethNetns(b, n)
			name := fmt.Sprintf("d%d", n/2)
			for b.Loop() {
				if _, err := ReadLink(ns, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
