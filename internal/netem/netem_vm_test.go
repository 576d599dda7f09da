//go:build vm

package netem

import (
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/shaping"
)

// full sets every field.
var full = shaping.Spec{
	Delay: 100 * time.Millisecond, Jitter: 10 * time.Millisecond, DelayCorrelation: 25, Distribution: shaping.DistributionNormal,
	Loss: 1.5, LossCorrelation: 10, ECN: true,
	Duplicate: 2, DuplicateCorrelation: 3,
	Corrupt: 0.5, CorruptCorrelation: 4,
	Reorder: 25, ReorderCorrelation: 50, Gap: 5,
	RateBps: 100_000_000, Limit: 50000,
}

// readBack is what Get reports for s: the effective limit and gap, and no
// distribution (the kernel does not dump its table).
func readBack(s shaping.Spec) shaping.Spec {
	if s.Limit == 0 {
		s.Limit = shaping.DefaultLimit(s)
	}
	if s.Reorder > 0 && s.Gap == 0 {
		s.Gap = 1
	}
	s.Distribution = shaping.DistributionNone
	return s
}

func TestVMRoundTrip(t *testing.T) {
	p := newPair(t)
	for _, s := range []shaping.Spec{
		{Delay: 10 * time.Millisecond},
		full,
		// Beyond the legacy u32 ticks (274.9 s) and u32 bytes/s rate.
		{Delay: 300 * time.Second, Jitter: shaping.MaxJitter, Distribution: shaping.DistributionPareto, RateBps: 40_000_000_000},
		{Loss: 33.333333, Duplicate: 0.000001, Corrupt: 99.999999, Limit: 1},
		{Delay: time.Millisecond, Reorder: 10},                                                                                                        // gap 1, as tc
		{Delay: 5 * time.Second, Jitter: time.Second, DelayCorrelation: 100, Distribution: shaping.DistributionParetoNormal, Limit: shaping.MaxLimit}, // meshnet's cap
		{},
	} {
		p.apply(t, s)
		st := p.get(t)
		if st.Owner != OwnerMeshnet || st.Kind != "netem" || st.Handle != Handle || st.Undecoded != nil {
			t.Fatalf("after Apply(%+v): %v %s %s (%v)", s, st.Owner, st.Kind, formatHandle(st.Handle), st.Undecoded)
		}
		if want := readBack(s); st.Spec != want {
			t.Errorf("Apply(%+v)\n Get = %+v\nwant   %+v", s, st.Spec, want)
		}
	}
	p.apply(t, full)
	t.Logf("full spec, as tc shows it:\n%s", tcShow(t, p.a))
}

// A change that leaves fields out clears them in the kernel.
func TestVMChangeClearsRemovedFields(t *testing.T) {
	p := newPair(t)
	p.apply(t, full)
	shown := tcShow(t, p.a)
	for _, w := range []string{"loss", "duplicate", "corrupt", "reorder", "gap", "rate", "ecn"} {
		if !strings.Contains(shown, w) {
			t.Fatalf("tc does not show %q for the full spec:\n%s", w, shown)
		}
	}
	small := shaping.Spec{Delay: 10 * time.Millisecond}
	p.apply(t, small)
	if got, want := p.get(t).Spec, readBack(small); got != want {
		t.Errorf("after the change Get = %+v, want %+v", got, want)
	}
	shown = tcShow(t, p.a)
	t.Logf("after the change:\n%s", shown)
	qdisc := strings.SplitN(shown, "\n", 2)[0]
	for _, w := range []string{"loss", "duplicate", "corrupt", "reorder", "gap", "rate", "ecn", "slot", "%"} {
		if strings.Contains(qdisc, w) {
			t.Errorf("tc still shows %q: %s", w, qdisc)
		}
	}
}

