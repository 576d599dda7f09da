package pcapfilter

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// compiler turns the syntax tree into tests, applying libpcap's semantic
// rules (gencode.c) to each qualified value.
type compiler struct{}

func (c compiler) expr(e expr) (node, error) {
	switch e := e.(type) {
	case exBin:
		l, err := c.expr(e.l)
		if err != nil {
			return nil, err
		}
		r, err := c.expr(e.r)
		if err != nil {
			return nil, err
		}
		if e.and {
			return nAnd{l, r}, nil
		}
		return nOr{l, r}, nil
	case exNot:
		x, err := c.expr(e.x)
		if err != nil {
			return nil, err
		}
		return not(x), nil
	case exID:
		return c.id(e)
	case exAbbrev:
		return c.abbrev(e)
	case exOther:
		return c.other(e)
	case exRel:
		return c.relation(e)
	}
	panic(fmt.Sprintf("pcapfilter: unknown expression %T", e))
}

// qualText renders the qualifiers for messages: "tcp port", "ip6 host".
func qualText(q qual) string {
	var parts []string
	if q.proto != pDefault && q.proto != pUndef {
		parts = append(parts, q.proto.String())
	}
	switch q.dir {
	case dSrc:
		parts = append(parts, "src")
	case dDst:
		parts = append(parts, "dst")
	case dOr:
		parts = append(parts, "src or dst")
	case dAnd:
		parts = append(parts, "src and dst")
	}
	switch q.addr {
	case aHost:
		parts = append(parts, "host")
	case aNet:
		parts = append(parts, "net")
	case aPort:
		parts = append(parts, "port")
	case aPortrange:
		parts = append(parts, "portrange")
	case aProto:
		parts = append(parts, "proto")
	}
	return strings.Join(parts, " ")
}

func (c compiler) id(e exID) (node, error) {
	q, t := e.q, e.tok
	val := t.text
	if e.masklen != nil {
		val += "/" + e.masklen.text
	} else if e.mask != nil {
		val += " mask " + e.mask.text
	}
	what := val
	if qt := qualText(q); qt != "" {
		what = qt + " " + val
	}
	fail := func(format string, a ...any) (node, error) {
		return nil, fmt.Errorf("%q (offset %d): %s", what, t.pos, fmt.Sprintf(format, a...))
	}
	if q.addr == aUndef {
		return fail(`no qualifier to inherit: the term before "and"/"or" has none (write e.g. "host %s" or "port %s")`, val, val)
	}
	switch t.kind {
	case tNum:
		return c.ncode(fail, "", t.num, q)
	case tID:
		return c.scode(fail, t.text, q)
	case tHID:
		switch q.addr {
		case aPort, aPortrange:
			return fail("an IPv4 address is not a port")
		case aProto:
			return fail("an IPv4 address is not a protocol")
		}
		if e.masklen != nil {
			return c.mcode(fail, t.text, "", e.masklen.num, q)
		}
		if e.mask != nil {
			return c.mcode(fail, t.text, e.mask.text, 0, q)
		}
		return c.ncode(fail, t.text, 0, q)
	case tHID6:
		masklen := uint32(128)
		if e.masklen != nil {
			masklen = e.masklen.num
		}
		return c.mcode6(fail, t.text, masklen, q)
	case tEID:
		if (q.addr == aHost || q.addr == aDefault) && q.proto == pLink {
			mac, err := parseMAC(t.text)
			if err != nil {
				return fail("%v", err)
			}
			return ehostop(mac, q.dir), nil
		}
		return fail(`an Ethernet address needs "ether host", "ether src" or "ether dst"`)
	}
	panic("pcapfilter: unknown value token")
}

type failFunc func(format string, a ...any) (node, error)

// atoin is libpcap's __pcap_atoin: a dotted decimal IPv4 address of one to
// four parts, and its length in bits.
func atoin(s string) (uint32, int, bool) {
	var v uint32
	bits := 0
	for _, part := range strings.Split(s, ".") {
		n, err := strconv.ParseUint(part, 10, 8)
		if err != nil {
			return 0, 0, false
		}
		v = v<<8 | uint32(n)
		bits += 8
	}
	if bits > 32 {
		return 0, 0, false
	}
	return v, bits, true
}

