//go:build vm

package images

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/vishvananda/netns"

	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/shaping"
)

// frrTreeEnv names the FRR image's Debian tree on the VM's disk; hack/vmtest
// ships it and its init.sh sets this.
const frrTreeEnv = "MESHNET_FRR_TREE"

// TestVMNetemOnFRRLink: meshnet's netem (what meshnetd shapes links with)
// on the link between two routers of the lab's FRR image, on a stock
// kernel. The OSPF adjacency over it stays Full, and pings between the
// routers' loopbacks, which OSPF routes over that link, take the delay
// more while it is on and no more once it is cleared.
func TestVMNetemOnFRRLink(t *testing.T) {
	tree := os.Getenv(frrTreeEnv)
	if tree == "" {
		t.Fatalf("%s is not set: hack/vmtest ships the FRR image's Debian tree on the VM's disk and sets it", frrTreeEnv)
	}
	if err := core.InitializeClock(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	img, err := FRR(tree)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FRR image built from %s in %v", tree, time.Since(start).Round(time.Millisecond))
	r := ospfPair(t, img)

	base := loopbackRTT(t, r[0])
	ns, err := netns.GetFromPath(r[0].netns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const delay = 40 * time.Millisecond
	if err := netem.Apply(ns, "eth1", shaping.Spec{Delay: delay}); err != nil {
		t.Fatalf("netem delay %v on r1's eth1: %v", delay, err)
	}
	shaped := loopbackRTT(t, r[0])
	t.Logf("RTT r1 -> r2 loopback over OSPF: %v without netem, %v with delay %v on r1's eth1", base, shaped, delay)
	if rise := shaped - base; rise < delay-2*time.Millisecond || rise > delay+20*time.Millisecond {
		t.Errorf("RTT rose by %v with netem delay %v, want about the delay", rise, delay)
	}
	if out := r[0].exec(t, "vtysh", "-c", "show ip ospf neighbor"); !strings.Contains(out, "Full") {
		t.Errorf("OSPF adjacency not Full under the delay:\n%s", out)
	}
	if err := netem.Clear(ns, "eth1"); err != nil {
		t.Fatal(err)
	}
	after := loopbackRTT(t, r[0])
	t.Logf("RTT r1 -> r2 loopback after netem was cleared: %v", after)
	if after > base+10*time.Millisecond {
		t.Errorf("RTT %v after netem was cleared, want about the %v before", after, base)
	}
}

// pingAvg is the average of ping's summary, busybox's ("round-trip
// min/avg/max = 0.071/0.083/0.096 ms") or iputils' ("rtt min/avg/max/mdev
// = ...").
var pingAvg = regexp.MustCompile(`min/avg/max\S* = [0-9.]+/([0-9.]+)/`)

// loopbackRTT is the average round trip of ten pings from r1's loopback to
// r2's.
func loopbackRTT(t *testing.T, r1 *container) time.Duration {
	t.Helper()
	out := r1.exec(t, "ping", "-c", "10", "-i", "0.2", "-W", "2", "-I", "10.255.0.1", "10.255.0.2")
	m := pingAvg.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no round-trip summary in ping's output:\n%s", out)
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}
