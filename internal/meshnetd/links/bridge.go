package links

import (
	"cmp"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// BridgeGroup is the interface group of the bridges meshnet makes in pods
// (an L2 segment's), apart from Group: a bridge is not a link's end, and
// RemoveBridges finds meshnet's by it without touching one the pod made.
const BridgeGroup = 0x6d62 // "mb"

// EnsureBridge makes the Linux bridge name in ns, up, without an IPv6
// link-local address (a segment's bridge is not a host on it), and returns
// it. An interface of that name that is not one of meshnet's bridges is an
// error naming it: a pod's own interface is never taken over.
func EnsureBridge(ns *Netns, name string) (netlink.Link, error) {
	l, err := ns.linkByName(name)
	if err != nil {
		return nil, err
	}
	if l == nil {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, Group: BridgeGroup}}
		if err := ns.h.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("add bridge %s in netns %s: %w", name, ns.path, err)
		}
		if l, err = ns.linkByName(name); err != nil || l == nil {
			return nil, fmt.Errorf("bridge %s in netns %s: %w", name, ns.path, cmp.Or(err, error(unix.ENODEV)))
		}
	}
	if l.Type() != "bridge" || l.Attrs().Group != BridgeGroup {
		return nil, fmt.Errorf("bridge %s in netns %s: the pod has an interface of that name (%s, group %#x) that meshnet did not make", name, ns.path, l.Type(), l.Attrs().Group)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := ns.h.LinkSetIP6AddrGenMode(l, nl.IN6_ADDR_GEN_MODE_NONE); err != nil {
			return nil, fmt.Errorf("set addr_gen_mode none on bridge %s in netns %s: %w", name, ns.path, err)
		}
		if err := ns.h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set bridge %s up in netns %s: %w", name, ns.path, err)
		}
	}
	return l, nil
}

// EnsurePorts makes each interface of names a port of bridge (made if
// missing, as EnsureBridge makes it) and reports how many it moved there,
// reading the namespace with one dump whatever the number of ports. An
// interface missing from ns is skipped: its link is not made yet, and the
// end's own Ensure makes it a port when it is.
func EnsurePorts(ns *Netns, bridge string, names []string) (int, error) {
	br, err := EnsureBridge(ns, bridge)
	if err != nil {
		return 0, err
	}
	type port struct{ index, master int }
	var have map[string]port
	_, err = retryDump(ns, func() ([]struct{}, error) {
		have = map[string]port{}
		return nil, ns.eachLink(func(name string, index int, r Reading) {
			have[name] = port{index, r.MasterIndex}
		})
	})
	if err != nil {
		return 0, fmt.Errorf("list links in netns %s: %w", ns.path, err)
	}
	moved := 0
	for _, name := range names {
		p, ok := have[name]
		if !ok || p.master == br.Attrs().Index {
			continue
		}
		l := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, Index: p.index, MasterIndex: p.master}}
		if _, err := ns.setPort(l, br); err != nil {
			return moved, err
		}
		moved++
	}
	return moved, nil
}

// RemoveBridges deletes the bridges meshnet made in ns (BridgeGroup) but
// keep; their ports stay, out of any bridge. It reports how many it deleted.
func RemoveBridges(ns *Netns, keep string) (int, error) {
	all, err := retryDump(ns, ns.h.LinkList)
	if err != nil {
		return 0, fmt.Errorf("list links in netns %s: %w", ns.path, err)
	}
	n := 0
	for _, l := range all {
		if l.Type() != "bridge" || l.Attrs().Group != BridgeGroup || l.Attrs().Name == keep {
			continue
		}
		if err := ns.h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			return n, fmt.Errorf("delete bridge %s in netns %s: %w", l.Attrs().Name, ns.path, err)
		}
		n++
	}
	return n, nil
}

// joinBridge makes l, end e's interface, a port of e.Bridge.
func (e End) joinBridge(l netlink.Link) (bool, error) {
	if e.Bridge == "" {
		return false, nil
	}
	br, err := EnsureBridge(e.NS, e.Bridge)
	if err != nil {
		return false, fmt.Errorf("end %s: %w", e, err)
	}
	return e.NS.setPort(l, br)
}

// setPort makes l a port of bridge br, both in n.
func (n *Netns) setPort(l, br netlink.Link) (bool, error) {
	if l.Attrs().MasterIndex == br.Attrs().Index {
		return false, nil
	}
	if err := n.h.LinkSetMasterByIndex(l, br.Attrs().Index); err != nil {
		return false, fmt.Errorf("make %s a port of bridge %s in netns %s: %w", l.Attrs().Name, br.Attrs().Name, n.path, err)
	}
	return true, nil
}
