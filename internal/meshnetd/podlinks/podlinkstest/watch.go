package podlinkstest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// Watcher records the link, address, route and qdisc change notifications
// the kernel sends for one netns: a call that changes nothing must cause
// none (no link flap, no qdisc re-created).
type Watcher struct {
	conn *netlink.Conn
	done chan struct{}
	mu   sync.Mutex
	seen []string
}

// Watch starts recording changes in n until Stop.
func Watch(t testing.TB, n *links.Netns) *Watcher {
	t.Helper()
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	groups := uint32(unix.RTMGRP_LINK | unix.RTMGRP_TC | unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_ROUTE)
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: int(h), Groups: groups})
	if err != nil {
		t.Fatalf("watch %s: %v", n.Path(), err)
	}
	w := &Watcher{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			msgs, err := conn.Receive()
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					w.add(fmt.Sprintf("receive: %v", err))
				}
				return
			}
			for _, m := range msgs {
				if kernelRoute(m) {
					continue
				}
				w.add(msgType(m.Header.Type))
			}
		}
	}()
	t.Cleanup(func() { w.Stop() })
	return w
}

func (w *Watcher) add(s string) {
	w.mu.Lock()
	w.seen = append(w.seen, s)
	w.mu.Unlock()
}

// Stop waits a little for late notifications, stops recording and
// returns what the kernel announced.
func (w *Watcher) Stop() []string {
	time.Sleep(200 * time.Millisecond)
	w.conn.SetReadDeadline(time.Now())
	<-w.done
	w.conn.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// kernelRoute reports a route the kernel adds or removes by itself (proto
// kernel), such as IPv6's link-local and multicast routes, which appear
// whenever IPv6 address configuration on a fresh interface completes.
func kernelRoute(m netlink.Message) bool {
	t := m.Header.Type
	// rtmsg: family, dst_len, src_len, tos, table, protocol, ...
	return (t == unix.RTM_NEWROUTE || t == unix.RTM_DELROUTE) && len(m.Data) > 5 && m.Data[5] == unix.RTPROT_KERNEL
}

func msgType(t netlink.HeaderType) string {
	switch t {
	case unix.RTM_NEWLINK:
		return "RTM_NEWLINK"
	case unix.RTM_DELLINK:
		return "RTM_DELLINK"
	case unix.RTM_NEWQDISC:
		return "RTM_NEWQDISC"
	case unix.RTM_DELQDISC:
		return "RTM_DELQDISC"
	case unix.RTM_NEWROUTE:
		return "RTM_NEWROUTE"
	case unix.RTM_DELROUTE:
		return "RTM_DELROUTE"
	case unix.RTM_NEWADDR:
		return "RTM_NEWADDR"
	case unix.RTM_DELADDR:
		return "RTM_DELADDR"
	}
	return fmt.Sprintf("type %d", t)
}
