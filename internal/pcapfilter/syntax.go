package pcapfilter

// qproto, qdir and qaddr are the three qualifiers of pcap-filter(7): the
// protocol (ip, tcp, ether...), the direction (src, dst...) and the type
// (host, net, port...). An undefined qualifier (qerr) is what a bare value
// inherits after a term that has none, like "tcp or 22".
type qproto int

const (
	pDefault qproto = iota
	pLink
	pIP
	pIP6
	pARP
	pRARP
	pTCP
	pUDP
	pSCTP
	pICMP
	pICMP6
	pIGMP
	pIGRP
	pPIM
	pVRRP
	pCARP
	pAH
	pESP
	pUndef
)

var protoKeywords = map[string]qproto{
	"ether": pLink, "ip": pIP, "ip6": pIP6, "arp": pARP, "rarp": pRARP,
	"tcp": pTCP, "udp": pUDP, "sctp": pSCTP, "icmp": pICMP, "icmp6": pICMP6,
	"igmp": pIGMP, "igrp": pIGRP, "pim": pPIM, "vrrp": pVRRP, "carp": pCARP,
	"ah": pAH, "esp": pESP,
}

func (p qproto) String() string {
	for k, v := range protoKeywords {
		if v == p {
			return k
		}
	}
	return "?"
}

type qdir int

const (
	dDefault qdir = iota
	dSrc
	dDst
	dOr  // src or dst
	dAnd // src and dst
	dUndef
)

type qaddr int

const (
	aDefault qaddr = iota
	aHost
	aNet
	aPort
	aPortrange
	aProto
	aUndef
)

type qual struct {
	proto qproto
	dir   qdir
	addr  qaddr
}

var qerr = qual{pUndef, dUndef, aUndef}

// The syntax tree. Qualifier inheritance is syntactic (libpcap's grammar
// passes the qualifiers of the term before "and"/"or" to a bare value), so
// the parser settles it; the semantic checks happen when the tree is
// compiled, as each libpcap grammar action would.
type expr interface{}

type exBin struct {
	and  bool
	l, r expr
}

type exNot struct{ x expr }

// exID is a value with its qualifiers: host 10.0.0.1, port ssh, net
// 10.0.0.0/8, ether host MAC, proto 6...
type exID struct {
	q       qual
	tok     token  // tNum, tID, tHID, tHID6 or tEID
	masklen *token // "/N"
	mask    *token // "mask A.B.C.D"
}

// exAbbrev is a protocol alone: tcp, ip6, arp...
type exAbbrev struct {
	tok token
	p   qproto
}

// exOther is [ether|ip|ip6] broadcast|multicast, less N and greater N.
type exOther struct {
	tok token // broadcast, multicast, less or greater
	p   qproto
	ptk token // the protocol qualifier, for messages
	num uint32
}

// exRel is an arithmetic comparison: tcp[13] & 2 != 0, len <= 100.
type exRel struct {
	op     token
	a0, a1 *arth
}

type arthKind int

const (
	arNum arthKind = iota
	arLen
	arLoad
	arBin
)

// arth is an arithmetic expression: a number, len, proto[idx:size] or a
// binary operation.
type arth struct {
	kind arthKind
	tok  token // the number, "len", the protocol or the operator
	num  uint32
	p    qproto // arLoad
	idx  *arth  // arLoad
	size token  // arLoad: the size after ':', or a zero token for 1
	op   string // arBin
	l, r *arth  // arBin
	lit  bool   // a literal number (libpcap refuses "/ 0" only for those)
}
