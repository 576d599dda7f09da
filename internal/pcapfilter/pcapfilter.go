// Package pcapfilter compiles a tcpdump capture filter (pcap-filter(7)
// syntax) into a classic BPF program for an AF_PACKET socket on an
// Ethernet interface, which meshnet's link capture attaches with
// SO_ATTACH_FILTER. Frames are DLT_EN10MB: a 14-byte Ethernet header, and
// no VLAN tag in the data (the kernel strips it).
//
// It exists because libpcap's compiler needs cgo, and the pure-Go one in
// github.com/packetcap/go-pcap compiles wrong programs ("icmp" accepts ARP
// and UDP). Its programs accept the packets libpcap's accept, which a
// differential test against libpcap (dumpcap -d) checks; libpcap's quirks
// are kept: "port ssh" filters TCP only (/etc/services lists ssh for TCP
// only), ports over IPv4 are matched in first fragments only and over IPv6
// only right after the fixed header, "host" with an IPv4 address also
// matches ARP and RARP, and "and" and "or" have equal precedence.
//
// The subset it takes:
//
//   - and (&&), or (||), not (!), parentheses; not binds tightest, and and
//     or are equal and associate left to right; a bare value after and/or
//     takes the qualifiers before it: "host 10.0.0.1 or 10.0.0.2",
//     "tcp port 22 or 80".
//   - protocols: ip, ip6, arp, rarp, tcp, udp, sctp, icmp, icmp6, igmp,
//     igrp, pim, vrrp, carp, ah, esp (tcp, udp, sctp, pim, ah and esp over
//     IPv4 or IPv6, also after an IPv6 fragment header).
//   - [ip|ip6|arp|rarp] [src|dst|src or dst|src and dst] host ADDR, with
//     an IPv4 or IPv6 address (no host names).
//   - [..] net A.B.C.D/LEN, net A.B.C.D mask M.M.M.M, net 10.1 (short
//     forms), net 2001:db8::/32.
//   - [tcp|udp|sctp] [src|dst] port N|NAME, portrange A-B; a small table
//     of service names (ssh, http, https, domain, bgp, ntp, snmp...).
//   - proto N|NAME, ip proto, ip6 proto, ether proto N|\ip|\ip6|\arp|...
//   - ether [src|dst] host MAC, ether src|dst MAC; [ether] broadcast;
//     [ether|ip|ip6] multicast; less N, greater N.
//   - comparisons of arithmetic over proto[offset:size] and len:
//     "tcp[tcpflags] & tcp-syn != 0", "ip[0] & 0xf > 5", "len <= 128".
//
// Everything else (vlan, mpls, pppoe, geneve, gateway, protochain, host
// names, ip broadcast, inbound/outbound, 802.11, unary minus...) is refused
// with an error that names it.
//
// The programs are not optimized as libpcap's are (a typical one is one to
// two and a half times as long); a jump too far for a conditional jump's
// 8-bit offset goes through an unconditional one. The kernel charges a
// filter to the socket's option memory (net.core.optmem_max): at 128 KiB a
// program of about 2,000 instructions still attaches.
package pcapfilter

import (
	"strings"

	"golang.org/x/net/bpf"
)

// defaultSnapLength is what a snapLength of 0 means: libpcap's default.
const defaultSnapLength = 262144

// Compile returns the program for expr that keeps at most snapLength bytes
// of a packet it accepts (0 means 262144, libpcap's default) and drops the
// rest: it returns bpf.RetConstant{Val: snapLength} to accept and
// bpf.RetConstant{Val: 0} to reject. An empty or blank expr returns nil,
// nil: no filter. Errors say what in expr is wrong and where; a program
// past the kernel's 4096 instructions is "filter too long".
func Compile(expr string, snapLength uint32) ([]bpf.Instruction, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	if snapLength == 0 {
		snapLength = defaultSnapLength
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	tree, err := parse(toks)
	if err != nil {
		return nil, err
	}
	n, err := compiler{}.expr(tree)
	if err != nil {
		return nil, err
	}
	return program(n, snapLength)
}
