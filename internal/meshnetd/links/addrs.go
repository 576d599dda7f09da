package links

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// addrsOf lists the addresses of the interface with the given index, of one
// family or of both (netlink.FAMILY_ALL). vishvananda's AddrList(link) dumps
// every address of the namespace and filters in user space, so reading each
// of a pod's N interfaces costs O(N²): 4,096 links could not be wired within
// the CNI's timeout. This dump names the interface in a strictly checked
// request (NETLINK_GET_STRICT_CHK), which the kernel answers with that
// interface's addresses alone (Linux 5.0 and later). An older kernel answers
// with all of them; the index check below keeps the result right there.
// Index 0 lists the addresses of every interface, with no more garbage than
// the addresses: the attributes are read in place (eachAttr).
func (n *Netns) addrsOf(index, family int) ([]netlink.Addr, error) {
	return retryDump(n, func() ([]netlink.Addr, error) {
		req, err := n.request(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		if err != nil {
			return nil, err
		}
		msg := nl.NewIfAddrmsg(family)
		msg.Index = uint32(index)
		req.AddData(msg)
		var (
			out      []netlink.Addr
			parseErr error
		)
		err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWADDR, func(m []byte) bool {
			a, ok, err := parseAddr(m, index, family)
			if err != nil {
				parseErr = err
				return false
			}
			if ok {
				out = append(out, a)
			}
			return true
		})
		if parseErr != nil {
			return nil, fmt.Errorf("parse address of interface %d: %w", index, parseErr)
		}
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
		return out, err
	})
}

// parseAddr reads one RTM_NEWADDR message into the fields of netlink.Addr
// that this package uses, as vishvananda's own parser fills them. ok is
// false for an address of another interface (index 0: of any) or family.
func parseAddr(m []byte, index, family int) (a netlink.Addr, ok bool, err error) {
	msg := nl.DeserializeIfAddrmsg(m)
	if (index != 0 && int(msg.Index) != index) || (family != netlink.FAMILY_ALL && int(msg.Family) != family) {
		return a, false, nil
	}
	var local, dst net.IP
	err = eachAttr(m[msg.Len():], func(typ uint16, data []byte) {
		switch typ {
		case unix.IFA_ADDRESS:
			dst = net.IP(data)
		case unix.IFA_LOCAL:
			local = net.IP(data)
		case unix.IFA_FLAGS:
			if len(data) >= 4 {
				a.Flags = int(nl.NativeEndian().Uint32(data))
			}
		}
	})
	if err != nil {
		return a, false, err
	}
	a.LinkIndex, a.Scope = int(msg.Index), int(msg.Scope)
	bits := 8 * len(dst)
	switch {
	case local == nil && dst == nil:
		return a, false, nil
	case local == nil, local.Equal(dst):
		// IPv6 sends only IFA_ADDRESS; IPv4 sends both, equal unless the
		// address has a peer.
		a.IPNet = &net.IPNet{IP: dst, Mask: net.CIDRMask(int(msg.Prefixlen), bits)}
	default:
		// A point-to-point address: the prefix belongs to the peer.
		n := 8 * len(local)
		a.IPNet = &net.IPNet{IP: local, Mask: net.CIDRMask(n, n)}
		if dst != nil {
			a.Peer = &net.IPNet{IP: dst, Mask: net.CIDRMask(int(msg.Prefixlen), bits)}
		}
	}
	return a, true, nil
}
