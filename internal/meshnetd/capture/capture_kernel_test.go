//go:build kernel

package capture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
	"github.com/meshnet/meshnet/internal/meshnetd/capture"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/pcapfilter"
)

// pair is two namespaces joined by a veth, eth1 at 10.0.0.1/30 and
// 10.0.0.2/30, without IPv6, whose neighbour discovery would add packets
// the tests do not count on.
func pair(t *testing.T) (a, b string) {
	t.Helper()
	a, b = netnstest.New(t), netnstest.New(t)
	for _, ns := range []string{a, b} {
		if out, err := netnstest.Run(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			t.Fatalf("sysctl: %v\n%s", err, out)
		}
	}
	netnstest.IP(t, a, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", b)
	netnstest.IP(t, a, "addr", "add", "10.0.0.1/30", "dev", "eth1")
	netnstest.IP(t, b, "addr", "add", "10.0.0.2/30", "dev", "eth1")
	netnstest.IP(t, a, "link", "set", "eth1", "up")
	netnstest.IP(t, b, "link", "set", "eth1", "up")
	return a, b
}

// tshark decodes a capture file with Debian's tshark, one line a packet.
func tshark(t *testing.T, file string, fields ...string) []string {
	t.Helper()
	args := []string{"-r", file, "-T", "fields"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s (hack/deps.sh installs tshark)", args, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestKernelCaptureDecodesPing captures a ping over a veth; tshark reads
// the stream, and the link is as it was. A packet limit ends a capture.
func TestKernelCaptureDecodesPing(t *testing.T) {
	a, _ := pair(t)
	before := netnstest.LinkConfig(t, a, "eth1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startCapture(t, ctx, a, capture.Options{})
	if out, err := netnstest.Run(a, "ping", "-c", "3", "-i", "0.2", "10.0.0.2"); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	time.Sleep(100 * time.Millisecond) // the last reply's way to the reader
	cancel()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	st := c.stats
	var icmp []string
	for _, l := range tshark(t, c.file, "icmp.type", "ip.src", "ip.dst") {
		if !strings.HasPrefix(l, "\t") { // ARP and IPv6 neighbour discovery decode to no ICMP type
			icmp = append(icmp, l)
		}
	}
	req, rep := "8\t10.0.0.1\t10.0.0.2", "0\t10.0.0.2\t10.0.0.1"
	if want := []string{req, rep, req, rep, req, rep}; strings.Join(icmp, "\n") != strings.Join(want, "\n") {
		t.Errorf("tshark decodes the ICMP packets %q, want 3 echo requests and replies %q", icmp, want)
	}
	if st.Packets < 6 || st.Dropped != 0 {
		t.Errorf("stats %+v, want the 6 ICMP packets at least, none dropped", st)
	}
	if after := netnstest.LinkConfig(t, a, "eth1"); after != before {
		t.Errorf("the capture changed the link:\nbefore %s\nafter %s", before, after)
	}

	// A limit of 2 packets, the ping's first request and reply (ARP is
	// resolved already), cut to 64 bytes each.
	c = startCapture(t, context.Background(), a, capture.Options{Count: 2, SnapLength: 64})
	if out, err := netnstest.Run(a, "ping", "-c", "3", "-i", "0.2", "-s", "1000", "10.0.0.2"); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	select {
	case err := <-c.done:
		if err != nil || c.stats.Packets != 2 {
			t.Errorf("capture of 2 packets: %d, %v", c.stats.Packets, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the capture did not stop at 2 packets")
	}
	if got := tshark(t, c.file, "icmp.type", "frame.cap_len", "frame.len"); strings.Join(got, "\n") != "8\t64\t1042\n0\t64\t1042" {
		t.Errorf("tshark reads %q, want a request and a reply of 1042 bytes, 64 of each kept", got)
	}
}

// TestKernelCaptureFilter: a capture filter runs in the kernel: of a ping
// with its ARP and a UDP datagram beside it, "icmp" keeps the ICMP
// packets only, and "udp or arp" the rest; the link is as it was.
func TestKernelCaptureFilter(t *testing.T) {
	a, _ := pair(t)
	before := netnstest.LinkConfig(t, a, "eth1")
	for _, tc := range []struct {
		filter string
		want   []string // tshark's protocols of each frame
	}{
		// Two echo requests and replies, and the port unreachable the
		// datagram draws.
		{"icmp", []string{"icmp", "icmp", "icmp", "icmp", "icmp"}},
		{"udp or arp", []string{"arp", "arp", "udp"}},
	} {
		prog, err := pcapfilter.Compile(tc.filter, 0)
		if err != nil {
			t.Fatalf("compile %q: %v", tc.filter, err)
		}
		netnstest.IP(t, a, "neigh", "flush", "dev", "eth1") // an ARP exchange first
		ctx, cancel := context.WithCancel(context.Background())
		c := startCapture(t, ctx, a, capture.Options{Filter: prog, FilterText: tc.filter})
		if out, err := netnstest.Run(a, "ping", "-c", "2", "-i", "0.2", "10.0.0.2"); err != nil {
			t.Fatalf("ping: %v\n%s", err, out)
		}
		if out, err := netnstest.Run(a, "bash", "-c", "echo meshnet > /dev/udp/10.0.0.2/9"); err != nil {
			t.Fatalf("udp: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-c.done; err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, protos := range tshark(t, c.file, "frame.protocols") {
			// eth:ethertype:ip:icmp:data -> icmp
			parts := strings.Split(protos, ":")
			got = append(got, parts[min(len(parts)-1, 2+boolInt(len(parts) > 3))])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("filter %q kept %q, want %q", tc.filter, got, tc.want)
		}
		// The stream says which filter made it, as libpcap's files do.
		if got := recordedFilter(t, c.file); got != tc.filter {
			t.Errorf("filter %q: the stream's interface records %q", tc.filter, got)
		}
	}
	if after := netnstest.LinkConfig(t, a, "eth1"); after != before {
		t.Errorf("the captures changed the link:\nbefore %s\nafter %s", before, after)
	}
}

// recordedFilter is the filter the capture file's first interface
// records.
func recordedFilter(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	intf, err := r.Interface(0)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return intf.Filter
}

// TestKernelCaptureSpansACablePull: a capture goes on while its link is
// down, and sees the pings before and after.
func TestKernelCaptureSpansACablePull(t *testing.T) {
	a, _ := pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startCapture(t, ctx, a, capture.Options{})
	for _, step := range [][]string{
		{"ping", "-c", "1", "10.0.0.2"},
		{"ip", "link", "set", "eth1", "down"},
		{"sleep", "0.3"},
		{"ip", "link", "set", "eth1", "up"},
		{"ping", "-c", "1", "-w", "5", "10.0.0.2"},
	} {
		if out, err := netnstest.Run(a, step[0], step[1:]...); err != nil {
			t.Fatalf("%v: %v\n%s", step, err, out)
		}
	}
	select {
	case err := <-c.done:
		t.Fatalf("the capture ended when its link went down: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	var requests int
	for _, l := range tshark(t, c.file, "icmp.type") {
		if l == "8" {
			requests++
		}
	}
	if requests != 2 {
		t.Errorf("%d echo requests captured, want the one before the cable pull and the one after", requests)
	}
}

// running is a capture of eth1 running into a file of its own.
type running struct {
	file string
	// done answers Run's error; stats are Run's once it has.
	done  chan error
	stats capture.Stats
}

// startCapture starts a capture of ns's eth1 and waits for its header; the
// file is closed once the capture ends.
func startCapture(t *testing.T, ctx context.Context, ns string, o capture.Options) *running {
	t.Helper()
	c := &running{file: filepath.Join(t.TempDir(), "eth1.pcapng"), done: make(chan error, 1)}
	w, err := os.Create(c.file)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var err error
		c.stats, err = capture.Run(ctx, ns, "eth1", o, w)
		w.Close()
		c.done <- err
	}()
	waitHeader(t, w)
	return c
}

// waitHeader waits for the stream's header: the socket is open, and
// traffic from then on is in the capture.
func waitHeader(t *testing.T, f *os.File) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no pcapng header after 5s")
		}
	}
}

// TestKernelCaptureStopsAfterDuration: a capture without traffic ends at its
// duration, or when its context ends, with a stream tshark reads.
func TestKernelCaptureStopsAfterDuration(t *testing.T) {
	a, _ := pair(t)
	for _, tc := range []struct {
		name string
		opts capture.Options
		ctx  time.Duration
	}{
		{"duration", capture.Options{Duration: 300 * time.Millisecond}, time.Minute},
		{"context", capture.Options{}, 300 * time.Millisecond},
	} {
		file := filepath.Join(t.TempDir(), "eth1.pcapng")
		w, err := os.Create(file)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), tc.ctx)
		start := time.Now()
		st, err := capture.Run(ctx, a, "eth1", tc.opts, w)
		cancel()
		w.Close()
		if took := time.Since(start); err != nil || took > 5*time.Second {
			t.Errorf("%s: %v after %v, want an end after 300ms", tc.name, err, took)
		}
		if got := tshark(t, file, "frame.number"); st.Packets != len(got)-boolInt(got[0] == "") {
			t.Errorf("%s: %d packets counted, tshark reads %q", tc.name, st.Packets, got)
		}
	}
	if _, err := capture.Run(context.Background(), a, "eth9", capture.Options{}, os.Stdout); err == nil || !strings.Contains(err.Error(), "eth9") {
		t.Errorf("capture on a missing interface: %v, want an error naming eth9", err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkKernelCaptureVXLAN captures a VXLAN link while iperf3 sends TCP
// over it as fast as it can for 2 s, the capture read through a pipe as a
// client reads it, and reports the packets per second the capture
// delivered, those the kernel dropped because the reader fell behind, and
// iperf3's own rate beside it.
func BenchmarkKernelCaptureVXLAN(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatalf("the capture benchmark needs iperf3 (apt-get install iperf3): %v", err)
	}
	x, y := netnstest.New(b), netnstest.New(b)
	for _, end := range []struct{ ns, self, peer, addr string }{
		{x, "192.168.77.1", "192.168.77.2", "10.9.0.1/30"},
		{y, "192.168.77.2", "192.168.77.1", "10.9.0.2/30"},
	} {
		if end.ns == x {
			netnstest.IP(b, x, "link", "add", "ul", "type", "veth", "peer", "name", "ul", "netns", y)
		}
		netnstest.IP(b, end.ns, "addr", "add", end.self+"/30", "dev", "ul")
		netnstest.IP(b, end.ns, "link", "set", "ul", "up")
		netnstest.IP(b, end.ns, "link", "add", "eth1", "type", "vxlan", "id", "42", "local", end.self, "remote", end.peer, "dstport", "4789", "dev", "ul")
		netnstest.IP(b, end.ns, "addr", "add", end.addr, "dev", "eth1")
		netnstest.IP(b, end.ns, "link", "set", "eth1", "up")
	}
	server := exec.Command("nsenter", "--net="+y, "--", "iperf3", "-s")
	if err := server.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	time.Sleep(300 * time.Millisecond)
	for _, snap := range []int{0, 128} {
		b.Run(fmt.Sprintf("snap=%d", snap), func(b *testing.B) { captureUnderLoad(b, x, capture.Options{SnapLength: snap}, server.Process.Pid) })
	}
	// A filter that keeps the connections' first packets only: the kernel
	// drops the rest before the socket, and the capture costs next to
	// nothing.
	const syn = "tcp[tcpflags] & tcp-syn != 0"
	prog, err := pcapfilter.Compile(syn, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("filter=syn", func(b *testing.B) {
		captureUnderLoad(b, x, capture.Options{Filter: prog, FilterText: syn}, server.Process.Pid)
	})
}

// captureUnderLoad is one of BenchmarkKernelCaptureVXLAN's cases: x is the
// sending namespace, opts the capture's, server iperf3's server. Beside
// the rates it reports each process's CPU time per run: this test's (the
// capture and the pipe's reader), and iperf3's client and server.
func captureUnderLoad(b *testing.B, x string, opts capture.Options, server int) {
	var pps, drops, mbps, self, client, srv []float64
	cpuOf := func(pid int) time.Duration {
		d, err := proccpu.Of(pid)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	for b.Loop() {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		read := make(chan int64, 1)
		go func() {
			n, _ := io.Copy(io.Discard, r)
			read <- n
		}()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan capture.Stats, 1)
		go func() {
			st, err := capture.Run(ctx, x, "eth1", opts, w)
			if err != nil {
				b.Error(err)
			}
			w.Close()
			done <- st
		}()
		time.Sleep(200 * time.Millisecond)
		self0, srv0 := cpuOf(os.Getpid()), cpuOf(server)
		start := time.Now()
		iperf := exec.Command("nsenter", "--net="+x, "--", "iperf3", "-c", "10.9.0.2", "-t", "2", "-J")
		out, err := iperf.Output()
		took := time.Since(start)
		cancel()
		st := <-done
		<-read
		r.Close()
		if err != nil {
			b.Fatalf("iperf3: %v\n%s", err, out)
		}
		var res struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			b.Fatalf("iperf3 -J: %v", err)
		}
		self = append(self, (cpuOf(os.Getpid()) - self0).Seconds())
		srv = append(srv, (cpuOf(server) - srv0).Seconds())
		client = append(client, (iperf.ProcessState.UserTime() + iperf.ProcessState.SystemTime()).Seconds())
		pps = append(pps, float64(st.Packets)/took.Seconds())
		drops = append(drops, float64(st.Dropped))
		mbps = append(mbps, res.End.SumReceived.BitsPerSecond/1e6)
	}
	b.ReportMetric(median(pps), "captured-pkts/s")
	b.ReportMetric(median(drops), "dropped-pkts")
	b.ReportMetric(median(mbps), "iperf3-Mbit/s")
	b.ReportMetric(median(self), "capture-cpu-s")
	b.ReportMetric(median(client), "iperf3-client-cpu-s")
	b.ReportMetric(median(srv), "iperf3-server-cpu-s")
	b.ReportMetric(0, "ns/op")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