// ncode is gen_ncode: a number (s empty) or a dotted IPv4 address s.
func (c compiler) ncode(fail failFunc, s string, v uint32, q qual) (node, error) {
	vlen := 32
	if s != "" {
		var ok bool
		if v, vlen, ok = atoin(s); !ok {
			return fail("not an IPv4 address")
		}
	}
	switch q.addr {
	case aDefault, aHost, aNet:
		if q.proto == pLink {
			return fail("not an Ethernet address")
		}
		mask := uint32(0xffffffff)
		if s == "" && q.addr == aNet {
			// A short net number: "net 10" is 10.0.0.0/8.
			for v != 0 && v&0xff000000 == 0 {
				v <<= 8
				mask <<= 8
			}
		} else {
			// A short address: "10.1" is 10.1.0.0/16.
			v <<= 32 - vlen
			mask <<= 32 - vlen
		}
		return c.host(fail, v, mask, q)
	case aPort, aPortrange:
		ipProto, err := portProto(q)
		if err != nil {
			return fail("%v", err)
		}
		if v > 65535 {
			return fail("not a port (a number 0..65535 or a name like ssh)")
		}
		return ports(v, v, ipProto, q.dir), nil
	case aProto:
		return c.proto(fail, v, q)
	}
	return fail("syntax error")
}

// portProto is the IP protocol of a port's qualifier: tcp, udp, sctp or
// (none) all three.
func portProto(q qual) (int, error) {
	switch q.proto {
	case pTCP:
		return 6, nil
	case pUDP:
		return 17, nil
	case pSCTP:
		return 132, nil
	case pDefault:
		return protoUndef, nil
	}
	return 0, fmt.Errorf("%q cannot qualify a port (only tcp, udp or sctp can)", q.proto)
}

// host is gen_host: IPv4 address addr/mask.
func (c compiler) host(fail failFunc, addr, mask uint32, q qual) (node, error) {
	kind := "host"
	if q.addr == aNet {
		kind = "net"
	}
	switch q.proto {
	case pDefault:
		// IPv4, ARP or RARP: the last two keep the addresses at the
		// same offsets.
		ip := hostop(addr, mask, q.dir, mustLinktype(ethIP), 12, 16)
		arps := hostop(addr, mask, q.dir, or(mustLinktype(ethARP), mustLinktype(ethRARP)), 14, 24)
		return or(ip, arps), nil
	case pIP:
		return hostop(addr, mask, q.dir, mustLinktype(ethIP), 12, 16), nil
	case pARP:
		return hostop(addr, mask, q.dir, mustLinktype(ethARP), 14, 24), nil
	case pRARP:
		return hostop(addr, mask, q.dir, mustLinktype(ethRARP), 14, 24), nil
	case pIP6:
		return fail(`"ip6" cannot qualify an IPv4 address`)
	case pLink:
		return fail("not an Ethernet address")
	}
	return fail("%q cannot qualify a %s (write e.g. \"%s and %s ...\")", q.proto, kind, q.proto, kind)
}

// mcode is gen_mcode: net A.B.C.D/len or net A.B.C.D mask M.M.M.M.
func (c compiler) mcode(fail failFunc, s1, s2 string, masklen uint32, q qual) (node, error) {
	n, nlen, ok := atoin(s1)
	if !ok {
		return fail("not an IPv4 address")
	}
	n <<= 32 - nlen
	var m uint32
	if s2 != "" {
		mv, mlen, ok := atoin(s2)
		if !ok {
			return fail("%q is not an IPv4 mask", s2)
		}
		m = mv << (32 - mlen)
	} else {
		if masklen > 32 {
			return fail("the prefix length must be at most 32")
		}
		if masklen > 0 {
			m = 0xffffffff << (32 - masklen)
		}
	}
	if n&^m != 0 {
		return fail("the address has bits set outside the mask")
	}
	if q.addr != aNet {
		return fail(`a mask or prefix length needs "net"`)
	}
	return c.host(fail, n, m, q)
}

