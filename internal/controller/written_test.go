package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestStatusOfTheSameGenerationWaitsForTheInterval: a status that says the
// generation last written waits for the rest of the interval; one of a new
// generation (the answer to an edit) and the first of a Topology do not.
func TestStatusOfTheSameGenerationWaitsForTheInterval(t *testing.T) {
	var w writtenStatuses
	key := types.NamespacedName{Namespace: "lab", Name: "r1"}
	gen := func(g int64) v1beta1.TopologyStatus { return v1beta1.TopologyStatus{ObservedGeneration: g} }
	if d := w.due(key, gen(1), time.Second); d != 0 {
		t.Errorf("first status waits %v", d)
	}
	w.store(key, gen(1))
	if d := w.due(key, gen(1), time.Second); d <= 900*time.Millisecond || d > time.Second {
		t.Errorf("same generation right after a write waits %v, want about 1s", d)
	}
	if d := w.due(key, gen(2), time.Second); d != 0 {
		t.Errorf("a new generation waits %v", d)
	}
	if d := w.due(key, gen(1), 0); d != 0 {
		t.Errorf("no interval waits %v", d)
	}
	if d := w.due(types.NamespacedName{Namespace: "lab", Name: "r2"}, gen(1), time.Second); d != 0 {
		t.Errorf("another Topology waits %v", d)
	}
}
