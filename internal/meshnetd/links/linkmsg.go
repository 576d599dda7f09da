package links

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// decodeLink reads what a Reading says of an interface out of its
// RTM_NEWLINK message (ifinfomsg and attributes), and nothing else: a
// full decode (netlink.LinkDeserialize) builds every attribute of every
// interface, IPv6 settings and all, which for a pod of 4,096 interfaces
// read by the link watcher and ApplyPod side by side was 180 MB of garbage
// in two seconds, and its collection raised meshnetd's peak resident
// memory by a third. The attributes are read in place (eachAttr).
func decodeLink(m []byte) (name string, index int, r Reading, err error) {
	if len(m) < unix.SizeofIfInfomsg {
		return "", 0, Reading{}, fmt.Errorf("link message of %d bytes", len(m))
	}
	index = int(int32(binary.NativeEndian.Uint32(m[4:8])))
	flags := binary.NativeEndian.Uint32(m[8:12])
	r.AdminUp = flags&unix.IFF_UP != 0
	r.Carrier = flags&unix.IFF_LOWER_UP != 0
	r.Kind = "device" // as netlink.Device.Type(): no IFLA_INFO_KIND
	r.OperState = netlink.LinkOperState(netlink.OperUnknown).String()
	err = eachAttr(m[unix.SizeofIfInfomsg:], func(typ uint16, data []byte) { // ifinfomsg: 16 bytes, aligned
		switch typ {
		case unix.IFLA_IFNAME:
			name = cString(data)
		case unix.IFLA_MTU:
			if len(data) >= 4 {
				r.MTU = int(binary.NativeEndian.Uint32(data))
			}
		case unix.IFLA_MASTER:
			if len(data) >= 4 {
				r.MasterIndex = int(binary.NativeEndian.Uint32(data))
			}
		case unix.IFLA_OPERSTATE:
			if len(data) >= 1 {
				r.OperState = netlink.LinkOperState(data[0]).String()
			}
		case unix.IFLA_LINKINFO:
			_ = eachAttr(data, func(typ uint16, data []byte) {
				if typ == unix.IFLA_INFO_KIND {
					r.Kind = cString(data)
				}
			})
		case unix.IFLA_STATS64:
			changes := r.Counters.CarrierChanges
			r.Counters = counters64(data)
			r.Counters.CarrierChanges = changes
		case unix.IFLA_CARRIER_CHANGES:
			if len(data) >= 4 {
				r.Counters.CarrierChanges = uint64(binary.NativeEndian.Uint32(data))
			}
		}
	})
	if err != nil {
		return "", 0, Reading{}, fmt.Errorf("link message of interface %d: %w", index, err)
	}
	if name == "" {
		return "", 0, Reading{}, errors.New("link message without a name")
	}
	return name, index, r, nil
}

// eachAttr hands f the type and the data of each netlink attribute in b,
// in place: the libraries' attribute decoders copy each attribute's data
// (mdlayher/netlink) or make a slice of them (vishvananda/netlink's
// ParseRouteAttr), which is most of the garbage of a wide pod's reads.
func eachAttr(b []byte, f func(typ uint16, data []byte)) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofRtAttr {
			return fmt.Errorf("attribute of %d bytes", len(b))
		}
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return fmt.Errorf("attribute of length %d in %d bytes", l, len(b))
		}
		f(binary.NativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[unix.SizeofRtAttr:l])
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
	return nil
}

// cString is a NUL-terminated attribute's string.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// counters64 reads the counters of a struct rtnl_link_stats64: its first
// eight fields, in the kernel's order.
func counters64(b []byte) Counters {
	if len(b) < 8*8 {
		return Counters{}
	}
	u := func(i int) uint64 { return binary.NativeEndian.Uint64(b[8*i:]) }
	return Counters{
		RxPackets: u(0), TxPackets: u(1), RxBytes: u(2), TxBytes: u(3),
		RxErrors: u(4), TxErrors: u(5), RxDropped: u(6), TxDropped: u(7),
	}
}

// linkMsg asks the kernel for interface name's link message; nil when ns
// has no such interface.
func (n *Netns) linkMsg(name string) ([]byte, error) {
	req, err := n.request(unix.RTM_GETLINK, unix.NLM_F_ACK)
	if err != nil {
		return nil, err
	}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF)))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if errors.Is(err, unix.ENODEV) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get link %s in netns %s: %w", name, n.path, err)
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("get link %s in netns %s: %d answers", name, n.path, len(msgs))
	}
	return msgs[0], nil
}

// rootQdisc is an interface's root qdisc as its RTM_NEWQDISC message says.
type rootQdisc struct {
	index  int
	kind   string // "noqueue", "netem", ...
	handle uint32
}

// eachRootQdisc dumps the qdiscs of n and hands f the root ones, decoded in
// place (a tcmsg and its TCA_KIND): QdiscList decodes every qdisc's options
// and statistics. A non-zero index asks for that interface's alone, which
// a kernel that checks dump requests strictly (our sockets ask it to) answers
// with them only; an older one answers with all, which f must then filter.
// An interrupted dump is netlink.ErrDumpInterrupted.
func (n *Netns) eachRootQdisc(index int, f func(rootQdisc)) error {
	req, err := n.request(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	if err != nil {
		return err
	}
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(index)})
	var decodeErr error
	err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC, func(m []byte) bool {
		if len(m) < nl.SizeofTcMsg {
			decodeErr = fmt.Errorf("qdisc message of %d bytes", len(m))
			return false
		}
		// struct tcmsg: family, padding (4 bytes), ifindex, handle, parent, info.
		if binary.NativeEndian.Uint32(m[12:16]) != netlink.HANDLE_ROOT {
			return true
		}
		q := rootQdisc{index: int(int32(binary.NativeEndian.Uint32(m[4:8]))), handle: binary.NativeEndian.Uint32(m[8:12])}
		if err := eachAttr(m[nl.SizeofTcMsg:], func(typ uint16, data []byte) {
			if typ == nl.TCA_KIND {
				q.kind = cString(data)
			}
		}); err != nil {
			decodeErr = fmt.Errorf("qdisc of interface %d: %w", q.index, err)
			return false
		}
		f(q)
		return true
	})
	if decodeErr != nil {
		return decodeErr
	}
	return err
}
