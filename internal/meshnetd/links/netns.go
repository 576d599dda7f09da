package links

import (
	"errors"
	"fmt"
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

// dumpRetries bounds retries of netlink dumps the kernel interrupted because
// the table changed underneath them. A namespace whose links are being made
// by the thousand changes all the time, and a dump of it takes long: the
// retries back off (1, 2, 4 ... 64 ms) to let a burst pass.
const dumpRetries = 8

func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var (
		res []T
		err error
	)
	for i := range dumpRetries {
		if i > 0 {
			time.Sleep(time.Millisecond << (i - 1))
		}
		res, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return res, err
		}
	}
	return res, err
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
