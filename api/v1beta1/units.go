package v1beta1

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Patterns of the unit types, as their kubebuilder markers give them to
// the CRD (topofile's TestNetemPatternsMatchTheCRD keeps them equal): Parse
// accepts exactly what the API server admits.
var (
	DurationPattern = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`)
	PercentPattern  = regexp.MustCompile(`^(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)%?$`)
	RatePattern     = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?[kKmMgGtT]?(bit|bps)$`)
)

// Parse returns the duration d spells.
func (d Duration) Parse() (time.Duration, error) {
	if !DurationPattern.MatchString(string(d)) {
		return 0, fmt.Errorf("%q is not a duration like \"50ms\" or \"1.5s\"", string(d))
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", string(d), err)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q is negative", string(d))
	}
	return v, nil
}

// DurationOf spells v the way the API writes durations: "250us", not Go's
// "250µs", which the CRD's pattern refuses.
func DurationOf(v time.Duration) Duration {
	return Duration(strings.ReplaceAll(v.String(), "µs", "us"))
}

// Parse returns p as a percentage from 0 to 100.
func (p Percent) Parse() (float64, error) {
	if !PercentPattern.MatchString(string(p)) {
		return 0, fmt.Errorf("%q is not a percentage from 0 to 100 like \"0.5%%\"", string(p))
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(string(p), "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("percentage %q: %w", string(p), err)
	}
	if v < 0 || v > 100 || math.IsNaN(v) {
		return 0, fmt.Errorf("percentage %q is outside 0..100", string(p))
	}
	return v, nil
}

// PercentOf spells v (0..100) with at most four decimals, the precision the
// kernel's 32-bit probabilities keep.
func PercentOf(v float64) Percent {
	return Percent(strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64) + "%")
}

// rateUnits are tc's: "bit" counts bits per second and "bps" bytes per second,
// with decimal prefixes.
var rateUnits = []struct {
	suffix string
	bits   float64
}{
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"tbps", 8e12}, {"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3}, {"bps", 8},
}

// Parse returns r in bits per second.
func (r Rate) Parse() (uint64, error) {
	if !RatePattern.MatchString(string(r)) {
		return 0, fmt.Errorf("%q is not a rate like \"100mbit\" or \"10mbps\"", string(r))
	}
	s := strings.ToLower(string(r))
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("rate %q: want a number and a unit like 100mbit", string(r))
		}
		bits := v * u.bits
		if bits > math.MaxUint64 {
			return 0, fmt.Errorf("rate %q is too large", string(r))
		}
		return uint64(bits), nil
	}
	return 0, fmt.Errorf("rate %q: unknown unit, want bit, kbit, mbit, gbit, tbit or bps, kbps, mbps, gbps, tbps", string(r))
}

// RateOf spells bits per second in the largest unit that keeps it whole.
func RateOf(bps uint64) Rate {
	for _, u := range rateUnits[:5] {
		if step := uint64(u.bits); bps >= step && bps%step == 0 {
			return Rate(strconv.FormatUint(bps/step, 10) + u.suffix)
		}
	}
	return Rate(strconv.FormatUint(bps, 10) + "bit")
}
