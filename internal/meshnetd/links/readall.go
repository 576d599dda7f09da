package links

import (
	"fmt"

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
// Read costs three requests per interface. Its error wraps the kernel's
// answer: IsTransient says whether a later call may succeed.
func ReadAll(ns *Netns) (map[string]Interface, error) {
	var (
		byIndex map[int]string
		out     map[string]Interface
	)
	_, err := retryDump(ns, func() ([]struct{}, error) {
		byIndex, out = map[int]string{}, map[string]Interface{}
		return nil, ns.eachLink(func(name string, index int, r Reading) {
			byIndex[index] = name
			out[name] = Interface{Index: index, Reading: r}
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read interfaces: list links in netns %s: %w", ns.path, err)
	}
	addrs, err := ns.addrsOf(0, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("read interfaces: list addresses in netns %s: %w", ns.path, err)
	}
	var roots []rootQdisc
	_, err = retryDump(ns, func() ([]struct{}, error) {
		roots = roots[:0]
		return nil, ns.eachRootQdisc(0, func(q rootQdisc) { roots = append(roots, q) })
	})
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
	for _, q := range roots {
		name, ok := byIndex[q.index]
		if !ok {
			continue
		}
		i := out[name]
		i.RootQdisc, i.RootHandle = q.kind, q.handle
		out[name] = i
	}
	for name, i := range out {
		if i.MasterIndex != 0 {
			i.Master = byIndex[i.MasterIndex]
			out[name] = i
		}
	}
	return out, nil
}

// Names lists the interfaces in ns, with one netlink dump and nothing
// decoded beyond their names' links: what a check that a pod's links are
// all there needs. Its error wraps the kernel's answer, as ReadAll's does.
func Names(ns *Netns) (map[string]bool, error) {
	var names map[string]bool
	_, err := retryDump(ns, func() ([]struct{}, error) {
		names = map[string]bool{}
		return nil, ns.eachLink(func(name string, _ int, _ Reading) { names[name] = true })
	})
	if err != nil {
		return nil, fmt.Errorf("list links in netns %s: %w", ns.path, err)
	}
	return names, nil
}

// eachLink dumps the links of n, handing each to f as its message is
// decoded (decodeLink), so that a read of every interface holds their
// states, not every link decoded and the kernel's messages for them at
// once: LinkList holds both until it returns, about 2.4 KiB a link (24 MiB
// of the heap of a meshnetd reading a 10,000-link pod), and the link
// watcher and ApplyPod read a pod being wired side by side. f must not call
// back into n: the socket is locked until the dump ends. An interrupted
// dump is netlink.ErrDumpInterrupted, after f saw part of it.
func (n *Netns) eachLink(f func(name string, index int, r Reading)) error {
	req, err := n.request(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	if err != nil {
		return err
	}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF))) // as LinkList asks
	var decodeErr error
	err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWLINK, func(m []byte) bool {
		name, index, r, err := decodeLink(m)
		if err != nil {
			decodeErr = err
			return false
		}
		f(name, index, r)
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
	return read(ns, name, true)
}

// read reads interface name in ns, its root qdisc too with withQdisc.
func read(ns *Netns, name string, withQdisc bool) (i Interface, ok bool, err error) {
	m, err := ns.linkMsg(name)
	if err != nil || m == nil {
		return Interface{}, false, err
	}
	_, index, r, err := decodeLink(m)
	if err != nil {
		return Interface{}, false, fmt.Errorf("read interfaces: %s in netns %s: %w", name, ns.path, err)
	}
	addrs, err := ns.addrsOf(index, netlink.FAMILY_ALL)
	if err != nil {
		return Interface{}, false, fmt.Errorf("read interfaces: list addresses of %s in netns %s: %w", name, ns.path, err)
	}
	i = Interface{Index: index, Reading: r}
	if r.MasterIndex != 0 {
		m, err := ns.h.LinkByIndex(r.MasterIndex)
		if err != nil {
			return Interface{}, false, fmt.Errorf("read interfaces: master %d of %s in netns %s: %w", r.MasterIndex, name, ns.path, err)
		}
		i.Master = m.Attrs().Name
	}
	for _, ad := range addrs {
		if p, ok := prefixOf(ad.IPNet); ok {
			i.Addrs = append(i.Addrs, p)
		}
	}
	if withQdisc {
		_, err = retryDump(ns, func() ([]struct{}, error) {
			return nil, ns.eachRootQdisc(index, func(q rootQdisc) {
				if q.index == index {
					i.RootQdisc, i.RootHandle = q.kind, q.handle
				}
			})
		})
		if err != nil {
			return Interface{}, false, fmt.Errorf("read interfaces: list qdiscs of %s in netns %s: %w", name, ns.path, err)
		}
	}
	return i, true, nil
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
