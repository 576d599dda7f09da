package links

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netns is an open network namespace with a netlink socket bound to it.
// Every operation on a namespace goes through that socket, so no goroutine's
// thread ever switches namespace (goroutines started on a switched thread do
// not inherit it). A Netns is safe for concurrent use.
type Netns struct {
	path    string
	fd      netns.NsHandle
	h       *netlink.Handle
	rawSock rawSocket

	// underlays are the node's recent underlays towards remote VTEPs
	// (findUnderlay).
	underlays underlayCache

	// dumpRetries counts the dumps on this namespace retried (retryDump),
	// for the tests that prove the retries happen.
	dumpRetries atomic.Int64
}

// OpenNetns opens the network namespace at path, e.g. a pod sandbox's
// /var/run/netns/cni-... or /proc/<pid>/ns/net, or /proc/self/ns/net for the
// node's own namespace when the daemon runs with hostNetwork.
func OpenNetns(path string) (*Netns, error) {
	fd, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("open netlink socket in netns %s: %w", path, err)
	}
	return &Netns{path: path, fd: fd, h: h}, nil
}

// Path is the path the namespace was opened from.
func (n *Netns) Path() string { return n.path }

// Close releases the netlink socket and the namespace file descriptor. The
// namespace itself lives on while anything else holds it.
func (n *Netns) Close() error {
	n.h.Close()
	if n.rawSock.sock != nil {
		n.rawSock.sock.Close()
	}
	if err := n.fd.Close(); err != nil {
		return fmt.Errorf("close netns %s: %w", n.path, err)
	}
	return nil
}

// same reports whether n and o are the same namespace, even when opened from
// different paths.
func (n *Netns) same(o *Netns) bool { return n.fd.Equal(o.fd) }

// holdsLinkNet reports whether other is the namespace that link (read from n)
// names as its link netns: a veth's peer, a vxlan's UDP socket, a macvlan's
// parent. The kernel reports IFLA_LINK_NETNSID only when that namespace
// differs from the link's own.
func (n *Netns) holdsLinkNet(link netlink.Link, other *Netns) (bool, error) {
	id := link.Attrs().NetNsID
	if id < 0 {
		return n.same(other), nil
	}
	got, err := n.h.GetNetNsIdByFd(int(other.fd))
	if err != nil {
		return false, fmt.Errorf("netns id of %s in %s: %w", other.path, n.path, err)
	}
	return got == id, nil
}

// Retries of a netlink dump that the kernel interrupted (NLM_F_DUMP_INTR:
// the table changed between two of the dump's messages) or answered EBUSY
// or EAGAIN. A dump of a pod whose links are being made by the thousand
// spans many messages, and while a burst of changes lasts every try is
// interrupted: a dump completes only in a lull. Eight tries over 127 ms did
// not outlast such a burst (an ApplyPod of 2,048 VXLAN links failed), so
// the retries are bounded by time. dumpBudget, 2 s, outlasts the bursts
// seen many times over (TestKernelReadAllUnderChurn's last about 300 ms),
// yet stays short beside the deadlines of the calls that read (a peer
// call's 10 s; ReadAll, with three dumps, can take three budgets). The
// waits between tries double from dumpBackoffMin to dumpBackoffMax, so that
// a short burst costs a few milliseconds and a long one is not polled hard.
const (
	dumpBudget     = 2 * time.Second
	dumpBackoffMin = time.Millisecond
	dumpBackoffMax = 50 * time.Millisecond
)

// retryDump runs dump, and runs it again while its error is transient
// (IsTransient) and dumpBudget is not spent. dump must start afresh on each
// call: a failed try may have handed part of a dump to its callback. After
// the budget, the last try's results and its error are returned, the error
// saying how many tries it took. Retries count in n.dumpRetries.
func retryDump[T any](n *Netns, dump func() ([]T, error)) ([]T, error) {
	start, wait := time.Now(), dumpBackoffMin
	for tries := 1; ; tries++ {
		res, err := dump()
		if !IsTransient(err) {
			return res, err
		}
		if time.Since(start)+wait > dumpBudget {
			return res, fmt.Errorf("dump failed %d times in %v: %w", tries, time.Since(start).Round(time.Millisecond), err)
		}
		n.dumpRetries.Add(1)
		time.Sleep(wait)
		wait = min(2*wait, dumpBackoffMax)
	}
}

// IsTransient reports whether err, as returned by this package, says the
// kernel was busy rather than that the request was wrong, so that the same
// call made again later may succeed: a caller maps it to a retryable status
// (gRPC Unavailable), not to Internal. It is true when err wraps
//
//   - netlink.ErrDumpInterrupted: a dump the table kept changing under until
//     dumpBudget was spent;
//   - unix.EBUSY or unix.EAGAIN, from any request.
//
// The errno alone says it: EBUSY from a change that conflicts for good (a
// macvlan whose parent is a bridge port) counts too. A network namespace
// that is gone is not transient: OpenNetns's error then wraps ENOENT
// (errors.Is(err, fs.ErrNotExist)), and no retry brings it back.
func IsTransient(err error) bool {
	return errors.Is(err, netlink.ErrDumpInterrupted) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EAGAIN)
}

// linkRef returns the named link for a change that addresses it by index
// (up, down, an address): from known, a read of ns under the same lock,
// without a request, or else as linkByName does. Only its name and index
// are set when it comes from known.
func (n *Netns) linkRef(known map[string]Interface, name string) (netlink.Link, error) {
	if i, ok := known[name]; ok && i.Index > 0 {
		return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, Index: i.Index}}, nil
	}
	return n.linkByName(name)
}

// linkByName returns the named link, or nil when there is none.
func (n *Netns) linkByName(name string) (netlink.Link, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
			return nil, nil
		}
		return nil, fmt.Errorf("get link %s in netns %s: %w", name, n.path, err)
	}
	return l, nil
}