// mcode6 is gen_mcode6: an IPv6 address, a host or (with a prefix
// length) a net.
func (c compiler) mcode6(fail failFunc, s string, masklen uint32, q qual) (node, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return fail("not an IPv6 address")
	}
	if masklen > 128 {
		return fail("the prefix length must be at most 128")
	}
	addr := a.As16()
	var mask [16]byte
	for i := 0; i < int(masklen); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	for i := range addr {
		if addr[i]&^mask[i] != 0 {
			return fail("the address has bits set outside the prefix")
		}
	}
	switch q.addr {
	case aDefault, aHost:
		if masklen != 128 {
			return fail(`a prefix length needs "net"`)
		}
	case aNet:
	default:
		return fail("an IPv6 address cannot be a %s", qualText(qual{addr: q.addr}))
	}
	switch q.proto {
	case pDefault, pIP6:
		return hostop6(addr, mask, q.dir, 8, 24), nil
	}
	return fail("%q cannot qualify an IPv6 address", q.proto)
}

func parseMAC(s string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	for i := 0; i < len(s); {
		if s[i] == ':' || s[i] == '.' || s[i] == '-' {
			i++
		}
		d, _ := strconv.ParseUint(s[i:i+1], 16, 8)
		i++
		if i < len(s) && isHex(s[i]) {
			d2, _ := strconv.ParseUint(s[i:i+1], 16, 8)
			d = d<<4 | d2
			i++
		}
		mac = append(mac, byte(d))
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("not an Ethernet address")
	}
	return mac, nil
}

// scode is gen_scode: a name.
func (c compiler) scode(fail failFunc, name string, q qual) (node, error) {
	switch q.addr {
	case aNet:
		return fail("network names are not supported: write the network, e.g. 10.0.0.0/8")
	case aDefault, aHost:
		if q.proto == pLink {
			return fail("Ethernet host names are not supported: write the MAC address")
		}
		return fail("host names are not supported: write an IPv4 or IPv6 address")
	case aPort:
		ipProto, err := portProto(q)
		if err != nil {
			return fail("%v", err)
		}
		svc, ok := services[name]
		if !ok {
			return fail("not a port (a number 0..65535 or a name like ssh)")
		}
		if ipProto, err = nameProto(name, svc.protos, ipProto); err != nil {
			return fail("%v", err)
		}
		return ports(uint32(svc.port), uint32(svc.port), ipProto, q.dir), nil
	case aPortrange:
		ipProto, err := portProto(q)
		if err != nil {
			return fail("%v", err)
		}
		lo, hi, rangeProto, ok := parsePortrange(name)
		if !ok {
			return fail("not a port range (A-B with ports 0..65535 or names like ssh)")
		}
		if ipProto, err = nameProto(name, rangeProto, ipProto); err != nil {
			return fail("%v", err)
		}
		return ports(lo, hi, ipProto, q.dir), nil
	case aProto:
		v, err := lookupProto(name, q.proto)
		if err != nil {
			return fail("%v", err)
		}
		return c.proto(fail, v, q)
	}
	return fail("syntax error")
}

// nameProto is the IP protocol a named port filters, as gen_scode works
// it out from the transports the name is known over: "port ssh" is TCP
// only, "udp port ssh" an error.
func nameProto(name string, known portProtos, qualProto int) (int, error) {
	if known == overBoth {
		return qualProto, nil
	}
	want, over := 6, "tcp"
	if known == overUDP {
		want, over = 17, "udp"
	}
	if qualProto != protoUndef && qualProto != want {
		return 0, fmt.Errorf("%s is a %s port only", name, over)
	}
	return want, nil
}

// parsePortrange reads A-B as pcap_nametoportrange: two numbers filter
// TCP, UDP and SCTP; otherwise each side is a name (split at the first
// '-') or a number, which getaddrinfo knows over both TCP and UDP, and
// sides known over different transports filter all of them.
func parsePortrange(s string) (lo, hi uint32, known portProtos, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, 0, false
	}
	side := func(x string) (uint32, portProtos, bool) {
		if n, err := strconv.ParseUint(x, 10, 16); err == nil {
			return uint32(n), overBoth, true
		}
		svc, ok := services[x]
		return uint32(svc.port), svc.protos, ok
	}
	lo, knownA, okA := side(a)
	hi, knownB, okB := side(b)
	if !okA || !okB {
		return 0, 0, 0, false
	}
	known = knownA
	if knownB != known {
		known = overBoth
	}
	return lo, hi, known, true
}

