package links

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Events is a subscription to the rtnetlink notifications of one network
// namespace: links, addresses, routes and qdiscs. It tells that something
// changed, not what: the subscriber reads the namespace again, which also
// covers notifications the kernel dropped.
type Events struct {
	path string
	s    *nl.NetlinkSocket
}

// Subscribe opens a notification socket in n's namespace. The socket is
// made there once (no thread stays switched) and lives on after n is
// closed; Close it when done.
func (n *Netns) Subscribe() (*Events, error) {
	s, err := nl.SubscribeAt(n.fd, netns.None(), unix.NETLINK_ROUTE,
		unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR,
		unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE, unix.RTNLGRP_TC)
	if err != nil {
		return nil, fmt.Errorf("subscribe to rtnetlink events in netns %s: %w", n.path, err)
	}
	return &Events{path: n.path, s: s}, nil
}

// Wait blocks until the namespace reports a change that a read of it would
// show, or the subscription is closed (then it returns an error). A socket
// that overflowed (ENOBUFS) lost notifications, which is a change too.
//
// What no read shows does not end the wait: after an interface comes up,
// IPv6 tells of its fe80:: address, its kernel routes and its router
// solicitations for a second or two, and a pod of a thousand interfaces
// would be read again for each of them.
func (e *Events) Wait() error {
	for {
		msgs, _, err := e.s.Receive()
		if errors.Is(err, unix.ENOBUFS) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive rtnetlink events in netns %s: %w", e.path, err)
		}
		if slices.ContainsFunc(msgs, shown) {
			return nil
		}
	}
}

// Close ends the subscription; a Wait in progress returns.
func (e *Events) Close() { e.s.Close() }

// shown reports whether a notification may change what ReadAll, Configured
// and StaticRoutes report. What it cannot parse, it counts as shown.
func shown(m syscall.NetlinkMessage) bool {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		// The interface itself; AF_INET6 ones carry IPv6's per-device
		// settings and router solicitation state.
		return len(m.Data) < unix.SizeofIfInfomsg || m.Data[0] == unix.AF_UNSPEC
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		if len(m.Data) < unix.SizeofIfAddrmsg {
			return true
		}
		attrs, err := nl.ParseRouteAttr(m.Data[unix.SizeofIfAddrmsg:])
		if err != nil {
			return true
		}
		found := false
		for _, a := range attrs {
			if a.Attr.Type != unix.IFA_ADDRESS && a.Attr.Type != unix.IFA_LOCAL {
				continue
			}
			ip, ok := netip.AddrFromSlice(a.Value)
			if !ok || Configured(ip.Unmap()) {
				return true
			}
			found = true
		}
		return !found
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		if len(m.Data) < unix.SizeofRtMsg {
			return true
		}
		// rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type.
		return isStatic(m.Data[5], m.Data[7])
	}
	return true
}
