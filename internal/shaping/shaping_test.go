package shaping

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidateAccepts(t *testing.T) {
	for name, s := range map[string]Spec{
		"zero":    {},
		"delay":   {Delay: 10 * time.Millisecond},
		"maxjit":  {Delay: time.Second, Jitter: MaxJitter, DelayCorrelation: 25, Distribution: DistributionParetoNormal},
		"loss":    {Loss: 100, LossCorrelation: 100, ECN: true},
		"reorder": {Delay: time.Millisecond, Reorder: 25, ReorderCorrelation: 50, Gap: 5},
		"rate":    {RateBps: 10_000_000},
		"all":     {Delay: 300 * time.Second, Jitter: time.Second, Duplicate: 1, DuplicateCorrelation: 2, Corrupt: 0.1, CorruptCorrelation: 0.2, Limit: 1},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateNamesField(t *testing.T) {
	for _, c := range []struct {
		spec  Spec
		field string
		says  string
	}{
		{Spec{Loss: 100.5}, "Loss", "0..100"},
		{Spec{Loss: -1}, "Loss", "0..100"},
		{Spec{Duplicate: math.NaN()}, "Duplicate", "0..100"},
		{Spec{Corrupt: 101}, "Corrupt", "0..100"},
		{Spec{Delay: time.Millisecond, Reorder: 200}, "Reorder", "0..100"},
		{Spec{Delay: time.Second, Jitter: time.Millisecond, DelayCorrelation: 101}, "DelayCorrelation", "0..100"},
		{Spec{Delay: -time.Second}, "Delay", "negative"},
		{Spec{Delay: time.Second, Jitter: -1}, "Jitter", "negative"},
		{Spec{Jitter: time.Millisecond}, "Jitter", "needs Delay"},
		{Spec{Delay: 3 * time.Second, Jitter: MaxJitter + 1}, "Jitter", "cap"},
		{Spec{Delay: MaxDelay + time.Nanosecond}, "Delay", "cap of 1h0m0s"},
		{Spec{Limit: MaxLimit + 1}, "Limit", "cap of 65536"},
		{Spec{Delay: time.Second, Distribution: DistributionNormal}, "Distribution", "needs Delay and Jitter"},
		{Spec{Distribution: DistributionUniform}, "Distribution", "needs Delay and Jitter"},
		{Spec{Delay: time.Second, Jitter: 1, Distribution: "gaussian"}, "Distribution", "unknown"},
		{Spec{Reorder: 10}, "Reorder", "needs Delay"},
		{Spec{Gap: 3}, "Gap", "needs Reorder"},
		{Spec{Delay: time.Second, DelayCorrelation: 5}, "DelayCorrelation", "needs Jitter"},
		{Spec{LossCorrelation: 5}, "LossCorrelation", "needs Loss"},
		{Spec{DuplicateCorrelation: 5}, "DuplicateCorrelation", "needs Duplicate"},
		{Spec{CorruptCorrelation: 5}, "CorruptCorrelation", "needs Corrupt"},
		{Spec{Delay: time.Second, ReorderCorrelation: 5}, "ReorderCorrelation", "needs Reorder"},
		{Spec{ECN: true}, "ECN", "needs Loss"},
		{Spec{RateBps: 1001}, "RateBps", "multiple of 8"},
	} {
		err := c.spec.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: got %v, want a FieldError on %s saying %q", c.spec, err, c.field, c.says)
			continue
		}
		if !strings.Contains(err.Error(), c.field+": ") {
			t.Errorf("%q does not name %s", err, c.field)
		}
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	err := Spec{Loss: 101, Gap: 1, RateBps: 3}.Validate()
	for _, f := range []string{"Loss", "Gap", "RateBps"} {
		if !strings.Contains(err.Error(), f+": ") {
			t.Errorf("%q lacks %s", err, f)
		}
	}
}

func TestDefaultLimit(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want uint32
	}{
		{Spec{}, MinDefaultLimit},
		{Spec{Delay: 10 * time.Millisecond}, MinDefaultLimit}, // 1 Gbit/s x 10 ms = 833 frames
		// 2 x 100 ms x 1 Gbit/s / 12000 bit
		{Spec{Delay: 100 * time.Millisecond}, 16667},
		{Spec{Delay: 250 * time.Millisecond, Jitter: 50 * time.Millisecond, RateBps: 1_000_000_000}, 50000},
		{Spec{Delay: 900 * time.Millisecond, Jitter: 100 * time.Millisecond, RateBps: 1_000_000_000}, MaxDefaultLimit}, // 166,667 capped
		{Spec{Delay: 2 * time.Second, RateBps: 10_000_000}, MinDefaultLimit},                                           // 3334
		{Spec{Delay: time.Second, RateBps: 100_000_000_000}, MaxDefaultLimit},
	} {
		if got := DefaultLimit(c.spec); got != c.want {
			t.Errorf("DefaultLimit(%+v) = %d, want %d", c.spec, got, c.want)
		}
	}
}
