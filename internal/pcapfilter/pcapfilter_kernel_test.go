//go:build kernel

package pcapfilter

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The tests in this file compare Compile with libpcap: dumpcap -d prints
// the program libpcap compiles for a filter on an Ethernet interface (lo
// is DLT_EN10MB on Linux), and both programs run in x/net/bpf's VM over
// the corpus. Debian's dumpcap (package wireshark-common / tshark) must be
// on PATH, run as root.

func needDumpcap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dumpcap"); err != nil {
		t.Fatalf("dumpcap is not on PATH (install Debian's tshark or wireshark-common): the differential test against libpcap needs it: %v", err)
	}
}

// errLibpcapRejects is libpcap refusing a filter.
var errLibpcapRejects = errors.New("libpcap rejects the filter")

// libpcap is libpcap's program for expr and its listing, or
// errLibpcapRejects with dumpcap's message.
func libpcap(t *testing.T, expr string) ([]bpf.Instruction, string, error) {
	t.Helper()
	cmd := exec.Command("dumpcap", "-d", "-f", expr, "-i", "lo")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// dumpcap's exit status does not always say that it refused the
	// filter; its message does.
	if strings.Contains(stderr.String(), "isn't a valid capture filter") {
		return nil, stderr.String(), fmt.Errorf("%w: %s", errLibpcapRejects, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		t.Fatalf("dumpcap -d -f %q -i lo: %v\n%s", expr, err, stderr.String())
	}
	prog, err := parseListing(stdout.String())
	if err != nil {
		t.Fatalf("dumpcap -d -f %q: %v\n%s", expr, err, stdout.String())
	}
	return prog, stdout.String(), nil
}

var listingLine = regexp.MustCompile(`^\((\d+)\)\s+(\S+)\s*(.*?)(?:\s+jt\s+(\d+)\s+jf\s+(\d+))?\s*$`)

// parseListing reads a program printed by libpcap's bpf_image: lines like
// "(003) jeq      #0x1             jt 4	jf 5".
func parseListing(s string) ([]bpf.Instruction, error) {
	var prog []bpf.Instruction
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "(") {
			continue
		}
		m := listingLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("unreadable line %q", line)
		}
		n, _ := strconv.Atoi(m[1])
		if n != len(prog) {
			return nil, fmt.Errorf("line %q out of order", line)
		}
		ins, err := parseInstruction(n, m[2], m[3], m[4], m[5])
		if err != nil {
			return nil, fmt.Errorf("%q: %v", line, err)
		}
		prog = append(prog, ins)
	}
	if len(prog) == 0 {
		return nil, errors.New("no program")
	}
	return prog, nil
}

func parseK(s string) (uint32, error) {
	s = strings.TrimPrefix(s, "#")
	if v, err := strconv.ParseInt(s, 0, 64); err == nil {
		return uint32(v), nil
	}
	v, err := strconv.ParseUint(s, 0, 32)
	return uint32(v), err
}

var (
	absOperand = regexp.MustCompile(`^\[(\d+)\]$`)
	indOperand = regexp.MustCompile(`^\[x \+ (\d+)\]$`)
	memOperand = regexp.MustCompile(`^M\[(\d+)\]$`)
	mshOperand = regexp.MustCompile(`^4\*\(\[(\d+)\]&0xf\)$`)
	loadSizes  = map[string]int{"ld": 4, "ldh": 2, "ldb": 1}
	jumpConds  = map[string]bpf.JumpTest{"jeq": bpf.JumpEqual, "jgt": bpf.JumpGreaterThan, "jge": bpf.JumpGreaterOrEqual, "jset": bpf.JumpBitsSet}
	aluNames   = map[string]bpf.ALUOp{
		"add": bpf.ALUOpAdd, "sub": bpf.ALUOpSub, "mul": bpf.ALUOpMul, "div": bpf.ALUOpDiv, "mod": bpf.ALUOpMod,
		"and": bpf.ALUOpAnd, "or": bpf.ALUOpOr, "xor": bpf.ALUOpXor, "lsh": bpf.ALUOpShiftLeft, "rsh": bpf.ALUOpShiftRight,
	}
)

