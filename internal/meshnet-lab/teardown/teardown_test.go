package teardown

import (
	"errors"
	"slices"
	"testing"
)

func TestStackUndoesLastFirstAndTriesEveryStep(t *testing.T) {
	var s Stack
	var ran []int
	first, third := errors.New("first"), errors.New("third")
	s.Push(func() error { ran = append(ran, 1); return first })
	s.Push(func() error { ran = append(ran, 2); return nil })
	s.Push(func() error { ran = append(ran, 3); return third })
	err := s.Close()
	if want := []int{3, 2, 1}; !slices.Equal(ran, want) {
		t.Errorf("steps ran %v, want %v", ran, want)
	}
	if !errors.Is(err, first) || !errors.Is(err, third) {
		t.Errorf("Close: %v, want both steps' errors", err)
	}
	if err := s.Close(); err != nil || len(ran) != 3 {
		t.Errorf("second Close: %v, steps ran %v; want nothing run again", err, ran)
	}
}
