package pcapfilter

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

func TestCompileBlankIsNoFilter(t *testing.T) {
	for _, expr := range []string{"", "   ", "\t\n"} {
		prog, err := Compile(expr, 0)
		if prog != nil || err != nil {
			t.Errorf("Compile(%q) = %v, %v; want nil, nil", expr, prog, err)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"vlan", `"vlan" is not supported by meshnet's capture filter (supported: `},
		{"tcp and vlan 100", `"vlan" is not supported`},
		{"mpls", `"mpls" is not supported`},
		{"pppoes", `"pppoes" is not supported`},
		{"geneve", `"geneve" is not supported`},
		{"gateway router1", `"gateway" is not supported`},
		{"ip protochain 6", `"protochain" is not supported`},
		{"inbound", `"inbound" is not supported`},
		{"ip broadcast", `only "ether broadcast" is supported`},
		{"port 80x", `"port 80x" (offset 5): not a port (a number 0..65535 or a name like ssh)`},
		{"tcp port 99999", "not a port (a number 0..65535"},
		{"tcp and", `unexpected end after "and"`},
		{"tcp or not", `unexpected end after "not"`},
		{"tcp)", `unbalanced ")" at offset 3`},
		{"(tcp", `missing ")" for the "(" at offset 0`},
		{"host (10.0.0.1 or 10.0.0.2", `missing ")" for the "(" at offset 5`},
		{"1.2.3.4", `unexpected "1.2.3.4" at offset 0 (a value needs a qualifier`},
		{"tcp port 22 an udp", `unexpected "an" at offset 12`},
		{"host", `unexpected end after "host"`},
		{"host foo.example", "host names are not supported"},
		{"ether host gw", "Ethernet host names are not supported"},
		{"net office", "network names are not supported"},
		{"udp port ssh", "ssh is a tcp port only"},
		{"tcp port ntp", "ntp is a udp port only"},
		{"ip port 22", `"ip" cannot qualify a port`},
		{"ip6 host 10.0.0.1", `"ip6" cannot qualify an IPv4 address`},
		{"ip host ::1", `"ip" cannot qualify an IPv6 address`},
		{"tcp host 10.0.0.1", `"tcp" cannot qualify a host`},
		{"net 10.0.0.1/8", "bits set outside the mask"},
		{"net 10.0.0.0/33", "prefix length must be at most 32"},
		{"net 2001:db8::1/32", "bits set outside the prefix"},
		{"host 10.0.0.0/8", `a mask or prefix length needs "net"`},
		{"host 2001:db8::/32", `a prefix length needs "net"`},
		{"host 10.0.0.256", "not an IPv4 address"},
		{"host 1::2::3", "not an IPv6 or Ethernet address"},
		{"tcp or 22", `"22" (offset 7): no qualifier to inherit`},
		{"port 22 or 10.0.0.1", "an IPv4 address is not a port"},
		{"ether host 10.0.0.1", "not an Ethernet address"},
		{"host 02:00:00:00:00:01", `an Ethernet address needs "ether host"`},
		{"ether", `"ether" (offset 0) alone is not a filter`},
		{"ether proto 0x809b", "AppleTalk"},
		{"ip proto 300", "not an IP protocol number (0..255)"},
		{`ip proto \nosuch`, "unknown IP protocol"},
		{"arp proto 1", "arp does not carry another protocol"},
		{"less", `"less" needs a number`},
		{"portrange 1-99999", "not a port range"},
		{"port 1-2", "not a port"},
		{"port 099", "non-octal digit"},
		{"port 4294967296", "overflows 32 bits"},
		{"tcp[0:3] = 1", "the size after ':' must be 1, 2 or 4"},
		{"ip[0] / 0 = 1", "division by zero"},
		{"ip[0] >> 32 = 0", "shift by more than 31 bits"},
		{"-ip[0] = 1", "unary minus"},
		{"ah[0] = 1", "cannot be indexed"},
		{"ip[0]", "a comparison (=, !=, <, <=, >, >=) is missing"},
		{"tcp # comment", `unexpected character '#' at offset 4`},
	} {
		prog, err := Compile(tc.expr, 0)
		if err == nil {
			t.Errorf("Compile(%q) = %d instructions, no error; want an error with %q", tc.expr, len(prog), tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) error = %q; want it to contain %q", tc.expr, err, tc.want)
		}
		if strings.HasPrefix(err.Error(), "filter:") {
			t.Errorf("Compile(%q) error %q starts with filter:", tc.expr, err)
		}
	}
}