func parseInstruction(n int, op, operand, jt, jf string) (bpf.Instruction, error) {
	num := func(re *regexp.Regexp) (uint32, bool) {
		m := re.FindStringSubmatch(operand)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		return uint32(v), err == nil
	}
	if size, ok := loadSizes[op]; ok {
		if k, ok := num(absOperand); ok {
			return bpf.LoadAbsolute{Off: k, Size: size}, nil
		}
		if k, ok := num(indOperand); ok {
			return bpf.LoadIndirect{Off: k, Size: size}, nil
		}
		if op == "ld" {
			if k, ok := num(memOperand); ok {
				return bpf.LoadScratch{Dst: bpf.RegA, N: int(k)}, nil
			}
			if operand == "#pktlen" {
				return bpf.LoadExtension{Num: bpf.ExtLen}, nil
			}
			if strings.HasPrefix(operand, "#") {
				k, err := parseK(operand)
				return bpf.LoadConstant{Dst: bpf.RegA, Val: k}, err
			}
		}
		return nil, fmt.Errorf("unknown operand %q", operand)
	}
	if cond, ok := jumpConds[op]; ok {
		t, errT := strconv.Atoi(jt)
		f, errF := strconv.Atoi(jf)
		if errT != nil || errF != nil || t <= n || f <= n || t-n-1 > 255 || f-n-1 > 255 {
			return nil, fmt.Errorf("bad targets jt %q jf %q", jt, jf)
		}
		if operand == "x" {
			return bpf.JumpIfX{Cond: cond, SkipTrue: uint8(t - n - 1), SkipFalse: uint8(f - n - 1)}, nil
		}
		k, err := parseK(operand)
		return bpf.JumpIf{Cond: cond, Val: k, SkipTrue: uint8(t - n - 1), SkipFalse: uint8(f - n - 1)}, err
	}
	if alu, ok := aluNames[op]; ok {
		if operand == "x" {
			return bpf.ALUOpX{Op: alu}, nil
		}
		k, err := parseK(operand)
		return bpf.ALUOpConstant{Op: alu, Val: k}, err
	}
	switch op {
	case "ldx":
		if k, ok := num(memOperand); ok {
			return bpf.LoadScratch{Dst: bpf.RegX, N: int(k)}, nil
		}
		k, err := parseK(operand)
		return bpf.LoadConstant{Dst: bpf.RegX, Val: k}, err
	case "ldxb":
		if k, ok := num(mshOperand); ok {
			return bpf.LoadMemShift{Off: k}, nil
		}
	case "st", "stx":
		if k, ok := num(memOperand); ok {
			src := bpf.RegA
			if op == "stx" {
				src = bpf.RegX
			}
			return bpf.StoreScratch{Src: src, N: int(k)}, nil
		}
	case "ja":
		target, err := strconv.Atoi(operand)
		if err != nil || target <= n {
			return nil, fmt.Errorf("bad target %q", operand)
		}
		return bpf.Jump{Skip: uint32(target - n - 1)}, nil
	case "ret":
		if operand == "" {
			return bpf.RetA{}, nil
		}
		k, err := parseK(operand)
		return bpf.RetConstant{Val: k}, err
	case "tax":
		return bpf.TAX{}, nil
	case "txa":
		return bpf.TXA{}, nil
	}
	return nil, fmt.Errorf("unknown instruction %q %q", op, operand)
}

func listing(prog []bpf.Instruction) string {
	var b strings.Builder
	for i, ins := range prog {
		fmt.Fprintf(&b, "(%03d) %v\n", i, ins)
	}
	return b.String()
}

// differ runs libpcap's program and Compile's for expr over packets and
// reports every packet on which they disagree.
func differ(t *testing.T, expr string, packets []packet) {
	t.Helper()
	lib, libText, err := libpcap(t, expr)
	if err != nil {
		t.Errorf("%q: %v", expr, err)
		return
	}
	ours, err := Compile(expr, 0)
	if err != nil {
		t.Errorf("Compile(%q): %v (libpcap compiles it)", expr, err)
		return
	}
	if _, err := bpf.Assemble(ours); err != nil {
		t.Errorf("Compile(%q): Assemble: %v", expr, err)
	}
	bad := 0
	for _, p := range packets {
		want, got := run(t, lib, p.data), run(t, ours, p.data)
		if want != got {
			bad++
			t.Errorf("%q on %s: libpcap keeps %d bytes, Compile's program %d", expr, p.name, want, got)
		}
	}
	if bad > 0 {
		t.Logf("%q: libpcap's program:\n%s\nCompile's program:\n%s", expr, libText, listing(ours))
	}
}

