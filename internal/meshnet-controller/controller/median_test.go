package controller

import (
	"slices"
	"time"
)

// MedianSeconds is the median of d in seconds: the one figure a batch
// benchmark reports over its iterations. Exported for package
// controller_test's benchmarks.
func MedianSeconds(d []time.Duration) float64 {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2].Seconds()
}
