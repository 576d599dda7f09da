// Package shaping is a link's traffic shaping as the kernel's netem qdisc
// takes it (Spec), validated field by field: the one form that the
// Topology's netem, the gRPC API's NetemSpec and package netem, which
// applies it, convert to. It holds no kernel code, so that the controller
// and kubectl meshnet can validate and compare shaping without linking it.
package shaping

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Distribution names the shape of the delay jitter.
type Distribution string

// Distributions netem knows. None and Uniform behave the same: the kernel's
// jitter without a table is uniform over [Delay-Jitter, Delay+Jitter).
const (
	DistributionNone         Distribution = ""
	DistributionUniform      Distribution = "uniform"
	DistributionNormal       Distribution = "normal"
	DistributionPareto       Distribution = "pareto"
	DistributionParetoNormal Distribution = "paretonormal"
)

// Spec is the shaping of one interface's egress. Units are in the field
// names or types; percentages are 0..100. The zero value shapes nothing
// (a netem qdisc that passes every packet at once).
type Spec struct {
	Delay            time.Duration
	Jitter           time.Duration // at most MaxJitter
	DelayCorrelation float64       // percent
	Distribution     Distribution  // shape of Jitter

	Loss            float64 // percent, random loss
	LossCorrelation float64 // percent
	ECN             bool    // mark ECN-capable packets instead of dropping them

	Duplicate            float64 // percent
	DuplicateCorrelation float64 // percent

	Corrupt            float64 // percent, one bit flipped per corrupted packet
	CorruptCorrelation float64 // percent

	// Reorder sends this percent of packets at once, without the delay.
	Reorder            float64
	ReorderCorrelation float64 // percent
	// Gap makes only every Gap-th packet a reorder candidate. 0 with Reorder
	// means 1 (every packet), as tc does; Get then reports 1.
	Gap uint32

	RateBps uint64 // bits/s, a multiple of 8: the kernel counts bytes/s

	// Limit is the queue length in packets. 0 means DefaultLimit(spec);
	// Get reports the effective limit.
	Limit uint32
}

// MaxJitter is the kernel's cap on jitter: it keeps it in an s32 of ns.
const MaxJitter = time.Duration(math.MaxInt32)

// meshnet's caps, for the kernel memory a link's queue may hold: packets
// queued in a qdisc are the kernel's, charged to no pod. A queue holds at
// most MaxLimit packets (about 150 MiB of full-size frames, 2.3 KiB each
// with the kernel's overhead; a pod's offloaded sends, up to 64 KiB a
// packet, can make it more), and each for at most MaxDelay plus jitter.
const (
	MaxDelay = time.Hour
	MaxLimit = 1 << 16
)

// Limits of DefaultLimit.
const (
	// MinDefaultLimit is containerlab's netem limit; netem's own 1000
	// packets drops at long delays or high rates.
	MinDefaultLimit = 10000
	// MaxDefaultLimit bounds what a large delay x rate may queue: the
	// cap on any limit.
	MaxDefaultLimit = MaxLimit
	// defaultLineRate stands for the rate when Spec.RateBps is 0 (the
	// link's own speed, unknown here), in bits/s.
	defaultLineRate = 1e9
	// frameBytes is a full-size Ethernet frame.
	frameBytes = 1500
)

// DefaultLimit is the queue limit netem.Apply uses when s.Limit is 0: netem
// holds every packet for its delay, so the queue must hold the packets of
// one bandwidth-delay product, twice over for bursts:
//
//	limit = 2 * (Delay+Jitter) * rate / (8 * 1500 bytes)
//
// with rate = RateBps, or 1 Gbit/s when RateBps is 0, bounded to
// [MinDefaultLimit, MaxDefaultLimit].
func DefaultLimit(s Spec) uint32 {
	rate := float64(s.RateBps)
	if rate == 0 {
		rate = defaultLineRate
	}
	bdp := (s.Delay + s.Jitter).Seconds() * rate / (8 * frameBytes)
	limit := math.Ceil(2 * bdp)
	switch {
	case limit < MinDefaultLimit:
		return MinDefaultLimit
	case limit > MaxDefaultLimit:
		return MaxDefaultLimit
	}
	return uint32(limit)
}

