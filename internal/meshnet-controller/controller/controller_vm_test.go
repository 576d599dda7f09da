//go:build vm

package controller_test

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// statusWithin allows for the VM's emulated CPUs: an edit goes through the
// API server, the controller, meshnetd and back into the status.
const statusWithin = 60 * time.Second

// TestVMNetemThroughController shapes r1's links through its Topology spec,
// on the veth to r2 and on the VXLAN to r3 (node b): node a's meshnetd
// applies the netem the controller asks for, the round-trip time shows it,
// the status reads it back from the kernel, a change is applied in place,
// and removing the field undoes it. One lab serves both links: starting the
// API server alone takes half a minute in the VM.
func TestVMNetemThroughController(t *testing.T) {
	p := newPair(t)
	for _, c := range []struct{ intf, peer string }{{"eth1", "10.0.1.2"}, {"eth2", "10.0.2.2"}} {
		t.Run(c.intf, func(t *testing.T) { netemCycle(t, p, c.intf, c.peer) })
	}
	t.Run("a LinkFault's netem ends by itself", func(t *testing.T) { faultNetem(t, p, "eth1", "10.0.1.2") })
}

// faultNetem shapes r1's intf with a LinkFault for a window: the RTT is up
// by the delay in the window, and back once it ended, without an edit of
// the Topology.
func faultNetem(t *testing.T, p *pair, intf, peer string) {
	base := medianRTT(t, p, peer)
	const window = 15 * time.Second // the VM: shaped 0.4 s in, the RTT read in 2 s
	_, start := newFault(t, p.lab, "slow", v1beta1.LinkFaultSpec{
		Links: []v1beta1.FaultLink{{Pod: "r1", Interface: intf}}, Netem: &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("50ms")},
		Duration: v1beta1.DurationOf(window)})
	topo := waitStatus(t, p.lab, "r1", statusWithin, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, intf)
		return l != nil && slices.Contains(l.Faults, "slow") && shapedAs(topo, intf, 50*time.Millisecond, 0)
	})
	t.Logf("%s: shaped by the fault %v after its window began", intf, time.Since(start).Round(time.Millisecond))
	checkShaped(t, topo, intf, 1)
	checkQdisc(t, p, intf, "delay 50ms")
	rtt := medianRTT(t, p, peer)
	t.Logf("%s: RTT %v in the fault's window (baseline %v)", intf, rtt, base)
	if d := rtt - base; d < 45*time.Millisecond || d > 90*time.Millisecond {
		t.Errorf("%s: the fault's delay 50ms raised the RTT by %v (%v -> %v), want about 50ms", intf, d, base, rtt)
	}
	if time.Since(start) > window {
		t.Fatalf("the RTT was measured %v after the window began, past its end (%v): the VM is too slow for this window", time.Since(start), window)
	}
	topo = waitStatus(t, p.lab, "r1", window+statusWithin, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, intf)
		return converged(topo) && l != nil && len(l.Faults) == 0 && l.Netem == nil
	})
	t.Logf("%s: unshaped %v after the window began (window %v)", intf, time.Since(start).Round(time.Millisecond), window)
	if time.Since(start) < window {
		t.Errorf("%s unshaped %v after the start, before the window of %v ended", intf, time.Since(start), window)
	}
	if out := qdisc(t, p, intf); strings.Contains(out, "netem") {
		t.Errorf("%s: netem still in the kernel after the fault's window:\n%s", intf, out)
	}
	rtt = medianRTT(t, p, peer)
	t.Logf("%s: RTT %v after the window (baseline %v)", intf, rtt, base)
	if rtt > base+10*time.Millisecond {
		t.Errorf("%s: RTT %v after the fault's window, baseline %v", intf, rtt, base)
	}
}

