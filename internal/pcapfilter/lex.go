package pcapfilter

import (
	"fmt"
	"net/netip"
	"strings"
)

// tokKind is the kind of a token, as libpcap's scanner (scanner.l) splits
// an expression.
type tokKind int

const (
	tEOF   tokKind = iota
	tNum           // a number: decimal, 0x hex, 0 octal, or a name like tcp-syn
	tID            // a name: a port, protocol or host name (\name escapes a keyword)
	tHID           // a dotted IPv4 address, possibly short: 10.1
	tHID6          // an IPv6 address
	tEID           // an Ethernet (MAC) address
	tKW            // a keyword; token.kw is its canonical spelling
	tAnd           // and, &&
	tOr            // or, ||
	tNot           // not, !
	tPunct         // one of ( ) [ ] : + - * / % & | ^ < > = >= <= != << >>
)

type token struct {
	kind tokKind
	text string // as written (without the backslash of an escaped name)
	kw   string // canonical keyword for tKW; the operator for tPunct
	pos  int    // byte offset in the expression
	num  uint32 // value of a tNum
}

func (t token) String() string {
	if t.kind == tEOF {
		return "end"
	}
	return fmt.Sprintf("%q", t.text)
}

// keywords maps every word libpcap's scanner reserves to a canonical name.
// Words whose canonical name is in unsupported are refused by the parser.
var keywords = map[string]string{
	"and": "and", "or": "or", "not": "not",
	"dst": "dst", "src": "src",
	"link": "ether", "ether": "ether",
	"ppp": "ppp", "slip": "slip", "fddi": "fddi", "tr": "tr", "wlan": "wlan",
	"arp": "arp", "rarp": "rarp", "ip": "ip", "sctp": "sctp", "tcp": "tcp",
	"udp": "udp", "icmp": "icmp", "igmp": "igmp", "igrp": "igrp", "pim": "pim",
	"vrrp": "vrrp", "carp": "carp", "radio": "radio", "ip6": "ip6",
	"icmp6": "icmp6", "ah": "ah", "esp": "esp", "atalk": "atalk", "aarp": "aarp",
	"decnet": "decnet", "lat": "lat", "sca": "sca", "moprc": "moprc",
	"mopdl": "mopdl", "iso": "iso", "esis": "esis", "es-is": "esis",
	"isis": "isis", "is-is": "isis", "l1": "l1", "l2": "l2", "iih": "iih",
	"lsp": "lsp", "snp": "snp", "csnp": "csnp", "psnp": "psnp", "clnp": "clnp",
	"stp": "stp", "ipx": "ipx", "netbeui": "netbeui",
	"host": "host", "net": "net", "mask": "mask", "port": "port",
	"portrange": "portrange", "proto": "proto", "protochain": "protochain",
	"gateway": "gateway", "type": "type", "subtype": "subtype",
	"direction": "dir", "dir": "dir",
	"address1": "addr1", "addr1": "addr1", "address2": "addr2", "addr2": "addr2",
	"address3": "addr3", "addr3": "addr3", "address4": "addr4", "addr4": "addr4",
	"ra": "ra", "ta": "ta",
	"less": "less", "greater": "greater", "byte": "byte",
	"broadcast": "broadcast", "multicast": "multicast",
	"len": "len", "length": "len",
	"inbound": "inbound", "outbound": "outbound", "ifindex": "ifindex",
	"vlan": "vlan", "mpls": "mpls", "pppoed": "pppoed", "pppoes": "pppoes",
	"geneve": "geneve", "lane": "lane", "llc": "llc", "metac": "metac",
	"bcc": "bcc", "oam": "oam", "oamf4": "oamf4", "oamf4ec": "oamf4ec",
	"oamf4sc": "oamf4sc", "sc": "sc", "ilmic": "ilmic", "vpi": "vpi", "vci": "vci",
	"connectmsg": "connectmsg", "metaconnect": "metaconnect",
	"on": "ifname", "ifname": "ifname", "rset": "ruleset", "ruleset": "ruleset",
	"rnr": "rulenum", "rulenum": "rulenum", "srnr": "subrulenum",
	"subrulenum": "subrulenum", "reason": "reason", "action": "action",
	"fisu": "fisu", "lssu": "lssu", "lsu": "lssu", "msu": "msu", "hfisu": "hfisu",
	"hlssu": "hlssu", "hmsu": "hmsu", "sio": "sio", "opc": "opc", "dpc": "dpc",
	"sls": "sls", "hsio": "hsio", "hopc": "hopc", "hdpc": "hdpc", "hsls": "hsls",
}

