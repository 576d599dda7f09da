package netem

import (
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/florianl/go-tc/core"

	"github.com/meshnet/meshnet/internal/shaping"
)

func TestMain(m *testing.M) {
	if err := core.InitializeClock(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func TestProbabilityScale(t *testing.T) {
	for pct, want := range map[float64]uint32{
		0: 0, 100: math.MaxUint32, 50: 2147483648, 25: 1073741824, 1: 42949673,
	} {
		if got := probability(pct); got != want {
			t.Errorf("probability(%v) = %d, want %d", pct, got, want)
		}
	}
	if got := percent(math.MaxUint32); got != 100 {
		t.Errorf("percent(max) = %v", got)
	}
}

// Percentages with at most 6 decimals read back exactly.

func TestPercentRoundTrip(t *testing.T) {
	for i := 0; i <= 100_000_000; i += 7_919 { // 0 .. 100 % in steps of 7.919e-6 %
		pct := float64(i) / percentDigits
		if got := percent(probability(pct)); got != pct {
			t.Fatalf("percent(probability(%v)) = %v", pct, got)
		}
	}
	for _, pct := range []float64{0.000001, 0.1, 30, 33.333333, 99.999999, 100} {
		if got := percent(probability(pct)); got != pct {
			t.Errorf("percent(probability(%v)) = %v", pct, got)
		}
	}
}

// Any kernel value reads back to within half a 1e-6 % step of itself.

func TestProbabilityRoundTrip(t *testing.T) {
	const step = math.MaxUint32 / 100 / percentDigits // u32 per 1e-6 %
	for p := uint64(0); p <= math.MaxUint32; p += 104_729 {
		back := probability(percent(uint32(p)))
		if d := math.Abs(float64(back) - float64(p)); d > step/2+1 {
			t.Fatalf("probability(percent(%d)) = %d, off by %v", p, back, d)
		}
	}
}

// netemObject sends every nested option, so the kernel keeps none from

// before (the table only with jitter, the only time it is used); decode

// reads back what it sent.

func TestNetemObjectSendsEverything(t *testing.T) {
	for _, s := range []shaping.Spec{
		{},
		{Delay: 300 * time.Second, Jitter: shaping.MaxJitter, DelayCorrelation: 12.5, Distribution: shaping.DistributionNormal,
			Loss: 30, LossCorrelation: 1, ECN: true, Duplicate: 2, DuplicateCorrelation: 3,
			Corrupt: 4, CorruptCorrelation: 5, Reorder: 6, ReorderCorrelation: 7, Gap: 8,
			RateBps: 80_000_000_000, Limit: 1234},
	} {
		n := netemObject(7, s).Netem
		if n.Corr == nil || n.Reorder == nil || n.Corrupt == nil || n.Rate == nil || n.Rate64 == nil ||
			n.Ecn == nil || n.Latency64 == nil || n.Jitter64 == nil || n.Slot == nil || (n.DelayDist == nil) != (s.Jitter == 0) {
			t.Fatalf("%+v: an option is left out: %+v", s, n)
		}
		want := s
		want.Distribution = shaping.DistributionNone // not reported by the kernel
		if want.Limit == 0 {
			want.Limit = shaping.DefaultLimit(s)
		}
		if got := decode(n); got != want {
			t.Errorf("decode(netemObject(%+v))\n = %+v", s, got)
		}
	}
}

func TestNetemObjectDetails(t *testing.T) {
	n := netemObject(7, shaping.Spec{Delay: 300 * time.Second, Reorder: 10, RateBps: 40_000_000_000}).Netem
	if n.Qopt.Gap != 1 {
		t.Errorf("reorder without gap sends gap %d, want 1 as tc does", n.Qopt.Gap)
	}
	if n.Qopt.Latency != math.MaxUint32 {
		t.Errorf("legacy latency for 300 s = %d ticks, want saturated", n.Qopt.Latency)
	}
	if n.Rate.Rate != math.MaxUint32 || *n.Rate64 != 5_000_000_000 {
		t.Errorf("40 Gbit/s: rate %d, rate64 %d; want ~0 and 5e9 bytes/s", n.Rate.Rate, *n.Rate64)
	}
	if n := netemObject(7, shaping.Spec{Delay: time.Millisecond}).Netem; n.Qopt.Latency == 0 || tickDuration(n.Qopt.Latency) != time.Millisecond {
		t.Errorf("legacy latency for 1 ms = %d ticks", n.Qopt.Latency)
	}
}

func TestForeignQdiscError(t *testing.T) {
	err := error(&ForeignQdiscError{Dev: "eth1", Kind: "tbf", Handle: 1 << 16})
	if !errors.Is(err, ErrForeignQdisc) {
		t.Error("not ErrForeignQdisc")
	}
	if want := "eth1 has root qdisc tbf 1:, not meshnet's netem 4d4e:; leaving it alone"; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
}

func TestOwner(t *testing.T) {
	for _, c := range []struct {
		kind   string
		handle uint32
		want   Owner
	}{
		{"noqueue", 0, OwnerNone}, {"mq", 0, OwnerNone}, {"pfifo_fast", 0, OwnerNone},
		{"netem", Handle, OwnerMeshnet}, {"netem", 1 << 16, OwnerForeign}, {"tbf", Handle, OwnerForeign},
	} {
		if got := owner(c.kind, c.handle); got != c.want {
			t.Errorf("owner(%s, %x) = %v, want %v", c.kind, c.handle, got, c.want)
		}
	}
}