// The kernel fact behind sending everything: a change that omits nested
// options keeps their old values (only the struct tc_netem_qopt fields are
// always replaced). This is what vishvananda/netlink's replace sends.
func TestVMKernelKeepsUnsentOptions(t *testing.T) {
	p := newPair(t)
	p.apply(t, full)
	ifindex, err := p.c.ifindex(dev)
	if err != nil {
		t.Fatal(err)
	}
	obj := netemObject(ifindex, shaping.Spec{Delay: 10 * time.Millisecond})
	n := obj.Netem
	n.Corr, n.Reorder, n.Corrupt, n.Rate, n.Rate64, n.Ecn, n.Slot, n.DelayDist = nil, nil, nil, nil, nil, nil, nil, nil
	if err := p.c.tc.Qdisc().Change(obj); err != nil {
		t.Fatal(err)
	}
	got := p.get(t).Spec
	kept := shaping.Spec{
		Delay: 10 * time.Millisecond, Limit: shaping.DefaultLimit(shaping.Spec{Delay: 10 * time.Millisecond}),
		// nested options, kept from full:
		DelayCorrelation: full.DelayCorrelation, LossCorrelation: full.LossCorrelation, ECN: true,
		DuplicateCorrelation: full.DuplicateCorrelation, Corrupt: full.Corrupt, CorruptCorrelation: full.CorruptCorrelation,
		Reorder: full.Reorder, ReorderCorrelation: full.ReorderCorrelation, RateBps: full.RateBps,
	}
	if got != kept {
		t.Errorf("after a change without nested options\n Get = %+v\nwant   %+v", got, kept)
	}
	t.Logf("tc after a change without nested options:\n%s", tcShow(t, p.a))
}

