//go:build kernel

package teardown

import (
	"crypto/rand"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestKernelSweepNetnsTakesOnlyThePrefix: what a killed lab left (its
// namespaces) goes; another lab's namespace stays.
func TestKernelSweepNetnsTakesOnlyThePrefix(t *testing.T) {
	prefix := "teardown-" + strings.ToLower(rand.Text()[:6]) + "-"
	other := "teardown-other-" + strings.ToLower(rand.Text()[:6])
	var s Stack
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	var mine []string
	for _, name := range []string{"a", "b"} {
		path, err := AddNetns(&Stack{}, prefix+name) // left behind, as by a kill
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("namespace %s: %v", path, err)
		}
		mine = append(mine, "netns "+prefix+name)
	}
	if _, err := AddNetns(&s, other); err != nil {
		t.Fatal(err)
	}
	removed, err := SweepNetns(prefix)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, mine) {
		t.Errorf("swept %v, want %v", removed, mine)
	}
	if left := Netns(prefix); len(left) > 0 {
		t.Errorf("left %v", left)
	}
	if left := Netns(other); len(left) != 1 {
		t.Errorf("another lab's namespace: %v, want it kept", left)
	}
	if _, err := SweepNetns(""); err == nil {
		t.Error("SweepNetns(\"\") swept; want it refused")
	}
}
