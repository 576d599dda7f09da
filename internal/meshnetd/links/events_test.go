package links

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// message builds a notification of type typ: its fixed header, then the
// attributes (type, value), as the kernel lays them out.
func message(typ uint16, header []byte, attrs ...attr) syscall.NetlinkMessage {
	data := append([]byte(nil), header...)
	for _, a := range attrs {
		n := unix.SizeofRtAttr + len(a.value)
		b := make([]byte, (n+3)&^3)
		binary.NativeEndian.PutUint16(b[0:], uint16(n))
		binary.NativeEndian.PutUint16(b[2:], a.typ)
		copy(b[unix.SizeofRtAttr:], a.value)
		data = append(data, b...)
	}
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ}, Data: data}
}

type attr struct {
	typ   uint16
	value []byte
}

func addrMessage(typ uint16, family byte, a string) syscall.NetlinkMessage {
	h := make([]byte, unix.SizeofIfAddrmsg)
	h[0] = family
	ip := netip.MustParseAddr(a)
	return message(typ, h, attr{unix.IFA_ADDRESS, ip.AsSlice()})
}

func routeMessage(typ uint16, protocol, rtType byte) syscall.NetlinkMessage {
	h := make([]byte, unix.SizeofRtMsg)
	h[0], h[4], h[5], h[7] = unix.AF_INET, unix.RT_TABLE_MAIN, protocol, rtType
	return message(typ, h)
}

func linkMessage(typ uint16, family byte) syscall.NetlinkMessage {
	h := make([]byte, unix.SizeofIfInfomsg)
	h[0] = family
	return message(typ, h)
}

// TestShown: what a read of the namespace shows wakes a watcher; IPv6's
// per-device chatter, the kernel's fe80:: addresses and its own routes do
// not; what cannot be parsed does.
func TestShown(t *testing.T) {
	for _, c := range []struct {
		name string
		m    syscall.NetlinkMessage
		want bool
	}{
		{"link change", linkMessage(unix.RTM_NEWLINK, unix.AF_UNSPEC), true},
		{"link removed", linkMessage(unix.RTM_DELLINK, unix.AF_UNSPEC), true},
		{"IPv6 device settings", linkMessage(unix.RTM_NEWLINK, unix.AF_INET6), false},
		{"IPv4 address", addrMessage(unix.RTM_NEWADDR, unix.AF_INET, "10.0.0.1"), true},
		{"IPv6 address removed", addrMessage(unix.RTM_DELADDR, unix.AF_INET6, "2001:db8::1"), true},
		{"fe80:: address", addrMessage(unix.RTM_NEWADDR, unix.AF_INET6, "fe80::1"), false},
		{"fe80:: address removed", addrMessage(unix.RTM_DELADDR, unix.AF_INET6, "fe80::1"), false},
		{"169.254 address", addrMessage(unix.RTM_NEWADDR, unix.AF_INET, "169.254.1.1"), false},
		{"address without attributes", message(unix.RTM_NEWADDR, make([]byte, unix.SizeofIfAddrmsg)), true},
		{"static route", routeMessage(unix.RTM_NEWROUTE, unix.RTPROT_STATIC, unix.RTN_UNICAST), true},
		{"ip route's route removed", routeMessage(unix.RTM_DELROUTE, unix.RTPROT_BOOT, unix.RTN_UNICAST), true},
		{"connected route", routeMessage(unix.RTM_NEWROUTE, unix.RTPROT_KERNEL, unix.RTN_UNICAST), false},
		{"router advertisement's route", routeMessage(unix.RTM_NEWROUTE, unix.RTPROT_RA, unix.RTN_UNICAST), false},
		{"multicast route", routeMessage(unix.RTM_NEWROUTE, unix.RTPROT_BOOT, unix.RTN_MULTICAST), false},
		{"qdisc", message(unix.RTM_NEWQDISC, make([]byte, 20)), true},
		{"truncated link", message(unix.RTM_NEWLINK, []byte{unix.AF_INET6}), true},
		{"truncated address", message(unix.RTM_NEWADDR, []byte{unix.AF_INET6}), true},
		{"truncated route", message(unix.RTM_NEWROUTE, []byte{unix.AF_INET}), true},
	} {
		if got := shown(c.m); got != c.want {
			t.Errorf("%s: shown = %t, want %t", c.name, got, c.want)
		}
	}
}
