package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

const pkg = "example.com/p"

// events runs lines through a session and returns the events it reported
// as "action test" strings, and finish's result.
func events(t *testing.T, p *testPackage, lines []string, status int, reason string) ([]string, string, bool) {
	t.Helper()
	var out bytes.Buffer
	conv, err := newConverter(context.Background(), newReporter(&out))
	if err != nil {
		t.Fatal(err)
	}
	s, err := conv.start(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		s.write(l)
	}
	ok := s.finish(status, reason)
	var got []string
	var output strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		if e.Package != p.ImportPath {
			t.Errorf("event %q: package %q, want %q", line, e.Package, p.ImportPath)
		}
		if e.Action == "output" {
			output.WriteString(e.Output)
			continue
		}
		got = append(got, strings.TrimSpace(e.Action+" "+e.Test))
	}
	return got, output.String(), ok
}

func TestSessionPassesTheBinarysResult(t *testing.T) {
	got, _, ok := events(t, &testPackage{ImportPath: pkg},
		[]string{"=== RUN   TestVMA", "--- PASS: TestVMA (0.00s)", "PASS"}, 0, "")
	want := []string{"start", "run TestVMA", "pass TestVMA", "pass"}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("events = %q, ok = %v; want %q, true", got, ok, want)
	}
}

func TestSessionFailsTestsABinaryDidNotFinish(t *testing.T) {
	got, output, ok := events(t, &testPackage{ImportPath: pkg, tests: []string{"TestVMA", "TestVMB"}},
		[]string{"=== RUN   TestVMA", "panic: boom"}, 2, "")
	want := []string{"start", "run TestVMA", "fail TestVMA", "run TestVMB", "fail TestVMB", "fail"}
	if ok || !slices.Equal(got, want) {
		t.Errorf("events = %q, ok = %v; want %q, false", got, ok, want)
	}
	if !strings.Contains(output, "test binary exited with status 2") {
		t.Errorf("output %q does not name the exit status", output)
	}
}

func TestSessionFailsAPassThatExitedNonZero(t *testing.T) {
	got, _, ok := events(t, &testPackage{ImportPath: pkg},
		[]string{"=== RUN   TestVMA", "--- PASS: TestVMA (0.00s)", "PASS"}, 3, "")
	want := []string{"start", "run TestVMA", "pass TestVMA", "fail"}
	if ok || !slices.Equal(got, want) {
		t.Errorf("events = %q, ok = %v; want %q, false", got, ok, want)
	}
}

func TestSessionNamesTheVMsFailure(t *testing.T) {
	got, output, ok := events(t, &testPackage{ImportPath: pkg, tests: []string{"TestVMA"}}, nil, -1, "VM did not boot within 1s")
	want := []string{"start", "run TestVMA", "fail TestVMA", "fail"}
	if ok || !slices.Equal(got, want) {
		t.Errorf("events = %q, ok = %v; want %q, false", got, ok, want)
	}
	if !strings.Contains(output, "VM did not boot within 1s") {
		t.Errorf("output %q does not name the reason", output)
	}
}

func TestParseFlagsSplitsPatternsAndTestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-tags", "vm", "./a/...", "-test.bench=.", "./b", "-test.run=^$"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"./a/...", "./b"}; !slices.Equal(cfg.patterns, want) {
		t.Errorf("patterns = %q, want %q", cfg.patterns, want)
	}
	if want := []string{"-test.bench=.", "-test.run=^$"}; !slices.Equal(cfg.testArgs, want) {
		t.Errorf("test args = %q, want %q", cfg.testArgs, want)
	}
	if got := runPattern(cfg.testArgs); got != "^$" {
		t.Errorf("run pattern = %q, want the last -test.run", got)
	}
	if _, err := parseFlags([]string{"./a", "-timeout", "1m"}); err == nil {
		t.Error("a runner flag after the patterns was accepted")
	}
}
