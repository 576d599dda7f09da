//go:build kernel

package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images/debian"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelFRRImageRoutesOSPF: the FRR image, built from Debian's
// packages (fetched into the cache as the lab fetches them), really
// routes. Two copies of it run as containers (container_kernel_test.go),
// started by the image's own entrypoint and command, a veth between
// them. With the default daemons file turned to ospfd=yes and an OSPF
// frr.conf each (what a lab file binds), and the addresses set with the
// image's own ip (what a lab file's exec does), the adjacency reaches
// Full, each kernel gets the other's loopback as an OSPF route and pings
// through it, and ospfd runs as user frr.
func TestKernelFRRImageRoutesOSPF(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	tree, err := debian.Fetch(ctx, debian.CacheDir(), FRRPackages())
	if err != nil {
		t.Fatalf("fetch the FRR image's Debian packages with apt (this machine's apt sources must serve Debian bookworm): %v", err)
	}
	img, err := FRR(tree.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FRR image (frr %s) built in %v", tree.Version("frr"), time.Since(start).Round(time.Millisecond))

	ns1, ns2 := netnstest.New(t), netnstest.New(t)
	netnstest.IP(t, ns1, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", filepath.Base(ns2))
	plan := []struct{ name, netns, lo, addr string }{
		{"r1", ns1, "10.255.0.1", "10.0.12.1/30"},
		{"r2", ns2, "10.255.0.2", "10.0.12.2/30"},
	}
	var routers []*container
	for _, p := range plan {
		r := newContainer(t, img, p.name, p.netns)
		bindOSPF(t, r.root, p.name, p.lo, p.addr)
		r.start(t)
		r.exec(t, "ip", "link", "set", "lo", "up")
		r.exec(t, "ip", "addr", "add", p.lo+"/32", "dev", "lo")
		r.exec(t, "ip", "addr", "add", p.addr, "dev", "eth1")
		r.exec(t, "ip", "link", "set", "eth1", "up")
		routers = append(routers, r)
	}
	if out := routers[0].exec(t, "vtysh", "-c", "show version"); !strings.Contains(out, "FRRouting 8.4.4") {
		t.Errorf("vtysh show version:\n%s", out)
	}

	// Both ways: r1's ping to r2's loopback needs r2's route back, which
	// r2's own SPF installs, at its own time.
	var neighbors, routes, back string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		neighbors = routers[0].exec(t, "vtysh", "-c", "show ip ospf neighbor")
		routes = routers[0].exec(t, "ip", "route")
		back = routers[1].exec(t, "ip", "route")
		if strings.Contains(neighbors, "Full") && ospfRoute(routes, "10.255.0.2", "10.0.12.2") && ospfRoute(back, "10.255.0.1", "10.0.12.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: no Full adjacency with OSPF routes to both loopbacks\nr1's show ip ospf neighbor:\n%s\nr1's ip route:\n%s\nr2's ip route:\n%s", neighbors, routes, back)
		}
	}
	t.Logf("OSPF Full and the routes in both kernels %v after the start\n%s\n%s", time.Since(start).Round(time.Millisecond), neighbors, routes)
	routers[0].exec(t, "ping", "-c", "1", "-W", "5", "-I", "10.255.0.1", "10.255.0.2")
	uid := routers[0].exec(t, "sh", "-c", "grep ^Uid: /proc/$(cat /var/run/frr/ospfd.pid)/status")
	if f := strings.Fields(uid); len(f) < 2 || f[1] != strconv.Itoa(frrUID) {
		t.Errorf("ospfd runs as %q, want user frr (%d)", uid, frrUID)
	}
}

// bindOSPF writes into root what a lab file binds: the image's daemons
// file with ospfd on, and an OSPF frr.conf (point-to-point, fast hellos).
func bindOSPF(t *testing.T, root, name, lo, addr string) {
	t.Helper()
	daemons := filepath.Join(root, frrDaemons)
	data, err := os.ReadFile(daemons)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("\nospfd=no\n")) {
		t.Fatalf("the image's daemons file has no ospfd=no line:\n%s", data)
	}
	data = bytes.Replace(data, []byte("\nospfd=no\n"), []byte("\nospfd=yes\n"), 1)
	conf := fmt.Sprintf(`frr defaults traditional
hostname %s
log stdout
interface eth1
 ip ospf network point-to-point
 ip ospf hello-interval 1
 ip ospf dead-interval 4
router ospf
 ospf router-id %s
 network %s area 0
 network %s/32 area 0
`, name, lo, addr, lo)
	for file, data := range map[string][]byte{daemons: data, filepath.Join(root, "etc/frr/frr.conf"): []byte(conf)} {
		if err := os.WriteFile(file, data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// ospfRoute says whether ip route's output has an OSPF route to dst via
// gw ("10.255.0.2 nhid 12 via 10.0.12.2 dev eth1 proto ospf metric 20").
func ospfRoute(routes, dst, gw string) bool {
	for _, line := range strings.Split(routes, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == dst && strings.Contains(line, " via "+gw+" ") && strings.Contains(line, " proto ospf ") {
			return true
		}
	}
	return false
}