// differentialFilters cover the subset Compile takes: each is compiled by
// libpcap and by Compile, and the two programs must agree on every frame
// of the corpus.
var differentialFilters = []string{
	// protocols
	"ip", "ip6", "arp", "rarp", "tcp", "udp", "sctp", "icmp", "icmp6", "igmp", "igrp",
	"pim", "vrrp", "carp", "ah", "esp",
	// hosts
	"host 10.0.0.1", "src host 10.0.0.1", "dst host 10.0.0.2", "ip host 10.0.0.1",
	"arp host 10.0.0.2", "rarp host 10.1.2.3", "ip src 10.0.0.1", "dst 10.1.2.3",
	"src or dst host 10.0.0.2", "src and dst host 10.0.0.1", "host 10.1",
	"host 2001:db8::2", "ip6 src host 2001:db8::1", "dst host ff02::1:ff00:2",
	"ip6 dst 2001:db8:1::5", "host ::ffff:10.0.0.1", "host ! 10.0.0.1",
	// nets
	"net 10.0.0.0/8", "net 10.0.0.0/30", "dst net 192.168.0.0/16", "net 10.1", "net 10",
	"net 192.168.1.0 mask 255.255.255.0", "src net 10.0.0.0 mask 255.0.0.0",
	"net 2001:db8::/32", "src net 2001:db8:1::/48", "net 0.0.0.0/0", "ip6 net ::/0",
	"arp net 10.0.0.0/24", "net fe80::/10",
	// ports
	"port 22", "tcp port 22", "udp port 53", "sctp port 22", "src port 22", "dst port 22",
	"tcp dst port 443", "port ssh", "port domain", "udp port ntp", "port bgp",
	"portrange 20-25", "tcp portrange 1-1024", "udp src portrange 1000-2000",
	"portrange 5353", "portrange 5354-5350", "src or dst port 123", "src and dst port 123",
	"port http or https", "tcp port 0x16", "port 022", "portrange ssh-telnet", "portrange ssh-domain", "udp portrange ssh-domain",
	// protocols by number and name
	"ip proto 6", `ip proto \tcp`, "ip6 proto 58", "proto 17", `proto \udp`, "ip proto gre",
	`ip6 proto \tcp`, "ip6 proto 44", "proto 112", "ether proto 0x86dd", `ether proto \arp`,
	`ether proto \ip6`, "ether proto 0x42", `ether proto \stp`, "ether proto 0x88cc",
	`ether proto \rarp`, `ether proto \iso`,
	// Ethernet
	"ether host 02:00:00:00:00:01", "ether src 02:00:00:00:00:02",
	"ether dst ff:ff:ff:ff:ff:ff", "ether src host 02-00-00-00-00-01",
	"ether host 0200.0000.0001", "ether dst 1:80:c2:0:0:e", "ether src and dst 02:00:00:00:00:01",
	"ether broadcast", "broadcast", "ether multicast", "multicast", "ip multicast", "ip6 multicast",
	// lengths
	"less 60", "greater 100", "len >= 1000", "len <= 64", "len = 42", "len - 14 > 100",
	// precedence: not tightest, and/or equal and left-associative
	"not tcp and port 22", "tcp and port 22 or icmp", "icmp or tcp and port 22",
	"udp or tcp and port 22", "not (tcp or udp)", "! arp && ! ip6", "not not tcp",
	"host 10.0.0.1 and not port 22", "ip and not net 10.0.0.0/8",
	"(icmp or icmp6) and host 2001:db8::2", "arp or ip6 and icmp6 or rarp",
	"ip6 and tcp port 80", "not ip6 || udp && port 53",
	// a bare value inherits the qualifiers before it
	"host 10.0.0.1 or 10.0.0.2", "host 10.0.0.1 and not 10.0.0.2", "port 22 or 80",
	"tcp port 22 or 80", "src host 10.0.0.1 or 10.1.2.3", "host 10.0.0.1 or (10.1.2.3 or 192.168.1.1)",
	"host 10.0.0.1 and (tcp) or 10.0.0.2", "net 10.0.0.0/8 or 192.168.0.0/16",
	"port 53 or domain", "ether host 02:00:00:00:00:01 or 02:00:00:00:00:02",
	"tcp dst port 22 or 179 or 443", "host 2001:db8::1 or 2001:db8::2", "udp port 53 or not 123",
	"ip proto 1 or 2", "host (10.0.0.1 or 10.0.0.2) and not arp",
	// arithmetic
	"tcp[13] & 2 != 0", "tcp[tcpflags] & tcp-syn != 0",
	"tcp[tcpflags] & (tcp-syn|tcp-ack) = tcp-syn|tcp-ack", "tcp[tcpflags] == tcp-rst",
	"ip[0] & 0xf > 5", "ip[2:2] > 100", "udp[4:2] > 20", "icmp[icmptype] = icmp-echo",
	"icmp[icmptype] != icmp-echo", "icmp6[icmp6type] = icmp6-echo", "ether[0] & 1 != 0",
	"ip[9] = 17", "ip6[6] = 58", "arp[7] = 2", "rarp[7] = 3", "ether[12:2] = 0x806", "link[0] = 2",
	"tcp[12] >> 4 = 5", "ip[6:2] & 0x1fff != 0", "tcp[0:2] = 22 or udp[2:2] = 53",
	"ip[1+1:2] > 50", "ip[ip[0] & 0xf] != 255", "tcp[(tcp[12] >> 4) * 4] = 0x68",
	"2 * ip[0] = 138", "ip[0] % 16 = 5", "ip[0] ^ 0x40 = 5", "ip[0] % 5 + 3 = 5",
	"ip[0] & 0xf0 >> 4 = 5", "ip[0] | 1 - 1 = 69", "ip[0] + tcp[0] = 69",
	"(ip[2:2] - ((ip[0] & 0xf) << 2)) > 40", "udp[0:2] < 1024", "udp[0:2] <= 53",
	"ip[0] / ip[1] = 0", "ip[8] >= 64 and ip[8] < 65", "(len) > 100", "(ip[0]) = 0x45",
	"ip6[40] = 22 and ip6[6] = 44", "sctp[2:2] = 22", "tcp[4:4] = 1", "ip6[24:4] = 0xff020000",
	"len = ip[2:2] + 14", "udp[4:2] = len - 34",
}

