package v1beta1

import (
	"testing"
	"time"
)

func TestDurationParse(t *testing.T) {
	for in, want := range map[Duration]time.Duration{"50ms": 50 * time.Millisecond, "1.5s": 1500 * time.Millisecond, "250us": 250 * time.Microsecond, "1m30s": 90 * time.Second} {
		got, err := in.Parse()
		if err != nil || got != want {
			t.Errorf("%q.Parse() = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := DurationOf(got).Parse(); back != want {
			t.Errorf("DurationOf(%v) = %q does not parse back", got, DurationOf(got))
		}
	}
	if _, err := Duration("50 ms").Parse(); err == nil {
		t.Error(`"50 ms" parsed`)
	}
}

func TestPercentParse(t *testing.T) {
	for in, want := range map[Percent]float64{"0.5%": 0.5, "0.5": 0.5, "100%": 100, "0": 0, "30": 30} {
		got, err := in.Parse()
		if err != nil || got != want {
			t.Errorf("%q.Parse() = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []Percent{"150%", "-1", "x%"} {
		if _, err := bad.Parse(); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := PercentOf(0.49999999); got != "0.5%" {
		t.Errorf("PercentOf(0.49999999) = %q, want 0.5%%", got)
	}
}

func TestRateParse(t *testing.T) {
	for in, want := range map[Rate]uint64{"100mbit": 100e6, "1gbit": 1e9, "64kbit": 64e3, "1.5Mbit": 1.5e6, "10mbps": 80e6, "9600bit": 9600} {
		got, err := in.Parse()
		if err != nil || got != want {
			t.Errorf("%q.Parse() = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []Rate{"fast", "10", "mbit"} {
		if _, err := bad.Parse(); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for bps, want := range map[uint64]Rate{100e6: "100mbit", 1e9: "1gbit", 1500e3: "1500kbit", 7: "7bit"} {
		if got := RateOf(bps); got != want {
			t.Errorf("RateOf(%d) = %q, want %q", bps, got, want)
		}
	}
}
