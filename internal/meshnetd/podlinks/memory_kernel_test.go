//go:build kernel

package podlinks_test

import (
	"testing"

	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

// TestKernelWidePodPeakMemory wires two pods on two nodes joined by 1,024
// VXLAN links, both ADDs at once, then deletes both at once, and checks
// that neither meshnetd's resident memory peaked above 128 MiB: a meshnetd must hold memory for
// the links it wires, not for their square. Each of a pod's far-end calls,
// all n of them in flight at once, held a copy of the pod's whole Topology
// (348 and 305 MiB), and then their goroutines and netlink buffers did
// (140 and 200 MiB).
func TestKernelWidePodPeakMemory(t *testing.T) {
	const (
		n       = 1024
		maxPeak = 128 << 20
	)
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	r1, r2 := widePair(t, lab, a, b, "lab", n)
	r := &ring{namespace: "lab", pods: []*labnet.Pod{r1, r2}}
	r.all(t, "ADD")
	for _, p := range r.pods {
		if names := linkNames(t, p); len(names) != n+1 {
			t.Fatalf("pod %s has %d interfaces, want lo and %d links", p.Name, len(names), n)
		}
	}
	for _, node := range []*labnet.Node{a, b} {
		peak, err := node.PeakRSS()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("meshnetd on %s peaked at %d MiB wiring %d VXLAN links", node.Name, peak>>20, n)
		if peak > maxPeak {
			t.Errorf("meshnetd on %s peaked at %d MiB wiring %d VXLAN links, want at most %d MiB", node.Name, peak>>20, n, maxPeak>>20)
		}
	}
	// Both pods deleted at once: each node removes its ends and asks the
	// other for the far ones.
	r.all(t, "DEL")
	for _, p := range r.pods {
		if names := linkNames(t, p); len(names) != 1 {
			t.Errorf("pod %s has %d interfaces after DEL, want lo alone", p.Name, len(names))
		}
	}
	for _, node := range []*labnet.Node{a, b} {
		peak, err := node.PeakRSS()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("meshnetd on %s peaked at %d MiB wiring and deleting %d VXLAN links", node.Name, peak>>20, n)
		if peak > maxPeak {
			t.Errorf("meshnetd on %s peaked at %d MiB wiring and deleting %d VXLAN links, want at most %d MiB", node.Name, peak>>20, n, maxPeak>>20)
		}
	}
}