func TestDifferentialLibpcap(t *testing.T) {
	needDumpcap(t)
	packets := append(corpus(t), truncated(t)...)
	for _, expr := range differentialFilters {
		differ(t, expr, packets)
	}
	t.Logf("%d filters agree with libpcap on %d frames", len(differentialFilters), len(packets))
}

// TestRandomDifferential compares Compile with libpcap on random
// combinations of terms and bare values (a fixed seed, so a failure
// repeats): precedence, negation and qualifier inheritance mixed. When
// libpcap refuses one Compile must too, except for libpcap's "expression
// rejects all packets", which its optimizer finds.
func TestRandomDifferential(t *testing.T) {
	needDumpcap(t)
	terms := []string{
		"tcp", "udp", "icmp", "arp", "ip6", "ip", "sctp", "icmp6", "host 10.0.0.1",
		"src host 10.0.0.2", "port 22", "tcp port 80", "udp port 53", "dst port 22",
		"net 10.0.0.0/8", "portrange 20-30", "host 2001:db8::2", "ip proto 17",
		"ether broadcast", "ether src 02:00:00:00:00:01", "ip multicast", "greater 60",
		"tcp[13] & 2 != 0", "len > 100", "udp[0:2] < 1024",
	}
	values := []string{"10.0.0.2", "22", "53", "10.1.2.3", "2001:db8::1", "80", "ssh", "domain", "02:00:00:00:00:02"}
	ops := []string{" and ", " or ", " && ", " || "}
	r := rand.New(rand.NewSource(1))
	var expr func(depth int) string
	term := func(depth int) string {
		switch x := r.Intn(10); {
		case x < 6 || depth > 2:
			return terms[r.Intn(len(terms))]
		case x < 8:
			return "not " + terms[r.Intn(len(terms))]
		}
		return "(" + expr(depth+1) + ")"
	}
	expr = func(depth int) string {
		s := term(depth)
		for n := r.Intn(3); n > 0; n-- {
			s += ops[r.Intn(len(ops))]
			switch r.Intn(6) {
			case 0:
				s += values[r.Intn(len(values))]
			case 1:
				s += "not " + values[r.Intn(len(values))]
			default:
				s += term(depth)
			}
		}
		return s
	}
	packets := corpus(t)
	compared, refused := 0, 0
	for i := 0; i < 150; i++ {
		e := expr(0)
		_, msg, libErr := libpcap(t, e)
		_, err := Compile(e, 0)
		switch {
		case libErr != nil && strings.Contains(msg, "rejects all packets"):
		case libErr != nil && err == nil:
			t.Errorf("Compile(%q) succeeds; %v", e, libErr)
		case libErr != nil:
			refused++
		case err != nil:
			t.Errorf("Compile(%q): %v (libpcap compiles it)", e, err)
		default:
			compared++
			differ(t, e, packets)
		}
	}
	t.Logf("%d random filters agree with libpcap, %d refused by both", compared, refused)
}