// FieldError is a Spec field that Validate rejects.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("netem spec: %s: %s", e.Field, e.Reason)
}

// Validate reports every field the kernel would reject or silently ignore,
// each as a *FieldError, joined.
func (s Spec) Validate() error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	percents := []struct {
		name  string
		value float64
	}{
		{"DelayCorrelation", s.DelayCorrelation},
		{"Loss", s.Loss}, {"LossCorrelation", s.LossCorrelation},
		{"Duplicate", s.Duplicate}, {"DuplicateCorrelation", s.DuplicateCorrelation},
		{"Corrupt", s.Corrupt}, {"CorruptCorrelation", s.CorruptCorrelation},
		{"Reorder", s.Reorder}, {"ReorderCorrelation", s.ReorderCorrelation},
	}
	for _, p := range percents {
		if !(p.value >= 0 && p.value <= 100) { // also NaN
			fail(p.name, "%v is not a percentage in 0..100", p.value)
		}
	}
	switch {
	case s.Delay < 0:
		fail("Delay", "%v is negative", s.Delay)
	case s.Delay > MaxDelay:
		fail("Delay", "%v exceeds meshnet's cap of %v (queued packets are kernel memory held that long)", s.Delay, MaxDelay)
	}
	if s.Limit > MaxLimit {
		fail("Limit", "%d exceeds meshnet's cap of %d packets (a queue is kernel memory charged to no pod)", s.Limit, MaxLimit)
	}
	switch {
	case s.Jitter < 0:
		fail("Jitter", "%v is negative", s.Jitter)
	case s.Jitter > MaxJitter:
		fail("Jitter", "%v exceeds the kernel's cap of %v", s.Jitter, MaxJitter)
	case s.Jitter > 0 && s.Delay == 0:
		fail("Jitter", "needs Delay")
	}
	switch s.Distribution {
	case DistributionNone:
	case DistributionUniform, DistributionNormal, DistributionPareto, DistributionParetoNormal:
		if s.Delay == 0 || s.Jitter == 0 {
			fail("Distribution", "%s needs Delay and Jitter", s.Distribution)
		}
	default:
		fail("Distribution", "unknown %q (none, uniform, normal, pareto, paretonormal)", s.Distribution)
	}
	if s.Reorder > 0 && s.Delay == 0 {
		fail("Reorder", "needs Delay (reordering sends some packets without it)")
	}
	if s.Gap > 0 && s.Reorder == 0 {
		fail("Gap", "needs Reorder")
	}
	needs := []struct {
		name, base string
		value, of  float64
	}{
		{"DelayCorrelation", "Jitter", s.DelayCorrelation, s.Jitter.Seconds()},
		{"LossCorrelation", "Loss", s.LossCorrelation, s.Loss},
		{"DuplicateCorrelation", "Duplicate", s.DuplicateCorrelation, s.Duplicate},
		{"CorruptCorrelation", "Corrupt", s.CorruptCorrelation, s.Corrupt},
		{"ReorderCorrelation", "Reorder", s.ReorderCorrelation, s.Reorder},
	}
	for _, n := range needs {
		if n.value > 0 && n.of <= 0 {
			fail(n.name, "needs %s", n.base)
		}
	}
	if s.ECN && s.Loss == 0 {
		fail("ECN", "needs Loss (ECN marks the packets loss would drop)")
	}
	if s.RateBps%8 != 0 {
		fail("RateBps", "%d is not a multiple of 8 (the kernel counts bytes/s)", s.RateBps)
	}
	return errors.Join(errs...)
}
