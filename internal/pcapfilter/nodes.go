package pcapfilter

import (
	"fmt"
	"net"

	"golang.org/x/net/bpf"
)

// node is a boolean expression over tests, libpcap's block graph before
// layout.
type node interface{}

type nAnd struct{ l, r node }
type nOr struct{ l, r node }
type nNot struct{ x node }

// nTrue always holds: a field masked with 0, which libpcap's optimizer
// drops, load and all.
type nTrue struct{}

// nTest runs code, which leaves a value in A (and X when useX), and
// compares it with val (or X) by cond.
type nTest struct {
	code []bpf.Instruction
	cond bpf.JumpTest
	val  uint32
	useX bool
}

// and is a && b; a nil operand is no test.
func and(a, b node) node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return nAnd{a, b}
}
func or(a, b node) node { return nOr{a, b} }
func not(a node) node   { return nNot{a} }

// Offsets in an Ethernet frame: the link-layer payload (the network
// header) starts at 14.
const (
	offLinkPL = 14
	offIP6Tr  = offLinkPL + 40 // IPv6 transport header, fixed as libpcap has it
	etherMTU  = 1500

	ethIP   = 0x0800
	ethARP  = 0x0806
	ethRARP = 0x8035
	ethIP6  = 0x86dd

	protoUndef = -1 // tcp, udp and sctp
)