// numNames are the words libpcap's scanner reads as numbers.
var numNames = map[string]uint32{
	"icmptype": 0, "icmpcode": 1,
	"icmp-echoreply": 0, "icmp-unreach": 3, "icmp-sourcequench": 4,
	"icmp-redirect": 5, "icmp-echo": 8, "icmp-routeradvert": 9,
	"icmp-routersolicit": 10, "icmp-timxceed": 11, "icmp-paramprob": 12,
	"icmp-tstamp": 13, "icmp-tstampreply": 14, "icmp-ireq": 15,
	"icmp-ireqreply": 16, "icmp-maskreq": 17, "icmp-maskreply": 18,
	"icmp6type": 0, "icmp6code": 1,
	"icmp6-destinationunreach": 1, "icmp6-packettoobig": 2,
	"icmp6-timeexceeded": 3, "icmp6-parameterproblem": 4, "icmp6-echo": 128,
	"icmp6-echoreply": 129, "icmp6-multicastlistenerquery": 130,
	"icmp6-multicastlistenerreportv1": 131, "icmp6-multicastlistenerdone": 132,
	"icmp6-routersolicit": 133, "icmp6-routeradvert": 134,
	"icmp6-neighborsolicit": 135, "icmp6-neighboradvert": 136,
	"icmp6-redirect": 137, "icmp6-routerrenum": 138,
	"icmp6-nodeinformationquery": 139, "icmp6-nodeinformationresponse": 140,
	"icmp6-ineighbordiscoverysolicit": 141, "icmp6-ineighbordiscoveryadvert": 142,
	"icmp6-multicastlistenerreportv2": 143, "icmp6-homeagentdiscoveryrequest": 144,
	"icmp6-homeagentdiscoveryreply": 145, "icmp6-mobileprefixsolicit": 146,
	"icmp6-mobileprefixadvert": 147, "icmp6-certpathsolicit": 148,
	"icmp6-certpathadvert": 149, "icmp6-multicastrouteradvert": 151,
	"icmp6-multicastroutersolicit": 152, "icmp6-multicastrouterterm": 153,
	"tcpflags": 13, "tcp-fin": 0x01, "tcp-syn": 0x02, "tcp-rst": 0x04,
	"tcp-push": 0x08, "tcp-ack": 0x10, "tcp-urg": 0x20, "tcp-ece": 0x40,
	"tcp-cwr": 0x80,
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
func isAlnum(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// lex splits expr into tokens the way libpcap's scanner does: the longest
// match wins, and on a tie the earlier rule (keyword, MAC, number, IPv4,
// IPv6, number name, name).
func lex(expr string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			i++
			continue
		case '\\':
			j := i + 1
			for j < len(expr) && !strings.ContainsRune(" !()\n\t", rune(expr[j])) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf(`lone "\" at offset %d`, i)
			}
			toks = append(toks, token{kind: tID, text: expr[i+1 : j], pos: i})
			i = j
			continue
		case '$':
			return nil, fmt.Errorf("%q at offset %d: ARCnet addresses are not supported", expr[i:], i)
		}
		if isAlnum(c) || c == ':' {
			t, n, err := lexWord(expr, i)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				toks = append(toks, t)
				i += n
				continue
			}
		}
		if i+1 < len(expr) {
			switch two := expr[i : i+2]; two {
			case "&&":
				toks = append(toks, token{kind: tAnd, text: two, pos: i})
				i += 2
				continue
			case "||":
				toks = append(toks, token{kind: tOr, text: two, pos: i})
				i += 2
				continue
			case ">=", "<=", "!=", "<<", ">>":
				toks = append(toks, token{kind: tPunct, text: two, kw: two, pos: i})
				i += 2
				continue
			case "==":
				toks = append(toks, token{kind: tPunct, text: two, kw: "=", pos: i})
				i += 2
				continue
			}
		}
		if c == '!' {
			toks = append(toks, token{kind: tNot, text: "!", pos: i})
			i++
			continue
		}
		if strings.IndexByte("+-*/%:[]<>()&|^=", c) >= 0 {
			toks = append(toks, token{kind: tPunct, text: string(c), kw: string(c), pos: i})
			i++
			continue
		}
		return nil, fmt.Errorf("unexpected character %q at offset %d", c, i)
	}
	toks = append(toks, token{kind: tEOF, pos: len(expr)})
	return toks, nil
}

