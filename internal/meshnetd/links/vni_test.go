package links

import (
	"fmt"
	"math"
	"testing"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func TestVNISameFromBothEnds(t *testing.T) {
	a := VNI("lab", "r1", "r2", 7)
	b := VNI("lab", "r2", "r1", 7)
	if a != b {
		t.Fatalf("VNI(r1,r2)=%d, VNI(r2,r1)=%d: ends disagree", a, b)
	}
	if a == 0 || a > v1beta1.MaxVNI {
		t.Fatalf("VNI %d outside 1..%d", a, v1beta1.MaxVNI)
	}
}

func TestVNIDependsOnEveryInput(t *testing.T) {
	base := VNI("lab", "r1", "r2", 1)
	for name, v := range map[string]uint32{
		"namespace": VNI("lab2", "r1", "r2", 1),
		"pod":       VNI("lab", "r1", "r3", 1),
		"uid":       VNI("lab", "r1", "r2", 2),
		"boundary":  VNI("la", "br1", "r2", 1), // fields must not run together
	} {
		if v == base {
			t.Errorf("changing the %s kept VNI %d", name, v)
		}
	}
}

// meshnet-cni's 5000+uid collided when two namespaces reused uids over the
// same nodes; here the same uids in other namespaces get other VNIs.
func TestVNIReusedUIDsInOtherNamespaces(t *testing.T) {
	seen := map[uint32]string{}
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		for uid := 1; uid <= 20; uid++ {
			key := fmt.Sprintf("%s/%d", ns, uid)
			v := VNI(ns, "r1", "r2", uid)
			if other, dup := seen[v]; dup {
				t.Fatalf("%s and %s share VNI %d", key, other, v)
			}
			seen[v] = key
		}
	}
}

// Over 10k links (far more than one node carries) the collisions must be
// what an even spread over 2^24-1 values gives: n²/2m ≈ 3, and at most a
// few times that; and the values must fill the range evenly.
func TestVNISpread(t *testing.T) {
	const n = 10000
	seen := make(map[uint32]bool, n)
	collisions := 0
	var buckets [16]int
	for i := range n {
		v := VNI(fmt.Sprintf("ns%d", i%37), fmt.Sprintf("pod-%d", i), fmt.Sprintf("pod-%d", i+1), i%64)
		if v == 0 || v > v1beta1.MaxVNI {
			t.Fatalf("VNI %d outside 1..%d", v, v1beta1.MaxVNI)
		}
		if seen[v] {
			collisions++
		}
		seen[v] = true
		buckets[v>>20]++
	}
	expected := float64(n) * float64(n-1) / 2 / v1beta1.MaxVNI
	t.Logf("%d collisions among %d links (birthday bound %.1f)", collisions, n, expected)
	if float64(collisions) > 4*expected {
		t.Errorf("%d collisions among %d links, an even spread gives about %.1f", collisions, n, expected)
	}
	// Chi-square over 16 equal buckets, 15 degrees of freedom: 37.7 is p=0.001.
	chi := 0.0
	want := float64(n) / 16
	for _, c := range buckets {
		chi += math.Pow(float64(c)-want, 2) / want
	}
	if chi > 37.7 {
		t.Errorf("uneven spread over the VNI range: chi-square %.1f over 16 buckets %v", chi, buckets)
	}
}

// Within a realistic node (250 links) there is no collision for these names.
func TestVNINoCollisionAtNodeScale(t *testing.T) {
	seen := map[uint32]int{}
	for uid := range 250 {
		v := VNI("lab", fmt.Sprintf("r%d", uid/4), fmt.Sprintf("r%d", uid/4+1), uid)
		if j, dup := seen[v]; dup {
			t.Fatalf("uids %d and %d share VNI %d", j, uid, v)
		}
		seen[v] = uid
	}
}
