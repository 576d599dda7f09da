// Package teardown is what the local lab and the node cluster share to
// leave the machine as they found it: a stack of undo steps that Close runs
// last first, network namespaces named with a lab's prefix, and the sweep
// of those a lab killed before its Close left behind.
package teardown

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Stack holds the steps that undo what a lab made. The zero value is ready
// to use; it is safe for concurrent use.
type Stack struct {
	mu    sync.Mutex
	steps []func() error
}

// Push adds a step; Close runs it before the steps pushed earlier.
func (s *Stack) Push(step func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, step)
}

// Close runs every step, last pushed first, and returns every error met
// after trying them all. The stack is empty afterwards.
func (s *Stack) Close() error {
	s.mu.Lock()
	steps := s.steps
	s.steps = nil
	s.mu.Unlock()
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NetnsDir is where iproute2 (and CNI runtimes) keep named network
// namespaces.
const NetnsDir = "/run/netns"

// AddNetns creates the named network namespace, pushes its deletion onto
// s (which takes every interface inside along) and returns its path.
func AddNetns(s *Stack, name string) (string, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	s.Push(func() error { return DeleteNetns(name) })
	return filepath.Join(NetnsDir, name), nil
}

// DeleteNetns deletes the named network namespace.
func DeleteNetns(name string) error {
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Netns lists the named network namespaces whose names start with prefix.
func Netns(prefix string) []string {
	entries, _ := os.ReadDir(NetnsDir)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// SweepNetns deletes the named network namespaces whose names start with
// prefix, and returns what it removed ("netns NAME") and every error.
func SweepNetns(prefix string) ([]string, error) {
	if prefix == "" {
		return nil, fmt.Errorf("sweep: an empty namespace prefix would match every namespace")
	}
	var removed []string
	var errs []error
	for _, name := range Netns(prefix) {
		if err := DeleteNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "netns "+name)
	}
	return removed, errors.Join(errs...)
}
