package netem

import (
	"encoding/binary"
	"fmt"

	tc "github.com/florianl/go-tc"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tcmsgLen is sizeof(struct tcmsg).
const tcmsgLen = 20

// rawRoot finds the kind and handle of ifindex's root qdisc with a bare
// RTM_GETQDISC dump that decodes nothing else, for when go-tc's decoder
// fails on some qdisc of the namespace.
func rawRoot(ns netns.NsHandle, ifindex uint32) (kind string, handle uint32, found bool, err error) {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: int(ns)})
	if err != nil {
		return "", 0, false, fmt.Errorf("open netlink socket: %w", err)
	}
	defer conn.Close()
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETQDISC, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, tcmsgLen), // AF_UNSPEC, every device
	})
	if err != nil {
		return "", 0, false, fmt.Errorf("dump qdiscs: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWQDISC || len(m.Data) < tcmsgLen {
			continue
		}
		index := binary.NativeEndian.Uint32(m.Data[4:8])
		parent := binary.NativeEndian.Uint32(m.Data[12:16])
		if index != ifindex || parent != tc.HandleRoot {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[tcmsgLen:])
		if err != nil {
			return "", 0, false, fmt.Errorf("decode qdisc: %w", err)
		}
		for ad.Next() {
			if ad.Type() == unix.TCA_KIND {
				kind = ad.String()
			}
		}
		if err := ad.Err(); err != nil {
			return "", 0, false, fmt.Errorf("decode qdisc: %w", err)
		}
		return kind, binary.NativeEndian.Uint32(m.Data[8:12]), true, nil
	}
	return "", 0, false, nil
}