// TestCorpusIsWhatItSays checks the hand-built frames the tests rely on.
func TestCorpusIsWhatItSays(t *testing.T) {
	byName := map[string][]byte{}
	for _, p := range corpus(t) {
		byName[p.name] = p.data
	}
	if d := byName["tcp4 ihl6 10.0.0.1:1234 > 10.0.0.2:443"]; d[14] != 0x46 {
		t.Errorf("IPv4 with options: version/IHL byte %#x, want 0x46", d[14])
	}
	if d := byName["tcp4 fragment offset 185 10.0.0.1 > 10.0.0.2"]; (uint16(d[20])<<8|uint16(d[21]))&0x1fff != 185 {
		t.Errorf("IPv4 fragment: offset field %#x%02x", d[20], d[21])
	}
	if d := byName["tcp6 fragment header 2001:db8::1:22 > 2001:db8::2:80"]; d[20] != 44 || d[54] != 6 {
		t.Errorf("IPv6 fragment: next header %d, fragment's next header %d", d[20], d[54])
	}
	if d := byName["802.3 llc stp"]; uint16(d[12])<<8|uint16(d[13]) > 1500 || d[14] != 0x42 {
		t.Errorf("802.3 frame: length/type %#x%02x, DSAP %#x", d[12], d[13], d[14])
	}
}

func accepted(t *testing.T, prog []bpf.Instruction) []string {
	t.Helper()
	var names []string
	for _, p := range corpus(t) {
		if run(t, prog, p.data) > 0 {
			names = append(names, p.name)
		}
	}
	sort.Strings(names)
	return names
}