// lookupProto is lookup_proto: a protocol name under proto.
func lookupProto(name string, p qproto) (uint32, error) {
	switch p {
	case pDefault, pIP, pIP6:
		if v, ok := ipProtocols[name]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("unknown IP protocol (a number 0..255 or a name like gre, ospf or \\tcp)")
	case pLink:
		if v, ok := etherProtocols[name]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("unknown Ethernet protocol (a number or a name like \\ip, \\ip6, \\arp)")
	}
	return 0, fmt.Errorf("unknown protocol")
}

// proto is gen_proto: protocol v carried by q.proto.
func (c compiler) proto(fail failFunc, v uint32, q qual) (node, error) {
	switch q.proto {
	case pDefault, pIP, pIP6:
		if v > 255 {
			return fail("not an IP protocol number (0..255)")
		}
		return ipProto(v, q.proto), nil
	case pLink:
		n, err := linktype(v)
		if err != nil {
			return fail("%v", err)
		}
		return n, nil
	case pARP, pRARP:
		return fail("%s does not carry another protocol", q.proto)
	}
	return fail("%q cannot qualify a protocol", q.proto)
}

// ipProto is IP protocol v over IPv4 (pIP), IPv6 (pIP6, also after a
// fragment header) or either (pDefault).
func ipProto(v uint32, p qproto) node {
	switch p {
	case pIP:
		return and(mustLinktype(ethIP), cmpEq(offLinkPL+9, 1, v))
	case pIP6:
		frag := and(cmpEq(offLinkPL+6, 1, 44), cmpEq(offLinkPL+40, 1, v))
		return and(mustLinktype(ethIP6), or(cmpEq(offLinkPL+6, 1, v), frag))
	}
	return or(ipProto(v, pIP), ipProto(v, pIP6))
}

// abbrev is gen_proto_abbrev: a protocol keyword alone.
func (c compiler) abbrev(e exAbbrev) (node, error) {
	switch e.p {
	case pIP:
		return mustLinktype(ethIP), nil
	case pIP6:
		return mustLinktype(ethIP6), nil
	case pARP:
		return mustLinktype(ethARP), nil
	case pRARP:
		return mustLinktype(ethRARP), nil
	case pTCP:
		return ipProto(6, pDefault), nil
	case pUDP:
		return ipProto(17, pDefault), nil
	case pSCTP:
		return ipProto(132, pDefault), nil
	case pICMP:
		return ipProto(1, pIP), nil
	case pICMP6:
		return ipProto(58, pIP6), nil
	case pIGMP:
		return ipProto(2, pIP), nil
	case pIGRP:
		return ipProto(9, pIP), nil
	case pPIM:
		return ipProto(103, pDefault), nil
	case pVRRP, pCARP:
		return ipProto(112, pIP), nil
	case pAH:
		return ipProto(51, pDefault), nil
	case pESP:
		return ipProto(50, pDefault), nil
	}
	return nil, fmt.Errorf(`%q (offset %d) alone is not a filter: write "ether host MAC", "ether proto N", "ether broadcast"...`, e.tok.text, e.tok.pos)
}

// other is broadcast, multicast, less and greater.
func (c compiler) other(e exOther) (node, error) {
	what := e.tok.text
	if e.p != pDefault {
		what = e.ptk.text + " " + what
	}
	switch e.tok.kw {
	case "less":
		return not(lenTest(bpf.JumpGreaterThan, e.num)), nil
	case "greater":
		return lenTest(bpf.JumpGreaterOrEqual, e.num), nil
	case "broadcast":
		switch e.p {
		case pDefault, pLink:
			return ehostop(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, dDst), nil
		case pIP:
			return nil, fmt.Errorf(`%q (offset %d): the link's netmask is not known, so only "ether broadcast" is supported`, what, e.ptk.pos)
		}
	case "multicast":
		switch e.p {
		case pDefault, pLink:
			return jset(0, 1, 1), nil
		case pIP:
			return and(mustLinktype(ethIP), cmpMask(offLinkPL+16, 1, bpf.JumpGreaterOrEqual, 224, 0xffffffff)), nil
		case pIP6:
			return and(mustLinktype(ethIP6), cmpEq(offLinkPL+24, 1, 255)), nil
		}
	}
	return nil, fmt.Errorf("%q (offset %d) is not supported: only ether, ip and ip6 qualify %s", what, e.ptk.pos, e.tok.text)
}
