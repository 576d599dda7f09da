package netem

import (
	"math"
	"slices"
	"testing"

	"github.com/meshnet/meshnet/internal/shaping"
)

func TestDistTablesShape(t *testing.T) {
	for _, d := range []shaping.Distribution{shaping.DistributionNone, shaping.DistributionUniform, shaping.DistributionNormal, shaping.DistributionPareto, shaping.DistributionParetoNormal} {
		tab := distTable(d)
		if len(tab) != distTableSize {
			t.Errorf("%q: %d entries, want %d", d, len(tab), distTableSize)
		}
		if !slices.IsSorted(tab) {
			t.Errorf("%q: not monotonic", d)
		}
	}
}

func TestUniformTable(t *testing.T) {
	tab := uniformTable()
	if tab[0] != -distScale || tab[len(tab)-1] != distScale-4 {
		t.Errorf("spans %d..%d, want -8192..8188", tab[0], tab[len(tab)-1])
	}
	if m := mean(tab); math.Abs(m) > 3 {
		t.Errorf("mean %v", m)
	}
}

func TestNormalTable(t *testing.T) {
	tab := normalTable()
	for i := range tab {
		if tab[i] != -tab[len(tab)-1-i] {
			t.Fatalf("not symmetric: [%d] = %d, [%d] = %d", i, tab[i], len(tab)-1-i, tab[len(tab)-1-i])
		}
	}
	// Quantiles of the standard normal from printed tables, not from erf.
	for _, q := range []struct{ p, z float64 }{
		{0.5, 0}, {0.8413447, 1}, {0.9772499, 2}, {0.975, 1.959964}, {0.025, -1.959964}, {0.9986501, 3},
	} {
		i := int(math.Round(q.p*distTableSize - 0.5))
		got := float64(tab[i]) / distScale
		// one table step around p moves z by at most 1/size / pdf(z)
		tol := 1.0/distTableSize/(math.Exp(-q.z*q.z/2)/math.Sqrt(2*math.Pi)) + 1.0/distScale
		if math.Abs(got-q.z) > tol {
			t.Errorf("quantile %v: %v, want %v +/- %v", q.p, got, q.z, tol)
		}
	}
	if sd := stddev(tab) / distScale; math.Abs(sd-1) > 0.01 {
		t.Errorf("standard deviation %v, want 1", sd)
	}
}

func TestParetoTable(t *testing.T) {
	tab := paretoTable()
	// x_m = 1, alpha = 3: the smallest value is 1, minus the mean 1.5,
	// times 4/3; the median is 2^(1/3).
	for _, q := range []struct {
		i    int
		want float64
	}{
		{0, (1 - 1.5) * 4 / 3},
		{distTableSize / 2, (math.Cbrt(2) - 1.5) * 4 / 3},
		{distTableSize * 7 / 8, (2 - 1.5) * 4 / 3}, // (1/8)^(-1/3) = 2
	} {
		if got := float64(tab[q.i]) / distScale; math.Abs(got-q.want) > 1.0/distScale {
			t.Errorf("[%d] = %v, want %v", q.i, got, q.want)
		}
	}
	if tab[len(tab)-1] != math.MaxInt16 {
		t.Errorf("tail %d, want clamped to %d", tab[len(tab)-1], math.MaxInt16)
	}
}

func TestParetoNormalTable(t *testing.T) {
	n, p, pn := normalTable(), paretoTable(), paretoNormalTable()
	for _, i := range []int{0, 1000, 2048, 4095} {
		if want := (int32(n[i]) + 3*int32(p[i])) / 4; int32(pn[i]) != want {
			t.Errorf("[%d] = %d, want %d", i, pn[i], want)
		}
	}
}

func mean(t []int16) float64 {
	var sum float64
	for _, v := range t {
		sum += float64(v)
	}
	return sum / float64(len(t))
}

func stddev(t []int16) float64 {
	m, sum := mean(t), 0.0
	for _, v := range t {
		sum += (float64(v) - m) * (float64(v) - m)
	}
	return math.Sqrt(sum / float64(len(t)))
}