// TestLibpcapRejectsToo checks that Compile refuses what libpcap refuses.
func TestLibpcapRejectsToo(t *testing.T) {
	needDumpcap(t)
	for _, expr := range []string{
		"tcp port 99999", "1.2.3.4", "(1.2.3.4)", "tcp or 22", "ip6 host 10.0.0.1", "ip host ::1",
		"net 10.0.0.1/8", "host 10.0.0.0/8", "udp port ssh", "sctp port ssh", "tcp port ntp",
		"ether host 10.0.0.1", "host 02:00:00:00:00:01", "ip port 22", "port 22 or 10.0.0.1",
		"arp proto 1", "tcp proto 6", "tcp and", "(tcp", "tcp)", "ether", "net 10/8",
		"ip[0] / 0 = 1", "ip[0] >> 32 = 0", "tcp[0:3] = 1", "tcp port 22 an udp",
		"portrange 1-99999", "ether proto ip", "ip proto tcp", "port 1-2", "host 10.0.0.256",
		"less", "ah[0] = 1", "src net 2001:db8::1/32", "net 10.0.0.0/33", "port 099",
		"tcp[0]", "host", "port 22 or", "not", "host 2001:db8::/32", "udp portrange ssh-telnet",
	} {
		if _, _, err := libpcap(t, expr); !errors.Is(err, errLibpcapRejects) {
			t.Errorf("%q: libpcap compiles it; the test expects libpcap to refuse it", expr)
			continue
		}
		if prog, err := Compile(expr, 0); err == nil {
			t.Errorf("Compile(%q) = %d instructions; libpcap refuses it", expr, len(prog))
		}
	}
}

// TestServiceNamesMatchLibpcap checks the port-name table: "port NAME",
// "tcp port NAME" and "udp port NAME" compile (or fail) as libpcap's,
// which reads /etc/services, and filter the same frames.
func TestServiceNamesMatchLibpcap(t *testing.T) {
	needDumpcap(t)
	names := make([]string, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		port := services[name].port
		packets := portPackets(t, port)
		for _, expr := range []string{"port " + name, "udp port " + name, "sctp port " + name,
			fmt.Sprintf("tcp portrange %s-%d", name, port)} {
			agree(t, expr, packets)
		}
	}
}

// agree checks that Compile refuses expr if libpcap does, and otherwise
// that their programs agree on packets.
func agree(t *testing.T, expr string, packets []packet) {
	t.Helper()
	if _, _, libErr := libpcap(t, expr); libErr != nil {
		if _, err := Compile(expr, 0); err == nil {
			t.Errorf("Compile(%q) succeeds; %v", expr, libErr)
		}
		return
	}
	differ(t, expr, packets)
}

