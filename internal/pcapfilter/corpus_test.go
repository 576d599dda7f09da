package pcapfilter

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
)

// packet is a test frame and what it is, for messages.
type packet struct {
	name string
	data []byte
}

var (
	macA     = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	macB     = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	macBcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	macMc4   = net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}
	macMc6   = net.HardwareAddr{0x33, 0x33, 0xff, 0x00, 0x00, 0x02}
)

func ip4(s string) net.IP { return net.ParseIP(s).To4() }
func ip6(s string) net.IP { return net.ParseIP(s) }

// serialize builds a frame from layers, fixing lengths.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func eth(src, dst net.HardwareAddr, typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: typ}
}

func v4(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: ip4(src), DstIP: ip4(dst)}
}

func v6(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: ip6(src), DstIP: ip6(dst)}
}

func tcp(sport, dport uint16, syn, ack, rst bool) *layers.TCP {
	return &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, SYN: syn, ACK: ack, RST: rst, Window: 1024}
}

func udp(sport, dport uint16) *layers.UDP {
	return &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
}

func sctp(sport, dport uint16) *layers.SCTP {
	return &layers.SCTP{SrcPort: layers.SCTPPort(sport), DstPort: layers.SCTPPort(dport), VerificationTag: 7}
}

func arp(op uint16, srcMAC net.HardwareAddr, srcIP string, dstMAC net.HardwareAddr, dstIP string) *layers.ARP {
	return &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
		SourceHwAddress: srcMAC, SourceProtAddress: ip4(srcIP),
		DstHwAddress: dstMAC, DstProtAddress: ip4(dstIP),
	}
}

