//go:build kernel

package images

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images/debian"
)

// TestKernelFRRImageRoutesOSPF: the FRR image, built from Debian's
// packages (fetched into the cache as the lab fetches them), really
// routes. Two copies of it run as containers (container_test.go),
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

	routers := ospfPair(t, img)
	routers[0].exec(t, "ping", "-c", "1", "-W", "5", "-I", "10.255.0.1", "10.255.0.2")
	uid := routers[0].exec(t, "sh", "-c", "grep ^Uid: /proc/$(cat /var/run/frr/ospfd.pid)/status")
	if f := strings.Fields(uid); len(f) < 2 || f[1] != strconv.Itoa(frrUID) {
		t.Errorf("ospfd runs as %q, want user frr (%d)", uid, frrUID)
	}
}
