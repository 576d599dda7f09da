package topograph

import (
	"testing"
)

func TestThickness(t *testing.T) {
	for rate, want := range map[float64]float64{-1: 1, 0: 1, 500: 1, 1e3: 1, 1e4: 2.5, 1e6: 5.5, 1e9: 10, 1e12: 10} {
		if got := thickness(rate); got != want {
			t.Errorf("thickness(%v B/s) = %v, want %v", rate, got, want)
		}
	}
}