// corpus is the set of frames the tests run programs on: every protocol
// the filters name, to and from a few addresses and ports, with the cases
// libpcap's programs treat specially (IPv4 options, IPv4 fragments, an
// IPv6 fragment header).
func corpus(t testing.TB) []packet {
	t.Helper()
	payload := gopacket.Payload([]byte("hello, meshnet"))
	four := v4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	four.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert: IHL 6
	frag := v4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	frag.FragOffset = 185 // not the first fragment; its data starts like ports 22 -> 22
	first := v4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP)
	first.Flags = layers.IPv4MoreFragments
	big := make(gopacket.Payload, 1200)
	llc := eth(macA, macBcast, layers.EthernetTypeLLC)
	llc.Length = 3 + 35
	ps := []packet{
		{"tcp4 10.0.0.1:40000 > 10.0.0.2:22 syn", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP), tcp(40000, 22, true, false, false))},
		{"tcp4 10.0.0.2:22 > 10.0.0.1:40000 syn-ack", serialize(t, eth(macB, macA, layers.EthernetTypeIPv4), v4("10.0.0.2", "10.0.0.1", layers.IPProtocolTCP), tcp(22, 40000, true, true, false))},
		{"tcp4 10.1.2.3:12345 > 192.168.1.1:80 ack+data", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.1.2.3", "192.168.1.1", layers.IPProtocolTCP), tcp(12345, 80, false, true, false), payload)},
		{"tcp4 192.168.1.1:80 > 10.1.2.3:12345 rst", serialize(t, eth(macB, macA, layers.EthernetTypeIPv4), v4("192.168.1.1", "10.1.2.3", layers.IPProtocolTCP), tcp(80, 12345, false, false, true))},
		{"tcp4 ihl6 10.0.0.1:1234 > 10.0.0.2:443", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), four, tcp(1234, 443, false, true, false))},
		{"tcp4 10.0.0.1:50000 > 10.0.0.2:179 bgp", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolTCP), tcp(50000, 179, false, true, false))},
		{"tcp4 first fragment 10.0.0.1:22 > 10.0.0.2:8080", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), first, tcp(22, 8080, false, true, false), payload)},
		{"tcp4 fragment offset 185 10.0.0.1 > 10.0.0.2", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), frag, gopacket.Payload{0, 22, 0, 22, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 4, 0, 0, 0, 0, 0})},
		{"udp4 10.0.0.2:53 > 10.0.0.1:33333 dns", serialize(t, eth(macB, macA, layers.EthernetTypeIPv4), v4("10.0.0.2", "10.0.0.1", layers.IPProtocolUDP), udp(53, 33333), payload)},
		{"udp4 10.0.0.1:5353 > 224.0.0.251:5353 mdns", serialize(t, eth(macA, macMc4, layers.EthernetTypeIPv4), v4("10.0.0.1", "224.0.0.251", layers.IPProtocolUDP), udp(5353, 5353), payload)},
		{"udp4 0.0.0.0:68 > 255.255.255.255:67 dhcp", serialize(t, eth(macA, macBcast, layers.EthernetTypeIPv4), v4("0.0.0.0", "255.255.255.255", layers.IPProtocolUDP), udp(68, 67), payload)},
		{"udp4 10.0.0.1:123 > 10.0.0.2:123 ntp", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolUDP), udp(123, 123), payload)},
		{"udp4 10.0.0.1:40001 > 10.0.0.2:22", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolUDP), udp(40001, 22))},
		{"udp4 192.168.1.1:1812 > 10.1.2.3:1645 1200 bytes", serialize(t, eth(macB, macA, layers.EthernetTypeIPv4), v4("192.168.1.1", "10.1.2.3", layers.IPProtocolUDP), udp(1812, 1645), big)},
		{"sctp4 10.0.0.1:2905 > 10.0.0.2:22", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolSCTP), sctp(2905, 22))},
		{"icmp4 echo 10.0.0.1 > 10.0.0.2", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}, payload)},
		{"icmp4 echo-reply 10.0.0.2 > 10.0.0.1", serialize(t, eth(macB, macA, layers.EthernetTypeIPv4), v4("10.0.0.2", "10.0.0.1", layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(0, 0), Id: 1, Seq: 1}, payload)},
		{"igmp4 10.0.0.1 > 224.0.0.22", serialize(t, eth(macA, macMc4, layers.EthernetTypeIPv4), v4("10.0.0.1", "224.0.0.22", layers.IPProtocolIGMP), gopacket.Payload{0x22, 0, 0xfa, 0x02, 0, 0, 0, 0})},
		{"vrrp4 10.0.0.2 > 224.0.0.18", serialize(t, eth(macB, macMc4, layers.EthernetTypeIPv4), v4("10.0.0.2", "224.0.0.18", layers.IPProtocol(112)), gopacket.Payload{0x21, 1, 100, 1, 0, 1, 0, 0, 10, 0, 0, 254})},
		{"gre4 10.1.2.3 > 192.168.1.1", serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.1.2.3", "192.168.1.1", layers.IPProtocolGRE), gopacket.Payload{0, 0, 0x08, 0x00})},
		{"arp who-has 10.0.0.2 tell 10.0.0.1", serialize(t, eth(macA, macBcast, layers.EthernetTypeARP), arp(1, macA, "10.0.0.1", net.HardwareAddr{0, 0, 0, 0, 0, 0}, "10.0.0.2"))},
		{"arp reply 10.0.0.2 is-at to 10.0.0.1", serialize(t, eth(macB, macA, layers.EthernetTypeARP), arp(2, macB, "10.0.0.2", macA, "10.0.0.1"))},
		{"rarp 10.1.2.3", serialize(t, eth(macA, macBcast, layers.EthernetType(0x8035)), arp(3, macA, "10.1.2.3", macA, "10.1.2.3"))},
		{"tcp6 2001:db8::1:40000 > 2001:db8::2:22 syn", serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolTCP), tcp(40000, 22, true, false, false))},
		{"tcp6 2001:db8::2:443 > 2001:db8:1::5:50000", serialize(t, eth(macB, macA, layers.EthernetTypeIPv6), v6("2001:db8::2", "2001:db8:1::5", layers.IPProtocolTCP), tcp(443, 50000, false, true, false), payload)},
		{"udp6 2001:db8::1:53 > 2001:db8::2:5353", serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolUDP), udp(53, 5353), payload)},
		{"sctp6 2001:db8::1:2905 > 2001:db8::2:22", serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolSCTP), sctp(2905, 22))},
		{"icmp6 echo 2001:db8::1 > 2001:db8::2", serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolICMPv6), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}, &layers.ICMPv6Echo{Identifier: 1, SeqNumber: 1})},
		{"icmp6 neighbor-solicit fe80::1 > ff02::1:ff00:2", serialize(t, eth(macA, macMc6, layers.EthernetTypeIPv6), v6("fe80::1", "ff02::1:ff00:2", layers.IPProtocolICMPv6), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}, &layers.ICMPv6NeighborSolicitation{TargetAddress: ip6("fe80::2")})},
		{"tcp6 fragment header 2001:db8::1:22 > 2001:db8::2:80", serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolIPv6Fragment), &layers.IPv6Fragment{NextHeader: layers.IPProtocolTCP, MoreFragments: true, Identification: 9}, tcp(22, 80, false, true, false))},
		{"udp6 hop-by-hop 2001:db8::2:123 > 2001:db8::1:123", serialize(t, eth(macB, macA, layers.EthernetTypeIPv6), v6("2001:db8::2", "2001:db8::1", layers.IPProtocolIPv6HopByHop), gopacket.Payload{17, 0, 1, 4, 0, 0, 0, 0}, udp(123, 123))},
		{"lldp 0x88cc", serialize(t, eth(macA, net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x0e}, layers.EthernetType(0x88cc)), gopacket.Payload{2, 7, 4, 2, 0, 0, 0, 0, 1})},
		{"802.3 llc stp", serialize(t, llc, &layers.LLC{DSAP: 0x42, SSAP: 0x42, Control: 3}, make(gopacket.Payload, 35))},
	}
	return ps
}

// truncated are frames cut short, on which a program that loads past the
// end rejects.
func truncated(t testing.TB) []packet {
	frame := map[string][]byte{}
	for _, p := range corpus(t) {
		frame[p.name] = p.data
	}
	syn := frame["tcp4 10.0.0.1:40000 > 10.0.0.2:22 syn"]
	syn6 := frame["tcp6 2001:db8::1:40000 > 2001:db8::2:22 syn"]
	whoHas := frame["arp who-has 10.0.0.2 tell 10.0.0.1"]
	return []packet{
		{"runt of 13 bytes", syn[:13]},
		{"tcp4 cut in the IPv4 header", syn[:20]},
		{"tcp4 cut in the TCP ports", syn[:36]},
		{"tcp4 cut after the TCP ports", syn[:38]},
		{"tcp6 cut after the TCP ports", syn6[:58]},
		{"arp cut in the target address", whoHas[:40]},
	}
}

// run is the verdict of prog on data: the bytes it keeps, 0 to drop.
func run(t testing.TB, prog []bpf.Instruction, data []byte) int {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	n, err := vm.Run(data)
	if err != nil {
		t.Fatalf("bpf VM: %v", err)
	}
	return n
}