// lexWord reads a keyword, number, address or name at expr[i:]; it returns
// a length of 0 when none starts there (a lone ':').
func lexWord(expr string, i int) (token, int, error) {
	idLen := matchID(expr, i)
	numLen := matchNum(expr, i)
	hidLen := matchHID(expr, i)
	macLen := matchMAC(expr, i)
	v6Len := matchV6(expr, i)
	n := max(idLen, numLen, hidLen, macLen, v6Len)
	if n == 0 {
		return token{}, 0, nil
	}
	text := expr[i : i+n]
	// An address attempt that no rule takes whole: libpcap calls it bogus.
	if run := hexColonRun(expr, i); len(run) > n && strings.Count(run, ":") >= 2 {
		return token{}, 0, fmt.Errorf("%q at offset %d: not an IPv6 or Ethernet address", run, i)
	}
	t := token{text: text, pos: i}
	switch {
	case idLen == n && keywords[text] != "":
		t.kind, t.kw = tKW, keywords[text]
		switch text {
		case "and":
			t.kind = tAnd
		case "or":
			t.kind = tOr
		case "not":
			t.kind = tNot
		}
	case macLen == n:
		t.kind = tEID
	case numLen == n:
		v, err := parseNum(text)
		if err != nil {
			return token{}, 0, fmt.Errorf("%q at offset %d: %v", text, i, err)
		}
		t.kind, t.num = tNum, v
	case hidLen == n:
		t.kind = tHID
	case v6Len == n:
		t.kind = tHID6
	default:
		if v, ok := numNames[text]; ok {
			t.kind, t.num = tNum, v
		} else {
			t.kind = tID
		}
	}
	return t, n, nil
}

// matchID is the length of libpcap's ID at expr[i:]:
// [A-Za-z0-9]([-_.A-Za-z0-9]*[.A-Za-z0-9])?
func matchID(expr string, i int) int {
	if i >= len(expr) || !isAlnum(expr[i]) {
		return 0
	}
	end := i + 1
	for j := i + 1; j < len(expr); j++ {
		c := expr[j]
		if isAlnum(c) || c == '.' {
			end = j + 1
		} else if c != '-' && c != '_' {
			break
		}
	}
	return end - i
}

// matchNum is the length of libpcap's N at expr[i:]: [0-9]+ or 0x[0-9a-f]+.
func matchNum(expr string, i int) int {
	if i >= len(expr) || !isDigit(expr[i]) {
		return 0
	}
	if expr[i] == '0' && i+2 < len(expr) && (expr[i+1] == 'x' || expr[i+1] == 'X') && isHex(expr[i+2]) {
		j := i + 2
		for j < len(expr) && isHex(expr[j]) {
			j++
		}
		return j - i
	}
	j := i
	for j < len(expr) && isDigit(expr[j]) {
		j++
	}
	return j - i
}

