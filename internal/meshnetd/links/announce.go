package links

import (
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ipv4DevconfARPNotify is IPV4_DEVCONF_ARP_NOTIFY (linux/ip.h), the index of
// net.ipv4.conf.<dev>.arp_notify in IFLA_INET_CONF.
const ipv4DevconfARPNotify = 22

// rawSocket is a netlink socket in n's namespace for requests the
// netlink package has no call for; made once, on first use. Its dumps are
// strictly checked, so the kernel applies the filters they carry (addrsOf).
type rawSocket struct {
	once sync.Once
	sock *nl.SocketHandle
	err  error
}

func (n *Netns) raw() (*nl.SocketHandle, error) {
	n.rawSock.once.Do(func() {
		s, err := nl.GetNetlinkSocketAt(n.fd, netns.None(), unix.NETLINK_ROUTE)
		if err != nil {
			n.rawSock.err = fmt.Errorf("open netlink socket in netns %s: %w", n.path, err)
			return
		}
		// A kernel older than 4.20 has no strict checking and ignores
		// dump filters; the callers filter again, so that is no error.
		_ = unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
		n.rawSock.sock = &nl.SocketHandle{Socket: s}
	})
	return n.rawSock.sock, n.rawSock.err
}

// request is a netlink request of type typ, with flags beside
// NLM_F_REQUEST, sent on n's own socket: no thread enters the namespace.
func (n *Netns) request(typ uint16, flags int) (*nl.NetlinkRequest, error) {
	sock, err := n.raw()
	if err != nil {
		return nil, err
	}
	return &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr), Type: typ, Flags: uint16(unix.NLM_F_REQUEST | flags)},
		Sockets:  map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: sock},
	}, nil
}

// announce sets net.ipv4.conf.<dev>.arp_notify on l, as the CNI plugins do
// for the interfaces they make: the kernel then sends a gratuitous ARP when
// the interface comes up with its address, and a peer that asked for this
// end's address before the end existed learns it at once, not at its next
// ARP retry a second later (the first ping over a new VXLAN link). It is
// set through netlink (IFLA_AF_SPEC), so no thread enters the namespace.
func (n *Netns) announce(l netlink.Link) error {
	req, err := n.request(unix.RTM_SETLINK, unix.NLM_F_ACK)
	if err != nil {
		return err
	}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(l.Attrs().Index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfARPNotify, nl.Uint32Attr(1))
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("set arp_notify on %s in netns %s: %w", l.Attrs().Name, n.path, err)
	}
	return nil
}