// TestPrograms runs compiled programs on the corpus and checks which
// frames each accepts.
func TestPrograms(t *testing.T) {
	const (
		syn      = "tcp4 10.0.0.1:40000 > 10.0.0.2:22 syn"
		synAck   = "tcp4 10.0.0.2:22 > 10.0.0.1:40000 syn-ack"
		ack80    = "tcp4 10.1.2.3:12345 > 192.168.1.1:80 ack+data"
		rst      = "tcp4 192.168.1.1:80 > 10.1.2.3:12345 rst"
		ihl6     = "tcp4 ihl6 10.0.0.1:1234 > 10.0.0.2:443"
		bgp      = "tcp4 10.0.0.1:50000 > 10.0.0.2:179 bgp"
		first    = "tcp4 first fragment 10.0.0.1:22 > 10.0.0.2:8080"
		frag     = "tcp4 fragment offset 185 10.0.0.1 > 10.0.0.2"
		dns      = "udp4 10.0.0.2:53 > 10.0.0.1:33333 dns"
		mdns     = "udp4 10.0.0.1:5353 > 224.0.0.251:5353 mdns"
		dhcp     = "udp4 0.0.0.0:68 > 255.255.255.255:67 dhcp"
		ntp      = "udp4 10.0.0.1:123 > 10.0.0.2:123 ntp"
		udp22    = "udp4 10.0.0.1:40001 > 10.0.0.2:22"
		big      = "udp4 192.168.1.1:1812 > 10.1.2.3:1645 1200 bytes"
		sctp4    = "sctp4 10.0.0.1:2905 > 10.0.0.2:22"
		echo     = "icmp4 echo 10.0.0.1 > 10.0.0.2"
		reply    = "icmp4 echo-reply 10.0.0.2 > 10.0.0.1"
		igmp     = "igmp4 10.0.0.1 > 224.0.0.22"
		vrrp     = "vrrp4 10.0.0.2 > 224.0.0.18"
		gre      = "gre4 10.1.2.3 > 192.168.1.1"
		whoHas   = "arp who-has 10.0.0.2 tell 10.0.0.1"
		isAt     = "arp reply 10.0.0.2 is-at to 10.0.0.1"
		rarp     = "rarp 10.1.2.3"
		tcp6syn  = "tcp6 2001:db8::1:40000 > 2001:db8::2:22 syn"
		tcp6     = "tcp6 2001:db8::2:443 > 2001:db8:1::5:50000"
		udp6     = "udp6 2001:db8::1:53 > 2001:db8::2:5353"
		sctp6    = "sctp6 2001:db8::1:2905 > 2001:db8::2:22"
		echo6    = "icmp6 echo 2001:db8::1 > 2001:db8::2"
		ns6      = "icmp6 neighbor-solicit fe80::1 > ff02::1:ff00:2"
		frag6    = "tcp6 fragment header 2001:db8::1:22 > 2001:db8::2:80"
		hopByHop = "udp6 hop-by-hop 2001:db8::2:123 > 2001:db8::1:123"
		lldp     = "lldp 0x88cc"
		stp      = "802.3 llc stp"
	)
	for _, tc := range []struct {
		expr string
		want []string
	}{
		// go-pcap's "icmp" accepted ARP and UDP.
		{"icmp", []string{echo, reply}},
		// Ports over IPv4 skip the header's options and later fragments;
		// over IPv6 they are read right after the fixed header only.
		{"tcp port 22", []string{syn, synAck, first, tcp6syn}},
		{"port 22", []string{syn, synAck, first, udp22, sctp4, tcp6syn, sctp6}},
		{"port ssh", []string{syn, synAck, first, tcp6syn}},
		{"tcp dst port 22", []string{syn, tcp6syn}},
		{"port 443", []string{ihl6, tcp6}},
		{"tcp", []string{syn, synAck, ack80, rst, ihl6, bgp, first, frag, tcp6syn, tcp6, frag6}},
		{"udp and ip6", []string{udp6}},
		{"host 10.0.0.1", []string{syn, synAck, ihl6, bgp, first, frag, dns, mdns, ntp, udp22, sctp4, echo, reply, igmp, whoHas, isAt}},
		{"src host 10.0.0.1 and not arp", []string{syn, ihl6, bgp, first, frag, mdns, ntp, udp22, sctp4, echo, igmp}},
		{"host 10.0.0.2 and (icmp or arp)", []string{echo, reply, whoHas, isAt}},
		{"ip6 host 2001:db8::2 and not tcp", []string{udp6, sctp6, echo6, hopByHop}},
		{"net 192.168.0.0/16 or rarp", []string{ack80, rst, big, gre, rarp}},
		{"ip6 net 2001:db8:1::/48", []string{tcp6}},
		{"icmp6 or vrrp or igmp", []string{igmp, vrrp, echo6, ns6}},
		// and and or are equal and associate left to right.
		{"tcp or udp and icmp", nil},
		{"icmp or tcp and port 22", []string{syn, synAck, first, tcp6syn}},
		{"not tcp and port 22", []string{udp22, sctp4, sctp6}},
		// A bare value after and/or takes the last qualifiers.
		{"tcp port 179 or 443", []string{ihl6, bgp, tcp6}},
		{"host 10.0.0.2 and not 10.0.0.1", []string{vrrp}},
		{"tcp[tcpflags] & tcp-syn != 0", []string{syn, synAck}},
		{"tcp[tcpflags] & (tcp-rst|tcp-fin) != 0", []string{rst}},
		{"ip[0] & 0xf > 5", []string{ihl6}},
		{"icmp6[icmp6type] = icmp6-neighborsolicit", []string{ns6}},
		{"ether broadcast", []string{dhcp, whoHas, rarp, stp}},
		{"ether multicast and not broadcast", []string{mdns, igmp, vrrp, ns6, lldp}},
		{"ether src 02:00:00:00:00:02 and ip", []string{synAck, rst, dns, big, reply, vrrp}},
		{"ether proto 0x88cc or ether proto 0x42", []string{lldp, stp}},
		{"greater 1000", []string{big}},
		{"ip proto gre", []string{gre}},
		{"ip6 proto 6", []string{tcp6syn, tcp6, frag6}},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			prog, err := Compile(tc.expr, 0)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if _, err := bpf.Assemble(prog); err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if got := accepted(t, prog); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("accepts\n  %q\nwant\n  %q", got, want)
			}
		})
	}
}