// Apply on meshnet's qdisc changes it in place: same handle, counters go
// on, and a flow loses no packet across 20 changes of delay.
func TestVMChangeInPlaceLosesNothing(t *testing.T) {
	p := newPair(t)
	p.apply(t, shaping.Spec{Delay: 5 * time.Millisecond})
	var errs []error
	var packets []uint32
	res := p.run(t, flow{count: 1500, size: 200, gap: time.Millisecond, during: func() {
		time.Sleep(100 * time.Millisecond)
		for i := range 20 {
			if err := p.c.Apply(dev, shaping.Spec{Delay: time.Duration(5+i) * time.Millisecond}); err != nil {
				errs = append(errs, err)
			}
			st, err := p.c.Get(dev)
			if err != nil || st.Handle != Handle || st.Spec.Delay != time.Duration(5+i)*time.Millisecond {
				errs = append(errs, fmt.Errorf("change %d: %+v, %v", i, st, err))
			}
			packets = append(packets, st.Stats.Packets)
			time.Sleep(50 * time.Millisecond)
		}
	}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(packets); i++ {
		if packets[i] < packets[i-1] {
			t.Errorf("qdisc packet counter went back from %d to %d: re-created", packets[i-1], packets[i])
		}
	}
	if packets[len(packets)-1] <= packets[0] {
		t.Errorf("qdisc counted no packets during the changes: %v", packets)
	}
	st := p.get(t)
	t.Logf("sent %d, received %d intact (%d duplicates, %d corrupted); qdisc %+v", res.sent, res.unique(), res.duplicates(), res.corrupted, st.Stats)
	if res.unique() != res.sent || res.duplicates() != 0 || res.corrupted != 0 {
		t.Errorf("lost %d of %d packets across 20 changes", res.sent-res.unique(), res.sent)
	}
	if st.Stats.Drops != 0 {
		t.Errorf("qdisc dropped %d", st.Stats.Drops)
	}
}

// The counterfactual that makes the test above mean something: delete and
// re-add, as tools that cannot change in place do, drops the queue.
func TestVMDeleteAndAddDropsPackets(t *testing.T) {
	p := newPair(t)
	s := shaping.Spec{Delay: 20 * time.Millisecond}
	p.apply(t, s)
	var errs []error
	res := p.run(t, flow{count: 1000, size: 200, gap: time.Millisecond, during: func() {
		time.Sleep(100 * time.Millisecond)
		for range 5 {
			errs = append(errs, p.c.Clear(dev), p.c.Apply(dev, s))
			time.Sleep(100 * time.Millisecond)
		}
	}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("delete and add 5 times: lost %d of %d", res.sent-res.unique(), res.sent)
	if res.unique() == res.sent {
		t.Error("lost nothing: the flow cannot tell in place from re-created")
	}
}

func TestVMForeignTbfUntouched(t *testing.T) {
	p := newPair(t)
	addTbf(t, p.a, dev)
	requireForeignErr(t, p.c.Apply(dev, shaping.Spec{Delay: time.Millisecond}), dev)
	requireTbf(t, p.c, dev)
	requireForeignErr(t, p.c.Clear(dev), dev)
	requireTbf(t, p.c, dev)
}

// Somebody else's netem is foreign too, and still read.
func TestVMForeignNetemUntouched(t *testing.T) {
	p := newPair(t)
	tcRun(t, p.a, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", "20ms", "loss", "5%")
	check := func() {
		t.Helper()
		st := p.get(t)
		if st.Owner != OwnerForeign || st.Kind != "netem" || st.Handle != 1<<16 || st.Spec.Delay != 20*time.Millisecond || st.Spec.Loss != 5 {
			t.Fatalf("root: %+v, want the foreign netem 1: with delay 20ms loss 5%%", st)
		}
	}
	check()
	if err := p.c.Apply(dev, shaping.Spec{}); !errors.Is(err, ErrForeignQdisc) || !strings.Contains(err.Error(), "netem 1:") {
		t.Fatalf("Apply over a foreign netem: %v", err)
	}
	if err := p.c.Clear(dev); !errors.Is(err, ErrForeignQdisc) {
		t.Fatalf("Clear of a foreign netem: %v", err)
	}
	check()
}

// go-tc cannot decode netem loss models (TCA_NETEM_LOSS): Get still tells
// whose qdisc it is, and Apply on meshnet's replaces the model in place
// (the kernel resets it to random loss when a change carries none).
func TestVMUnknownLossModel(t *testing.T) {
	p := newPair(t)
	tcRun(t, p.a, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "loss", "gemodel", "1%", "10%")
	st := p.get(t)
	if st.Owner != OwnerForeign || st.Kind != "netem" || st.Handle != 1<<16 || st.Undecoded == nil {
		t.Fatalf("foreign netem with gemodel: %+v", st)
	}
	t.Logf("undecoded: %v", st.Undecoded)
	requireErrIs(t, p.c.Apply(dev, shaping.Spec{}), ErrForeignQdisc)
	tcRun(t, p.a, "qdisc", "del", "dev", dev, "root")

	tcRun(t, p.a, "qdisc", "add", "dev", dev, "root", "handle", "4d4e:", "netem", "delay", "1ms", "loss", "gemodel", "1%", "10%")
	before := p.get(t)
	if before.Owner != OwnerMeshnet || before.Undecoded == nil {
		t.Fatalf("meshnet's netem with gemodel: %+v", before)
	}
	s := shaping.Spec{Delay: 5 * time.Millisecond, Loss: 2}
	p.apply(t, s)
	after := p.get(t)
	if after.Undecoded != nil || after.Spec != readBack(s) || after.Handle != Handle {
		t.Fatalf("after Apply: %+v", after)
	}
	if shown := tcShow(t, p.a); strings.Contains(shown, "gemodel") {
		t.Errorf("loss model kept:\n%s", shown)
	}
}

func TestVMClearRemovesOnlyOurs(t *testing.T) {
	p := newPair(t)
	p.apply(t, shaping.Spec{Delay: time.Millisecond})
	if err := p.c.Clear(dev); err != nil {
		t.Fatal(err)
	}
	requireDefault(t, p.c, dev)
	if err := p.c.Clear(dev); err != nil {
		t.Fatalf("Clear without a qdisc: %v", err)
	}
	if shown := tcShow(t, p.a); !strings.Contains(shown, "noqueue 0: root") {
		t.Errorf("root after Clear:\n%s", shown)
	}
}

func requireErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got %v, want %v", err, target)
	}
}

// within4Sigma checks a binomial count: got of n trials at probability q.
func within4Sigma(t testing.TB, what string, got, n int, q float64) {
	t.Helper()
	mean, sd := float64(n)*q, math.Sqrt(float64(n)*q*(1-q))
	t.Logf("%s: %d, expected %.0f +/- %.0f (4 sigma)", what, got, mean, 4*sd)
	if math.Abs(float64(got)-mean) > 4*sd {
		t.Errorf("%s: %d is outside %.0f +/- %.0f", what, got, mean, 4*sd)
	}
}

func TestVMDelay(t *testing.T) {
	const delay = 50 * time.Millisecond
	p := newPair(t)
	base := median(p.rtts(t, 100, 5*time.Millisecond))
	p.apply(t, shaping.Spec{Delay: delay})
	shaped := median(p.rtts(t, 100, 5*time.Millisecond))
	added := shaped - base
	t.Logf("RTT %v unshaped, %v with %v delay: +%v", base, shaped, delay, added)
	if added < delay*8/10 || added > delay*12/10 {
		t.Errorf("delay added %v, want %v +/- 20%%", added, delay)
	}
}

func TestVMLoss(t *testing.T) {
	const n = 2000
	p := newPair(t)
	p.apply(t, shaping.Spec{Loss: 30})
	res := p.run(t, flow{count: n, size: 100, gap: 500 * time.Microsecond})
	within4Sigma(t, "received at 30% loss", res.unique(), n, 0.7)
}

func TestVMDuplicate(t *testing.T) {
	const n = 2000
	p := newPair(t)
	p.apply(t, shaping.Spec{Duplicate: 20})
	res := p.run(t, flow{count: n, size: 100, gap: 500 * time.Microsecond})
	if res.unique() != n {
		t.Errorf("received %d distinct of %d", res.unique(), n)
	}
	within4Sigma(t, "duplicates at 20%", res.duplicates(), n, 0.2)
}

// Corruption flips one random bit of the frame (Ethernet header included).
// The probes go without UDP checksum (SO_NO_CHECK), so a flip in the
// payload arrives and fails the probe's CRC32; a flip in the IP header
// fails its checksum, in the destination MAC, Ethertype or UDP header
// (but its source port) the frame is dropped. Only the 48 source MAC bits,
// the multicast bit and the 16 source port bits pass unnoticed.
func TestVMCorrupt(t *testing.T) {
	const (
		n       = 3000
		size    = 958 // UDP payload: 1000-byte frames
		frame   = 14 + 20 + 8 + size
		percent = 20
	)
	p := newPair(t)
	p.apply(t, shaping.Spec{Corrupt: percent})
	res := p.run(t, flow{count: n, size: size, gap: 500 * time.Microsecond, noCheck: true})
	lost := n - res.unique() - res.corrupted
	t.Logf("sent %d: %d intact, %d with a corrupted payload, %d lost; receiver: Ip InHdrErrors %s, Udp InCsumErrors %s NoPorts %s",
		n, res.unique(), res.corrupted, lost,
		snmp(t, p.b, "Ip", "InHdrErrors"), snmp(t, p.b, "Udp", "InCsumErrors"), snmp(t, p.b, "Udp", "NoPorts"))
	q := percent / 100.0
	within4Sigma(t, "corrupted payloads received", res.corrupted, n, q*size/frame)
	within4Sigma(t, "corrupted (payload or dropped)", res.corrupted+lost, n, q*(1-65.0/(8*frame)))
	if res.duplicates() != 0 {
		t.Errorf("%d duplicates", res.duplicates())
	}
}

func TestVMRate(t *testing.T) {
	const rate = 10_000_000
	p := newPair(t)
	unshaped := p.tcpGoodput(t, 8<<20)
	p.apply(t, shaping.Spec{RateBps: rate})
	shaped := p.tcpGoodput(t, 3<<20)
	t.Logf("TCP goodput %.1f Mbit/s unshaped, %.2f Mbit/s at rate 10mbit", unshaped/1e6, shaped/1e6)
	if unshaped < 3*rate {
		t.Fatalf("the VM moves only %.1f Mbit/s unshaped: too slow to tell 10 Mbit/s", unshaped/1e6)
	}
	if shaped < rate*0.8 || shaped > rate*1.2 {
		t.Errorf("goodput %.2f Mbit/s, want 10 +/- 20%%", shaped/1e6)
	}
}

// Distributions shape the jitter; a spec without one gets the uniform
// jitter back, in place. The kernel does not report its table, so this is
// measured on RTTs of Delay 200ms Jitter 100ms: the share below
// mu-sigma-tol (VM noise only ever adds delay, so this tail is robust), the
// share above mu+sigma+tol, and the median.
func TestVMDistribution(t *testing.T) {
	const (
		delay  = 200 * time.Millisecond
		jitter = 100 * time.Millisecond
		tol    = 10 * time.Millisecond // RTT noise in the VM
	)
	p := newPair(t)
	base := median(p.rtts(t, 50, 2*time.Millisecond))
	mu := base + delay
	type shape struct {
		below, above float64
		median       time.Duration
	}
	measure := func(what string) shape {
		rtts := p.rtts(t, 400, 2*time.Millisecond)
		var lo, hi int
		for _, r := range rtts {
			switch {
			case r < mu-jitter-tol:
				lo++
			case r > mu+jitter+tol:
				hi++
			}
		}
		sh := shape{float64(lo) / float64(len(rtts)), float64(hi) / float64(len(rtts)), median(rtts)}
		t.Logf("%s: %d RTTs, median mu%+v, %.1f%% below mu-sigma, %.1f%% above mu+sigma",
			what, len(rtts), sh.median-mu, 100*sh.below, 100*sh.above)
		return sh
	}
	isNormal := func(sh shape) bool { // P(Z < -1.1) = 13.6% each side
		return sh.below > 0.06 && sh.above > 0.06
	}
	s := shaping.Spec{Delay: delay, Jitter: jitter}

	s.Distribution = shaping.DistributionNormal
	p.apply(t, s)
	if sh := measure("normal"); !isNormal(sh) {
		t.Errorf("normal: %+v; want ~13.6%% in each tail", sh)
	}
	s.Distribution = shaping.DistributionPareto
	p.apply(t, s)
	// The table's minimum is -0.667 sigma, its median -0.32 sigma, and
	// P(above 1.1 sigma) = 2.325^-3 = 8%.
	if sh := measure("pareto"); sh.below > 0.02 || sh.above < 0.03 || sh.median > mu-jitter/5 {
		t.Errorf("pareto: %+v; want no low tail, ~8%% high, median mu-32ms", sh)
	}
	// A spec without jitter sends no table; the next with jitter does.
	p.apply(t, shaping.Spec{Delay: delay})
	s.Distribution = shaping.DistributionNone
	p.apply(t, s)
	if sh := measure("none after pareto"); sh.below > 0.02 || sh.above > 0.02 || sh.median < mu-jitter/5 {
		t.Errorf("none: %+v; want uniform within mu +/- sigma", sh)
	}
	if st := p.get(t); st.Handle != Handle {
		t.Fatalf("handle %s", formatHandle(st.Handle))
	}

	// The kernel fact: a change without a table keeps the old one.
	s.Distribution = shaping.DistributionNormal
	p.apply(t, s)
	ifindex, err := p.c.ifindex(dev)
	if err != nil {
		t.Fatal(err)
	}
	obj := netemObject(ifindex, shaping.Spec{Delay: delay, Jitter: jitter})
	obj.Netem.DelayDist = nil
	if err := p.c.tc.Qdisc().Change(obj); err != nil {
		t.Fatal(err)
	}
	if sh := measure("change without table after normal"); !isNormal(sh) {
		t.Errorf("the kernel dropped the normal table on a change without one: %+v", sh)
	}
	// And an empty table is refused.
	empty := []int16{}
	obj.Netem.DelayDist = &empty
	err = p.c.tc.Qdisc().Change(obj)
	t.Logf("change with an empty table: %v", err)
	if err == nil {
		t.Error("the kernel took an empty distribution table")
	}
}

// The benchmarks change delay in place, as meshnetd would, through a Conn
// kept per netns, through one opened per call, and through a tc process.
func BenchmarkVMApplyConn(b *testing.B) {
	benchmarkApply(b, func(p *pair, s shaping.Spec) error { return p.c.Apply(dev, s) }, false)
}

func BenchmarkVMApplyConnJitterNormal(b *testing.B) {
	benchmarkApply(b, func(p *pair, s shaping.Spec) error { return p.c.Apply(dev, s) }, true)
}

func BenchmarkVMApplyOpenEach(b *testing.B) {
	benchmarkApply(b, func(p *pair, s shaping.Spec) error { return Apply(handleOf(p.a), dev, s) }, false)
}

func BenchmarkVMApplyTCProcess(b *testing.B) {
	benchmarkApply(b, tcReplace, false)
}

func BenchmarkVMApplyTCProcessJitterNormal(b *testing.B) {
	benchmarkApply(b, tcReplace, true)
}

func benchmarkApply(b *testing.B, apply func(*pair, shaping.Spec) error, jitter bool) {
	p := newPair(b)
	spec := func(i int) shaping.Spec {
		s := shaping.Spec{Delay: time.Duration(1+i%2) * time.Millisecond}
		if jitter {
			s.Jitter, s.Distribution = time.Millisecond/2, shaping.DistributionNormal
		}
		return s
	}
	p.apply(b, spec(0))
	for i := 0; b.Loop(); i++ {
		if err := apply(p, spec(i)); err != nil {
			b.Fatal(err)
		}
	}
	if st := p.get(b); st.Handle != Handle || st.Spec.Delay == 0 {
		b.Fatalf("root after the benchmark: %+v", st)
	}
}

// tcReplace is what tools that shell out run.
func tcReplace(p *pair, s shaping.Spec) error {
	args := []string{"-n", filepath.Base(p.a.Path()), "qdisc", "replace", "dev", dev, "root", "handle", "4d4e:", "netem",
		"limit", "10000", "delay", fmt.Sprintf("%dus", s.Delay.Microseconds())}
	if s.Jitter > 0 {
		args = append(args, fmt.Sprintf("%dus", s.Jitter.Microseconds()), "distribution", string(s.Distribution))
	}
	if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
