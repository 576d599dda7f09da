package links

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Veth is a cable between two pods on the same node.
type Veth struct {
	A, B End
}

func (v Veth) String() string { return fmt.Sprintf("veth %s <-> %s", v.A, v.B) }

// EnsureVeth makes the veth pair v, or brings an existing one to v's
// settings. An interface that holds one of the names but is not this pair
// (the wrong kind, or a veth whose peer is elsewhere, e.g. left by a crash)
// is deleted and the pair made again; it never fails with "file exists".
//
// The pair is made in one netlink request with each end created directly in
// its pod's namespace under its final name (as containernetworking/plugins'
// ip.SetupVeth does), so no half-made or temporarily named interface is ever
// left in the node's namespace.
func EnsureVeth(v Veth) (Result, error) {
	res, err := ensureVeth(v)
	if err != nil {
		return 0, fmt.Errorf("ensure %s: %w", v, err)
	}
	return res, nil
}

func ensureVeth(v Veth) (Result, error) {
	if err := v.A.validate(); err != nil {
		return 0, err
	}
	if err := v.B.validate(); err != nil {
		return 0, err
	}
	if v.A.Name == v.B.Name && v.A.NS.same(v.B.NS) {
		return 0, fmt.Errorf("both ends are %s", v.A)
	}
	a, err := v.A.NS.linkByName(v.A.Name)
	if err != nil {
		return 0, err
	}
	b, err := v.B.NS.linkByName(v.B.Name)
	if err != nil {
		return 0, err
	}
	if a != nil && b != nil {
		ok, err := isPair(v.A, a, v.B, b)
		if err != nil {
			return 0, err
		}
		if ok {
			return configureBoth(v.A, a, v.B, b)
		}
	}
	replaced := a != nil || b != nil
	// Delete by name, not by the index read above: deleting A may already
	// have removed B when B was A's peer.
	if err := Delete(v.A.NS, v.A.Name); err != nil {
		return 0, err
	}
	if err := Delete(v.B.NS, v.B.Name); err != nil {
		return 0, err
	}
	la := netlink.NewLinkAttrs()
	la.Name = v.A.Name
	la.MTU = v.A.MTU
	veth := &netlink.Veth{
		LinkAttrs:     la,
		PeerName:      v.B.Name,
		PeerMTU:       uint32(v.B.MTU),
		PeerNamespace: netlink.NsFd(int(v.B.NS.fd)),
	}
	if err := v.A.NS.h.LinkAdd(veth); err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	if _, err := v.A.finish(replaced); err != nil {
		return 0, err
	}
	res, err := v.B.finish(replaced)
	if err != nil {
		return 0, err
	}
	// A came up before its peer, so it gained carrier only now.
	if err := settle(v.A.NS, v.A.Name); err != nil {
		return 0, err
	}
	return res, nil
}

// isPair reports whether a and b are the two ends of one veth.
func isPair(ea End, a netlink.Link, eb End, b netlink.Link) (bool, error) {
	if a.Type() != "veth" || b.Type() != "veth" {
		return false, nil
	}
	// A veth's parent index is its peer's ifindex, in its link netns.
	if a.Attrs().ParentIndex != b.Attrs().Index || b.Attrs().ParentIndex != a.Attrs().Index {
		return false, nil
	}
	ok, err := ea.NS.holdsLinkNet(a, eb.NS)
	if err != nil || !ok {
		return false, err
	}
	return eb.NS.holdsLinkNet(b, ea.NS)
}

func configureBoth(ea End, a netlink.Link, eb End, b netlink.Link) (Result, error) {
	ca, err := ea.configure(a)
	if err != nil {
		return 0, err
	}
	cb, err := eb.configure(b)
	if err != nil {
		return 0, err
	}
	for _, e := range []End{ea, eb} {
		if err := settle(e.NS, e.Name); err != nil {
			return 0, err
		}
	}
	if ca || cb {
		return Updated, nil
	}
	return Unchanged, nil
}