func netemCycle(t *testing.T, p *pair, intf, peer string) {
	if err := pings(p.r1, peer, 5); err != nil {
		t.Fatal(err)
	}
	base := medianRTT(t, p, peer)
	t.Logf("%s: baseline RTT %v", intf, base)

	mustEdit(t, p.lab, "r1", setLinkNetem(intf, &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("50ms")}))
	topo := waitStatus(t, p.lab, "r1", statusWithin, func(topo *v1beta1.Topology) bool {
		return converged(topo) && shapedAs(topo, intf, 50*time.Millisecond, 0)
	})
	checkShaped(t, topo, intf, 1)
	checkQdisc(t, p, intf, "delay 50ms")
	rtt := medianRTT(t, p, peer)
	t.Logf("%s: RTT %v with delay 50ms (baseline %v)", intf, rtt, base)
	if d := rtt - base; d < 45*time.Millisecond || d > 90*time.Millisecond {
		t.Errorf("%s: delay 50ms raised the RTT by %v (%v -> %v), want about 50ms", intf, d, base, rtt)
	}

	// Changed in place: the same qdisc, new parameters.
	mustEdit(t, p.lab, "r1", setLinkNetem(intf, &v1beta1.Netem{
		Delay: ptr.To[v1beta1.Duration]("20ms"), Loss: ptr.To[v1beta1.Percent]("10%")}))
	topo = waitStatus(t, p.lab, "r1", statusWithin, func(topo *v1beta1.Topology) bool {
		return converged(topo) && shapedAs(topo, intf, 20*time.Millisecond, 10)
	})
	checkShaped(t, topo, intf, 1)
	checkQdisc(t, p, intf, "delay 20ms", "loss 10%")
	rtt = medianRTT(t, p, peer)
	t.Logf("%s: RTT %v with delay 20ms loss 10%% (baseline %v)", intf, rtt, base)
	if d := rtt - base; d < 15*time.Millisecond || d > 60*time.Millisecond {
		t.Errorf("%s: delay 20ms raised the RTT by %v (%v -> %v), want about 20ms", intf, d, base, rtt)
	}

	mustEdit(t, p.lab, "r1", setLinkNetem(intf, nil))
	topo = waitStatus(t, p.lab, "r1", statusWithin, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, intf)
		return converged(topo) && l != nil && l.Netem == nil && !slices.Contains(topo.LinkManagedFields(l.UID), "netem")
	})
	if topo.Status.ShapedLinks != 0 {
		t.Errorf("status shaped_links %d after netem was removed, want 0", topo.Status.ShapedLinks)
	}
	if out := qdisc(t, p, intf); strings.Contains(out, "netem") {
		t.Errorf("%s: netem still in the kernel after it was removed from the spec:\n%s", intf, out)
	}
	rtt = medianRTT(t, p, peer)
	t.Logf("%s: RTT %v after netem was removed (baseline %v)", intf, rtt, base)
	if rtt > base+10*time.Millisecond {
		t.Errorf("%s: RTT %v after netem was removed, baseline %v", intf, rtt, base)
	}
}

func setLinkNetem(intf string, n *v1beta1.Netem) func(*v1beta1.Topology) {
	return func(topo *v1beta1.Topology) {
		for i := range topo.Spec.Links {
			if topo.Spec.Links[i].LocalIntf == intf {
				topo.Spec.Links[i].Netem = n
			}
		}
	}
}

// shapedAs is true when the status reads back the given delay and loss
// (percent) from the kernel, within its rounding of them, and says the
// controller manages the link's netem.
func shapedAs(topo *v1beta1.Topology, intf string, delay time.Duration, loss float64) bool {
	l := linkStatus(topo, intf)
	if l == nil || l.Netem == nil || l.Netem.Delay == nil || !slices.Contains(topo.LinkManagedFields(l.UID), "netem") {
		return false
	}
	d, err := l.Netem.Delay.Parse()
	if err != nil || (d-delay).Abs() > 100*time.Microsecond {
		return false
	}
	var got float64
	if l.Netem.Loss != nil {
		if got, err = l.Netem.Loss.Parse(); err != nil {
			return false
		}
	}
	return math.Abs(got-loss) < 0.01
}

func checkShaped(t *testing.T, topo *v1beta1.Topology, intf string, shaped int32) {
	t.Helper()
	if topo.Status.ShapedLinks != shaped {
		t.Errorf("status shaped_links %d, want %d", topo.Status.ShapedLinks, shaped)
	}
	l := linkStatus(topo, intf)
	t.Logf("%s status: netem delay %s loss %s, managed %v", intf, ptr.Deref(l.Netem.Delay, ""), ptr.Deref(l.Netem.Loss, ""), topo.LinkManagedFields(l.UID))
}

// checkQdisc asks tc, as an operator would, what r1's kernel has on intf.
func checkQdisc(t *testing.T, p *pair, intf string, want ...string) {
	t.Helper()
	out := qdisc(t, p, intf)
	for _, w := range append([]string{"netem"}, want...) {
		if !strings.Contains(out, w) {
			t.Errorf("%s: tc qdisc show has no %q:\n%s", intf, w, out)
		}
	}
}

func qdisc(t *testing.T, p *pair, intf string) string {
	t.Helper()
	out, err := p.r1.Run("tc", "qdisc", "show", "dev", intf)
	if err != nil {
		t.Fatalf("tc qdisc show dev %s in r1: %v\n%s", intf, err, out)
	}
	return out
}

var pingTime = regexp.MustCompile(`time=([0-9.]+) ms`)

// medianRTT pings peer from r1 and returns the median round trip: the
// emulated CPUs add outliers of their own. A lossy link loses some probes;
// half of them must come back.
func medianRTT(t *testing.T, p *pair, peer string) time.Duration {
	t.Helper()
	const probes = 15
	out, err := p.r1.Run("ping", "-c", strconv.Itoa(probes), "-i", "0.2", "-W", "2", peer)
	var rtts []time.Duration
	for _, m := range pingTime.FindAllStringSubmatch(out, -1) {
		ms, perr := strconv.ParseFloat(m[1], 64)
		if perr != nil {
			t.Fatalf("ping time %q: %v", m[1], perr)
		}
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(rtts) < probes/2 {
		t.Fatalf("ping %s from r1: %d of %d replies: %v\n%s", peer, len(rtts), probes, err, out)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2].Round(10 * time.Microsecond)
}
