package links

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Interface is an interface's reading with its index and its root qdisc.
type Interface struct {
	Index int
	Reading
	// RootQdisc is the kind of the root qdisc ("noqueue", "netem", ...);
	// RootHandle is its handle, 0 for the kernel's default one. Package
	// netem reads a netem root in full.
	RootQdisc  string
	RootHandle uint32
}

// ReadAll reads the state of every interface in ns, keyed by name, with
// three netlink dumps (links, addresses, qdiscs) whatever the number of
// interfaces: what a metrics scrape or a listing of many links needs, where
// Read costs three requests per interface.
func ReadAll(ns *Netns) (map[string]Interface, error) {
	var (
		byIndex map[int]string
		out     map[string]Interface
	)
	_, err := retryDump(func() ([]struct{}, error) {
		byIndex, out = map[int]string{}, map[string]Interface{}
		return nil, ns.eachLink(func(l netlink.Link) {
			a := l.Attrs()
			byIndex[a.Index] = a.Name
			out[a.Name] = Interface{Index: a.Index, Reading: readingOf(l)}
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read interfaces: list links in netns %s: %w", ns.path, err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return ns.h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("read interfaces: list addresses in netns %s: %w", ns.path, err)
	}
	qdiscs, err := retryDump(func() ([]netlink.Qdisc, error) { return ns.h.QdiscList(nil) })
	if err != nil {
		return nil, fmt.Errorf("read interfaces: list qdiscs in netns %s: %w", ns.path, err)
	}
	for _, ad := range addrs {
		name, ok := byIndex[ad.LinkIndex]
		if !ok {
			continue
		}
		if p, ok := prefixOf(ad.IPNet); ok {
			i := out[name]
			i.Addrs = append(i.Addrs, p)
			out[name] = i
		}
	}
	for _, q := range qdiscs {
		a := q.Attrs()
		name, ok := byIndex[a.LinkIndex]
		if !ok || a.Parent != netlink.HANDLE_ROOT {
			continue
		}
		i := out[name]
		i.RootQdisc, i.RootHandle = q.Type(), a.Handle
		out[name] = i
	}
	return out, nil
}

// Names lists the interfaces in ns, with one netlink dump and nothing
// decoded beyond their names' links: what a check that a pod's links are
// all there needs.
func Names(ns *Netns) (map[string]bool, error) {
	var names map[string]bool
	_, err := retryDump(func() ([]struct{}, error) {
		names = map[string]bool{}
		return nil, ns.eachLink(func(l netlink.Link) { names[l.Attrs().Name] = true })
	})
	if err != nil {
		return nil, fmt.Errorf("list links in netns %s: %w", ns.path, err)
	}
	return names, nil
}

// eachLink dumps the links of n, handing each to f as its message is
// decoded, so that a read of every interface holds their states, not every
// link decoded and the kernel's messages for them at once: LinkList holds
// both until it returns, about 2.4 KiB a link (24 MiB of the heap of a
// meshnetd reading a 10,000-link pod), and the link watcher and ApplyPod
// read a pod being wired side by side. f must not call back into n: the
// socket is locked until the dump ends. An interrupted dump is
// netlink.ErrDumpInterrupted, after f saw part of it.
func (n *Netns) eachLink(f func(netlink.Link)) error {
	req, err := n.request(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	if err != nil {
		return err
	}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF))) // as LinkList asks
	var decodeErr error
	err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWLINK, func(m []byte) bool {
		l, err := netlink.LinkDeserialize(nil, m)
		if err != nil {
			decodeErr = err
			return false
		}
		f(l)
		return true
	})
	if decodeErr != nil {
		return decodeErr
	}
	return err
}

// Read reads interface name in ns as ReadAll does, with requests for that
// interface only: what one link's read-back after a change needs in a pod
// with many. ok is false when ns has no such interface.
func Read(ns *Netns, name string) (i Interface, ok bool, err error) {
	l, err := ns.linkByName(name)
	if err != nil || l == nil {
		return Interface{}, false, err
	}
	addrs, err := ns.addrsOf(l.Attrs().Index, netlink.FAMILY_ALL)
	if err != nil {
		return Interface{}, false, fmt.Errorf("read interfaces: list addresses of %s in netns %s: %w", name, ns.path, err)
	}
	qdiscs, err := retryDump(func() ([]netlink.Qdisc, error) { return ns.h.QdiscList(l) })
	if err != nil {
		return Interface{}, false, fmt.Errorf("read interfaces: list qdiscs of %s in netns %s: %w", name, ns.path, err)
	}
	i = Interface{Index: l.Attrs().Index, Reading: readingOf(l)}
	for _, ad := range addrs {
		if p, ok := prefixOf(ad.IPNet); ok {
			i.Addrs = append(i.Addrs, p)
		}
	}
	for _, q := range qdiscs {
		if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT {
			i.RootQdisc, i.RootHandle = q.Type(), a.Handle
		}
	}
	return i, true, nil
}

// readingOf is what a link message says of an interface's state; addresses
// come from their own dump.
func readingOf(l netlink.Link) Reading {
	a := l.Attrs()
	s := Reading{
		Kind:      l.Type(),
		AdminUp:   a.Flags&net.FlagUp != 0,
		Carrier:   a.RawFlags&unix.IFF_LOWER_UP != 0,
		OperState: a.OperState.String(),
		MTU:       a.MTU,
	}
	if st := a.Statistics; st != nil {
		s.Counters = Counters{
			RxBytes: st.RxBytes, TxBytes: st.TxBytes,
			RxPackets: st.RxPackets, TxPackets: st.TxPackets,
			RxDropped: st.RxDropped, TxDropped: st.TxDropped,
			RxErrors: st.RxErrors, TxErrors: st.TxErrors,
		}
	}
	return s
}

// SetMTU sets the MTU of interface name in ns; setting the MTU it already
// has changes nothing.
func SetMTU(ns *Netns, name string, mtu int) error {
	l, err := ns.linkByName(name)
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("set mtu: no interface %s in netns %s", name, ns.path)
	}
	if l.Attrs().MTU == mtu {
		return nil
	}
	if err := ns.h.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set mtu %d on %s in netns %s: %w", mtu, name, ns.path, err)
	}
	return nil
}
