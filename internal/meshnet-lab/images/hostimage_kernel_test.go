//go:build kernel

package images

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images/debian"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelHostImageTools: two containers of the host image, built from
// Debian's packages, a veth between them, run every tool the image is
// for: ip (iproute2's, through the shell), ping, traceroute, iperf3 and
// tcpdump (which drops to user tcpdump), and the image's own command
// answers HTTP with the host's name.
func TestKernelHostImageTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tree, err := debian.Fetch(ctx, debian.CacheDir(), HostPackages())
	if err != nil {
		t.Fatalf("fetch the host image's Debian packages with apt (this machine's apt sources must serve Debian bookworm): %v", err)
	}
	img, err := Host(tree.Dir)
	if err != nil {
		t.Fatal(err)
	}
	ns1, ns2 := netnstest.New(t), netnstest.New(t)
	netnstest.IP(t, ns1, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", filepath.Base(ns2))
	h1, h2 := newContainer(t, img, "h1", ns1), newContainer(t, img, "h2", ns2)
	for i, h := range []*container{h1, h2} {
		h.start(t)
		// What a lab file's exec runs: a shell line, so the shell's PATH
		// lookup must find iproute2's ip (ip -V says which).
		out := h.exec(t, "sh", "-c", "ip -V && ip link set eth1 up && ip addr add 10.0.0."+string(rune('1'+i))+"/24 dev eth1")
		if !strings.Contains(out, "iproute2") {
			t.Fatalf("%s: the shell's ip is not iproute2's: %s", h.name, out)
		}
	}
	h1.exec(t, "ping", "-c", "1", "-W", "5", "10.0.0.2")
	if out := h1.exec(t, "traceroute", "-n", "-q", "1", "-w", "2", "10.0.0.2"); !strings.Contains(out, " 1  10.0.0.2 ") {
		t.Errorf("traceroute:\n%s", out)
	}
	var page string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := h1.command(t, "wget", "-q", "-O", "-", "http://10.0.0.2/").CombinedOutput()
		if page = string(out); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if strings.TrimSpace(page) != "h2" {
		t.Errorf("http://h2/ answered %q, want its host name h2", page)
	}

	capture := h2.command(t, "timeout", "20", "tcpdump", "-c", "1", "-n", "-i", "eth1", "icmp")
	var captured lockedBuffer
	capture.Stdout, capture.Stderr = &captured, &captured
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(captured.String(), "listening on eth1") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	h1.exec(t, "ping", "-c", "1", "-W", "5", "10.0.0.2")
	if err := capture.Wait(); err != nil || !strings.Contains(captured.String(), "ICMP echo request") {
		t.Errorf("tcpdump: %v\n%s", err, captured.String())
	}

	h2.exec(t, "iperf3", "-s", "-1", "-D")
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		b, err := h1.command(t, "iperf3", "-c", "10.0.0.2", "-t", "1").CombinedOutput()
		if out = string(b); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(out, "receiver") {
		t.Errorf("iperf3:\n%s", out)
	}
}

// lockedBuffer is a buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
