package netem

import "math"

// probability converts a percentage to the kernel's u32 scale, where
// MaxUint32 is 100%, rounding to nearest as tc does.
func probability(percent float64) uint32 {
	return uint32(math.Round(percent / 100 * math.MaxUint32))
}

// percentDigits is the precision percentages read back with: a u32 step is
// 2.3e-8 %, so any percentage given with at most 6 decimals reads back
// exactly.
const percentDigits = 1e6

// percent converts the kernel's u32 probability to a percentage, rounded to
// 1e-6 %.
func percent(p uint32) float64 {
	return math.Round(float64(p)*100/math.MaxUint32*percentDigits) / percentDigits
}
