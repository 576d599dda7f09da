package links

import (
	"errors"
	"fmt"

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

// Wait blocks until the namespace reports a change, or the subscription is
// closed (then it returns an error). A socket that overflowed (ENOBUFS)
// lost notifications, which is a change too.
func (e *Events) Wait() error {
	_, _, err := e.s.Receive()
	if err == nil || errors.Is(err, unix.ENOBUFS) {
		return nil
	}
	return fmt.Errorf("receive rtnetlink events in netns %s: %w", e.path, err)
}

// Close ends the subscription; a Wait in progress returns.
func (e *Events) Close() { e.s.Close() }
