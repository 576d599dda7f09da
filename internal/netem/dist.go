package netem

import (
	"math"

	"github.com/meshnet/meshnet/internal/shaping"
)

// Distribution tables as the kernel takes them (TCA_NETEM_DELAY_DIST):
// distTableSize samples of the inverse CDF of a zero-centred distribution,
// in units of Jitter/distScale. netem picks a random entry per packet and
// delays it by Delay + Jitter*entry/distScale.
const (
	distTableSize = 4096
	distScale     = 8192 // NETEM_DIST_SCALE
	// paretoAlpha is the shape iproute2's pareto table uses.
	paretoAlpha = 3.0
)

// distTable returns the table Apply sends for d. None and Uniform get a
// linear table: the kernel cannot drop a table once given (a change without
// one keeps the old table, an empty one is EINVAL), so a spec without a
// distribution replaces it with one that behaves like the kernel's built-in
// uniform jitter.
func distTable(d shaping.Distribution) []int16 {
	switch d {
	case shaping.DistributionNormal:
		return normalTable()
	case shaping.DistributionPareto:
		return paretoTable()
	case shaping.DistributionParetoNormal:
		return paretoNormalTable()
	default:
		return uniformTable()
	}
}

// uniformTable spans [-distScale, distScale) evenly: Delay +/- Jitter.
func uniformTable() []int16 {
	t := make([]int16, distTableSize)
	for i := range t {
		t[i] = int16(-distScale + 2*distScale*i/distTableSize)
	}
	return t
}

// normalTable samples the standard normal's inverse CDF at the midpoints
// (i+0.5)/size, which makes the table exactly antisymmetric; iproute2's
// normal.dist samples the same function on a slightly shifted grid.
func normalTable() []int16 {
	t := make([]int16, distTableSize)
	for i := range t {
		t[i] = scaleEntry(normalQuantile((float64(i) + 0.5) / distTableSize))
	}
	return t
}

// paretoTable follows iproute2's pareto.c: the Pareto (x_m = 1, alpha = 3)
// inverse CDF (1-p)^(-1/alpha) at p = i/size, minus its mean 1.5, scaled by
// 4/3 (iproute2's normalisation).
func paretoTable() []int16 {
	t := make([]int16, distTableSize)
	for i := range t {
		t[i] = scaleEntry(paretoQuantile(float64(i) / distTableSize))
	}
	return t
}

// paretoNormalTable follows iproute2's paretonormal.c: a quarter normal,
// three quarters Pareto, quantile by quantile (with C's truncating
// division).
func paretoNormalTable() []int16 {
	n, p := normalTable(), paretoTable()
	t := make([]int16, distTableSize)
	for i := range t {
		t[i] = int16((int32(n[i]) + 3*int32(p[i])) / 4)
	}
	return t
}

func normalQuantile(p float64) float64 {
	return math.Sqrt2 * math.Erfinv(2*p-1)
}

func paretoQuantile(p float64) float64 {
	const mean = paretoAlpha / (paretoAlpha - 1)
	return (math.Pow(1-p, -1/paretoAlpha) - mean) * 4 / 3
}

// scaleEntry turns a quantile in units of Jitter into a table entry,
// clamped to int16 as iproute2 does.
func scaleEntry(x float64) int16 {
	v := math.Round(x * distScale)
	return int16(max(math.MinInt16, min(math.MaxInt16, v)))
}