// portPackets are TCP, UDP and SCTP frames over IPv4 and IPv6 to and from
// port, and to port+1.
func portPackets(t *testing.T, port uint16) []packet {
	var ps []packet
	for _, p := range []uint16{port, port + 1} {
		for _, proto := range []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP, layers.IPProtocolSCTP} {
			var tr gopacket.SerializableLayer
			switch proto {
			case layers.IPProtocolTCP:
				tr = tcp(40000, p, true, false, false)
			case layers.IPProtocolUDP:
				tr = udp(40000, p)
			default:
				tr = sctp(40000, p)
			}
			ps = append(ps,
				packet{fmt.Sprintf("%v over IPv4 to port %d", proto, p), serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", proto), tr)},
				packet{fmt.Sprintf("%v over IPv6 to port %d", proto, p), serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", proto), tr)})
		}
	}
	return ps
}

// TestProtocolNamesMatchLibpcap checks the IP and Ethernet protocol name
// tables against libpcap's (/etc/protocols and its built-in table).
func TestProtocolNamesMatchLibpcap(t *testing.T) {
	needDumpcap(t)
	var ipFrames []packet
	seen := map[uint32]bool{}
	for _, v := range ipProtocols {
		for _, n := range []uint32{v, v + 1} {
			if seen[n] {
				continue
			}
			seen[n] = true
			ipFrames = append(ipFrames,
				packet{fmt.Sprintf("IPv4 protocol %d", n), serialize(t, eth(macA, macB, layers.EthernetTypeIPv4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocol(n)), gopacket.Payload(make([]byte, 20)))},
				packet{fmt.Sprintf("IPv6 next header %d", n), serialize(t, eth(macA, macB, layers.EthernetTypeIPv6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocol(n)), gopacket.Payload(make([]byte, 20)))})
		}
	}
	for name := range ipProtocols {
		differ(t, `ip proto \`+name, ipFrames)
		differ(t, `proto \`+name, ipFrames)
	}
	var etherFrames []packet
	for _, v := range etherProtocols {
		if v > etherMTU {
			etherFrames = append(etherFrames, packet{fmt.Sprintf("Ethertype %#x", v), serialize(t, eth(macA, macB, layers.EthernetType(v)), gopacket.Payload(make([]byte, 46)))})
			continue
		}
		llc := eth(macA, macB, layers.EthernetTypeLLC)
		llc.Length = 3 + 43
		etherFrames = append(etherFrames, packet{fmt.Sprintf("802.2 SAP %#x", v), serialize(t, llc, &layers.LLC{DSAP: uint8(v), SSAP: uint8(v), Control: 3}, gopacket.Payload(make([]byte, 43)))})
	}
	for name := range etherProtocols {
		differ(t, `ether proto \`+name, etherFrames)
	}
}

// TestKernelAcceptsPrograms attaches Compile's programs to AF_PACKET
// sockets, as the capture does: the kernel's checker takes every
// instruction Compile emits (ld #len, mod, xor, scratch words, ja). Each
// program gets its own socket: the kernel charges a filter to the
// socket's option memory (net.core.optmem_max) and frees a replaced one
// only after an RCU grace period.
func TestKernelAcceptsPrograms(t *testing.T) {
	var long strings.Builder
	long.WriteString("port 22")
	for p := 1000; p < 1012; p++ {
		fmt.Fprintf(&long, " or port %d", p)
	}
	for _, expr := range append(differentialFilters, long.String()) {
		prog, err := Compile(expr, 0)
		if err != nil {
			t.Errorf("Compile(%q): %v", expr, err)
			continue
		}
		raw, err := bpf.Assemble(prog)
		if err != nil {
			t.Errorf("Assemble(%q): %v", expr, err)
			continue
		}
		filter := make([]unix.SockFilter, len(raw))
		for i, r := range raw {
			filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			t.Fatalf("AF_PACKET socket (the test runs as root): %v", err)
		}
		fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
			t.Errorf("SO_ATTACH_FILTER %q (%d instructions): %v", expr, len(prog), err)
		}
		unix.Close(fd)
	}
}