// cmpMask compares the size-byte field at off, and-ed with mask, with v by
// cond.
func cmpMask(off uint32, size int, cond bpf.JumpTest, v, mask uint32) node {
	if mask == 0 && cond == bpf.JumpEqual && v == 0 {
		return nTrue{}
	}
	code := []bpf.Instruction{bpf.LoadAbsolute{Off: off, Size: size}}
	if mask != 0xffffffff {
		code = append(code, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
	}
	return nTest{code: code, cond: cond, val: v}
}

func cmpEq(off uint32, size int, v uint32) node {
	return cmpMask(off, size, bpf.JumpEqual, v, 0xffffffff)
}

func jset(off uint32, size int, bits uint32) node {
	return cmpMask(off, size, bpf.JumpBitsSet, bits, 0xffffffff)
}

// transportTest compares the 2-byte field at off in the IPv4 transport
// header (past the header's own length, ldxb 4*([14]&0xf)).
func transportTest(off uint32, cond bpf.JumpTest, v uint32) node {
	return nTest{code: []bpf.Instruction{
		bpf.LoadMemShift{Off: offLinkPL},
		bpf.LoadIndirect{Off: offLinkPL + off, Size: 2},
	}, cond: cond, val: v}
}

func lenTest(cond bpf.JumpTest, v uint32) node {
	return nTest{code: []bpf.Instruction{bpf.LoadExtension{Num: bpf.ExtLen}}, cond: cond, val: v}
}

// ipFirstFrag is true for an IPv4 packet that is no fragment other than
// the first: the fragment offset is 0.
func ipFirstFrag() node { return not(jset(offLinkPL+6, 2, 0x1fff)) }

// linktype is libpcap's gen_ether_linktype: the frame carries the
// protocol v, an Ethertype or (up to 1500) an 802.2 LLC SAP.
func linktype(v uint32) (node, error) {
	notType := not(cmpMask(12, 2, bpf.JumpGreaterThan, etherMTU, 0xffffffff))
	switch {
	case v == 0xfe || v == 0x06 || v == 0xf0: // ISO, IP, NetBEUI: DSAP and SSAP
		return and(notType, cmpEq(offLinkPL, 2, v<<8|v)), nil
	case v == 0xe0 || v == 0x809b || v == 0x80f3 || v == 0x8137:
		return nil, fmt.Errorf("IPX and AppleTalk (ether proto %#x) are not supported", v)
	case v <= etherMTU:
		return and(notType, cmpEq(offLinkPL, 1, v)), nil
	case v > 0xffff:
		return nil, fmt.Errorf("%#x is not an Ethertype (at most 0xffff)", v)
	}
	return cmpEq(12, 2, v), nil
}

func mustLinktype(v uint32) node {
	n, err := linktype(v)
	if err != nil {
		panic(err)
	}
	return n
}

// byDir combines the source and destination tests of a direction
// qualifier: src, dst, src and dst, or (the default) src or dst.
func byDir(dir qdir, src, dst func() node) node {
	switch dir {
	case dSrc:
		return src()
	case dDst:
		return dst()
	case dAnd:
		return and(src(), dst())
	}
	return or(src(), dst())
}

// hostop is libpcap's gen_hostop: a frame of the protocol link whose IPv4
// address at srcOff and/or dstOff of the network header, masked, is addr.
// libpcap tests the protocol once per address; testing it once for both
// accepts the same frames with the same loads.
func hostop(addr, mask uint32, dir qdir, link node, srcOff, dstOff uint32) node {
	at := func(off uint32) func() node {
		return func() node { return cmpMask(offLinkPL+off, 4, bpf.JumpEqual, addr, mask) }
	}
	return and(link, byDir(dir, at(srcOff), at(dstOff)))
}

// hostop6 is libpcap's gen_hostop6, the IPv6 address compared word by word
// from the first.
func hostop6(addr, mask [16]byte, dir qdir, srcOff, dstOff uint32) node {
	at := func(off uint32) func() node {
		return func() node {
			var n node
			for w := 3; w >= 0; w-- {
				a := uint32(addr[4*w])<<24 | uint32(addr[4*w+1])<<16 | uint32(addr[4*w+2])<<8 | uint32(addr[4*w+3])
				m := uint32(mask[4*w])<<24 | uint32(mask[4*w+1])<<16 | uint32(mask[4*w+2])<<8 | uint32(mask[4*w+3])
				n = and(cmpMask(offLinkPL+off+uint32(4*w), 4, bpf.JumpEqual, a, m), n)
			}
			return n
		}
	}
	return and(mustLinktype(ethIP6), byDir(dir, at(srcOff), at(dstOff)))
}

// ehostop is libpcap's gen_ehostop: the source (offset 6) and/or
// destination (offset 0) MAC address.
func ehostop(mac net.HardwareAddr, dir qdir) node {
	at := func(off uint32) func() node {
		return func() node {
			w := uint32(mac[2])<<24 | uint32(mac[3])<<16 | uint32(mac[4])<<8 | uint32(mac[5])
			h := uint32(mac[0])<<8 | uint32(mac[1])
			return and(cmpEq(off+2, 4, w), cmpEq(off, 2, h))
		}
	}
	return byDir(dir, at(6), at(0))
}

// ports is "port"/"portrange" for lo..hi over IPv6 or IPv4, over ipProto
// or (protoUndef) TCP, UDP or SCTP. libpcap's gen_port ors a test per
// protocol, each with the fragment and port tests; testing the protocol
// first and the rest once accepts the same frames with the same loads.
// Over IPv4 the ports are in the first fragment, past the header's
// length; over IPv6 at the fixed offset 54 (no extension header is
// skipped).
func ports(lo, hi uint32, ipProto int, dir qdir) node {
	if lo > hi {
		lo, hi = hi, lo
	}
	protoIs := func(off uint32) node {
		if ipProto != protoUndef {
			return cmpEq(off, 1, uint32(ipProto))
		}
		return or(or(cmpEq(off, 1, 6), cmpEq(off, 1, 17)), cmpEq(off, 1, 132))
	}
	atom4 := func(off uint32) func() node {
		return func() node {
			if lo == hi {
				return transportTest(off, bpf.JumpEqual, lo)
			}
			return and(transportTest(off, bpf.JumpGreaterOrEqual, lo), not(transportTest(off, bpf.JumpGreaterThan, hi)))
		}
	}
	atom6 := func(off uint32) func() node {
		return func() node {
			if lo == hi {
				return cmpEq(offIP6Tr+off, 2, lo)
			}
			return and(cmpMask(offIP6Tr+off, 2, bpf.JumpGreaterOrEqual, lo, 0xffffffff),
				not(cmpMask(offIP6Tr+off, 2, bpf.JumpGreaterThan, hi, 0xffffffff)))
		}
	}
	v6 := and(mustLinktype(ethIP6), and(protoIs(offLinkPL+6), byDir(dir, atom6(0), atom6(2))))
	v4 := and(mustLinktype(ethIP), and(protoIs(offLinkPL+9), and(ipFirstFrag(), byDir(dir, atom4(0), atom4(2)))))
	return or(v6, v4)
}