// matchHID is the length of N.N, N.N.N or N.N.N.N at expr[i:].
func matchHID(expr string, i int) int {
	n := matchNum(expr, i)
	if n == 0 {
		return 0
	}
	parts := 1
	for parts < 4 && i+n < len(expr) && expr[i+n] == '.' {
		m := matchNum(expr, i+n+1)
		if m == 0 {
			break
		}
		n += 1 + m
		parts++
	}
	if parts < 2 {
		return 0
	}
	return n
}

// matchMAC is the length of an Ethernet address at expr[i:]: six groups of
// one or two hex digits separated by ':', '-' or '.', or xxxx.xxxx.xxxx, or
// twelve hex digits.
func matchMAC(expr string, i int) int {
	best := 0
	for _, sep := range []byte{':', '-', '.'} {
		j := i
		ok := true
		for g := 0; g < 6; g++ {
			if g > 0 {
				if j >= len(expr) || expr[j] != sep {
					ok = false
					break
				}
				j++
			}
			if j >= len(expr) || !isHex(expr[j]) {
				ok = false
				break
			}
			j++
			if j < len(expr) && isHex(expr[j]) {
				j++
			}
		}
		if ok {
			best = max(best, j-i)
		}
	}
	hexAt := func(j, n int) bool {
		if j+n > len(expr) {
			return false
		}
		for k := j; k < j+n; k++ {
			if !isHex(expr[k]) {
				return false
			}
		}
		return true
	}
	if hexAt(i, 4) && i+14 <= len(expr) && expr[i+4] == '.' && hexAt(i+5, 4) && expr[i+9] == '.' && hexAt(i+10, 4) {
		best = max(best, 14)
	}
	if hexAt(i, 12) {
		best = max(best, 12)
	}
	return best
}

// hexColonRun is the longest run of hex digits, ':' and '.' at expr[i:].
func hexColonRun(expr string, i int) string {
	j := i
	for j < len(expr) && (isHex(expr[j]) || expr[j] == ':' || expr[j] == '.') {
		j++
	}
	return expr[i:j]
}

// matchV6 is the length of the longest IPv6 address at expr[i:].
func matchV6(expr string, i int) int {
	run := hexColonRun(expr, i)
	if !strings.Contains(run, ":") {
		return 0
	}
	// The longest IPv6 text (with an embedded IPv4 address) is 45 bytes.
	for n := min(len(run), 64); n > 0; n-- {
		cand := run[:n]
		if !strings.Contains(cand, ":") {
			return 0
		}
		if a, err := netip.ParseAddr(cand); err == nil && a.Is6() && a.Zone() == "" {
			return n
		}
	}
	return 0
}

// parseNum reads a number as libpcap's stou: 0x hex, 0 octal, else decimal,
// at most 32 bits.
func parseNum(s string) (uint32, error) {
	var v uint64
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		for _, c := range []byte(s[2:]) {
			var d byte
			switch {
			case isDigit(c):
				d = c - '0'
			case c >= 'a' && c <= 'f':
				d = c - 'a' + 10
			default:
				d = c - 'A' + 10
			}
			v = v<<4 | uint64(d)
			if v > 0xffffffff {
				return 0, fmt.Errorf("number overflows 32 bits")
			}
		}
	case len(s) > 1 && s[0] == '0':
		for _, c := range []byte(s[1:]) {
			if c > '7' {
				return 0, fmt.Errorf("number contains a non-octal digit")
			}
			v = v<<3 | uint64(c-'0')
			if v > 0xffffffff {
				return 0, fmt.Errorf("number overflows 32 bits")
			}
		}
	default:
		for _, c := range []byte(s) {
			v = v*10 + uint64(c-'0')
			if v > 0xffffffff {
				return 0, fmt.Errorf("number overflows 32 bits")
			}
		}
	}
	return uint32(v), nil
}
