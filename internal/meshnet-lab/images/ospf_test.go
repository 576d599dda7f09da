//go:build kernel || vm

package images

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// ospfPair runs two routers of img, r1 and r2, in their own network
// namespaces with a veth eth1 between them (10.0.12.0/30) and loopbacks
// 10.255.0.1 and 10.255.0.2, as a lab file would start them (binds of
// daemons and frr.conf, addresses by exec), and waits until their OSPF
// adjacency is Full and each kernel has the other's loopback as an OSPF
// route: both ways, as r1's ping to r2's loopback needs r2's route back,
// which r2's own SPF installs, at its own time. It logs r1's neighbours
// and routes then.
func ospfPair(t *testing.T, img v1.Image) [2]*container {
	t.Helper()
	ns1, ns2 := netnstest.New(t), netnstest.New(t)
	netnstest.IP(t, ns1, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", filepath.Base(ns2))
	plan := [2]struct{ name, netns, lo, addr string }{
		{"r1", ns1, "10.255.0.1", "10.0.12.1/30"},
		{"r2", ns2, "10.255.0.2", "10.0.12.2/30"},
	}
	var routers [2]*container
	for i, p := range plan {
		r := newContainer(t, img, p.name, p.netns)
		bindOSPF(t, r.root, p.name, p.lo, p.addr)
		r.start(t)
		r.exec(t, "ip", "link", "set", "lo", "up")
		r.exec(t, "ip", "addr", "add", p.lo+"/32", "dev", "lo")
		r.exec(t, "ip", "addr", "add", p.addr, "dev", "eth1")
		r.exec(t, "ip", "link", "set", "eth1", "up")
		routers[i] = r
	}
	if out := routers[0].exec(t, "vtysh", "-c", "show version"); !strings.Contains(out, "FRRouting 8.4.4") {
		t.Errorf("vtysh show version:\n%s", out)
	}
	start := time.Now()
	var neighbors, routes, back string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		neighbors = routers[0].exec(t, "vtysh", "-c", "show ip ospf neighbor")
		routes = routers[0].exec(t, "ip", "route")
		back = routers[1].exec(t, "ip", "route")
		if strings.Contains(neighbors, "Full") && ospfRoute(routes, "10.255.0.2", "10.0.12.2") && ospfRoute(back, "10.255.0.1", "10.0.12.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s: no Full adjacency with OSPF routes to both loopbacks\nr1's show ip ospf neighbor:\n%s\nr1's ip route:\n%s\nr2's ip route:\n%s", neighbors, routes, back)
		}
	}
	t.Logf("OSPF Full and the routes in both kernels %v after the routers started\n%s\n%s", time.Since(start).Round(time.Millisecond), neighbors, routes)
	return routers
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