func TestSnapLength(t *testing.T) {
	syn := corpus(t)[0].data
	for _, tc := range []struct {
		snap uint32
		want int
	}{{0, 262144}, {96, 96}, {65535, 65535}} {
		prog, err := Compile("tcp", tc.snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := run(t, prog, syn); got != tc.want {
			t.Errorf("Compile(tcp, %d) keeps %d bytes, want %d", tc.snap, got, tc.want)
		}
		if last := prog[len(prog)-1]; last != (bpf.RetConstant{Val: 0}) {
			t.Errorf("last instruction %v, want ret #0", last)
		}
	}
}

// TestLongJumps checks that a filter whose first test must jump further
// than a conditional jump's 8 bits reaches by an unconditional one.
func TestLongJumps(t *testing.T) {
	var b strings.Builder
	b.WriteString("port 22")
	for p := 1000; p < 1012; p++ {
		fmt.Fprintf(&b, " or port %d", p)
	}
	for _, expr := range []string{b.String(), "not (" + b.String() + ")"} {
		prog, err := Compile(expr, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(prog) < 300 {
			t.Fatalf("%d instructions; the test needs more than 256", len(prog))
		}
		jumps := 0
		for _, ins := range prog {
			if _, ok := ins.(bpf.Jump); ok {
				jumps++
			}
		}
		if jumps == 0 {
			t.Errorf("no ja in a program of %d instructions", len(prog))
		}
		if _, err := bpf.Assemble(prog); err != nil {
			t.Fatalf("Assemble: %v", err)
		}
		// No frame of the corpus uses ports 1000..1011.
		port22, err := Compile("port 22", 0)
		if err != nil {
			t.Fatal(err)
		}
		negated := strings.HasPrefix(expr, "not")
		for _, p := range corpus(t) {
			want := (run(t, port22, p.data) > 0) != negated
			if got := run(t, prog, p.data) > 0; got != want {
				t.Errorf("%.20s... on %s: accept=%v, want %v", expr, p.name, got, want)
			}
		}
	}
}

func TestFilterTooLong(t *testing.T) {
	var b strings.Builder
	b.WriteString("port 1")
	for p := 2; p < 250; p++ {
		fmt.Fprintf(&b, " or port %d", p)
	}
	if _, err := Compile(b.String(), 0); err == nil || err.Error() != "filter too long" {
		t.Errorf("249 ports: error %v, want filter too long", err)
	}
}

func TestLex(t *testing.T) {
	toks, err := lex(`ether src aa:bb:cc:dd:ee:ff and ip6 net 2001:db8::/32 or tcp[tcpflags]&tcp-syn!=0 or portrange 1-1024 or \tcp 0x10 010`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range toks {
		got = append(got, fmt.Sprintf("%d:%s", tk.kind, tk.text))
	}
	want := []string{
		"6:ether", "6:src", "5:aa:bb:cc:dd:ee:ff", "7:and", "6:ip6", "6:net", "4:2001:db8::", "10:/", "1:32", "8:or",
		"6:tcp", "10:[", "1:tcpflags", "10:]", "10:&", "1:tcp-syn", "10:!=", "1:0", "8:or",
		"6:portrange", "2:1-1024", "8:or", "2:tcp", "1:0x10", "1:010", "0:",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tokens\n  %v\nwant\n  %v", got, want)
	}
	if toks[len(toks)-2].num != 8 || toks[len(toks)-3].num != 16 {
		t.Errorf("0x10 = %d, 010 = %d; want 16, 8", toks[len(toks)-3].num, toks[len(toks)-2].num)
	}
}
