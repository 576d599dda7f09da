package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one `go test -json` event, as cmd/test2json writes it.
type event struct {
	Time        time.Time `json:",omitzero"`
	Action      string
	Package     string   `json:",omitempty"`
	Test        string   `json:",omitempty"`
	Elapsed     *float64 `json:",omitempty"`
	Output      string   `json:",omitempty"`
	FailedBuild string   `json:",omitempty"`
}

// reporter writes events, one JSON object a line.
type reporter struct {
	mu sync.Mutex
	w  io.Writer
}

func newReporter(w io.Writer) *reporter { return &reporter{w: w} }

func (r *reporter) emit(e event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	b, _ := json.Marshal(e)
	r.raw(b)
}

func (r *reporter) raw(line []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Write(append(line, '\n'))
}

func (r *reporter) output(pkg, test, text string) {
	r.emit(event{Action: "output", Package: pkg, Test: test, Output: text})
}

// buildFailed reports a package whose test binary did not build, as go test does.
func (r *reporter) buildFailed(pkg string, err error) {
	r.emit(event{Action: "start", Package: pkg})
	for _, line := range strings.SplitAfter(strings.TrimRight(err.Error(), "\n")+"\n", "\n") {
		if line != "" {
			r.output(pkg, "", line)
		}
	}
	r.output(pkg, "", fmt.Sprintf("FAIL\t%s [build failed]\n", pkg))
	r.emit(event{Action: "fail", Package: pkg, Elapsed: new(float64), FailedBuild: pkg})
}

// converter turns test binaries' -test.v=test2json output into events with
// the toolchain's own converter, `go tool test2json`.
type converter struct {
	test2json string
	rep       *reporter
}

func newConverter(ctx context.Context, rep *reporter) (*converter, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "-n", "test2json").Output()
	if err != nil {
		return nil, fmt.Errorf("find go tool test2json: %w", err)
	}
	return &converter{test2json: strings.TrimSpace(string(out)), rep: rep}, nil
}

// session converts one test binary's output.
type session struct {
	pkg     *testPackage
	rep     *reporter
	start   time.Time
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	running map[string]bool // tests started and not ended
	ended   map[string]bool
	result  *event // the package's own pass/fail, held until the exit status is known
	raw     []byte
}

func (c *converter) start(p *testPackage) (*session, error) {
	s := &session{
		pkg: p, rep: c.rep, start: time.Now(), done: make(chan struct{}),
		running: map[string]bool{}, ended: map[string]bool{},
	}
	// test2json itself reports the package's start.
	s.cmd = exec.Command(c.test2json, "-t", "-p", p.ImportPath)
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start test2json: %w", err)
	}
	go s.forward(stdout)
	return s, nil
}

// forward passes test2json's events on, noting which tests ended.
func (s *session) forward(r io.Reader) {
	defer close(s.done)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if line = []byte(strings.TrimRight(string(line), "\n")); len(line) > 0 {
			var e event
			if json.Unmarshal(line, &e) == nil {
				s.note(e, line)
			} else {
				s.rep.raw(line)
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *session) note(e event, line []byte) {
	switch {
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		s.result, s.raw = &e, line
		return
	case e.Test != "" && e.Action == "run":
		s.running[e.Test] = true
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		delete(s.running, e.Test)
		s.ended[e.Test] = true
	}
	s.rep.raw(line)
}

// write feeds one line of the binary's output.
func (s *session) write(line string) {
	io.WriteString(s.stdin, line+"\n")
}

// finish ends the binary's output. status is its exit status; reason, when
// not empty, says why the binary did not run to its end (the VM failed).
func (s *session) finish(status int, reason string) bool {
	s.stdin.Close()
	<-s.done
	s.cmd.Wait()

	r := s.result
	if r != nil && r.Action == "pass" {
		// test2json reports no end event for a benchmark: a passing binary
		// ran them all.
		for name := range s.running {
			if strings.HasPrefix(name, "Benchmark") {
				delete(s.running, name)
			}
		}
	}
	if reason == "" && status == 0 && r != nil && r.Action != "fail" && len(s.running) == 0 {
		s.rep.output(s.pkg.ImportPath, "", fmt.Sprintf("ok  \t%s\t%.3fs\n", s.pkg.ImportPath, time.Since(s.start).Seconds()))
		s.rep.raw(s.raw)
		return true
	}
	if reason == "" {
		switch {
		case status == 1 && r != nil && r.Action == "fail" && len(s.running) == 0:
			// An ordinary test failure: test2json has said everything.
		case status == 0 && r == nil:
			reason = "test binary exited without reporting PASS or FAIL"
		case status != 0:
			reason = fmt.Sprintf("test binary exited with status %d", status)
		}
	}
	s.failUnended(reason)
	elapsed := time.Since(s.start).Seconds()
	if reason != "" {
		s.rep.output(s.pkg.ImportPath, "", "vmtest: "+reason+"\n")
	}
	s.rep.output(s.pkg.ImportPath, "", fmt.Sprintf("FAIL\t%s\t%.3fs\n", s.pkg.ImportPath, elapsed))
	s.rep.emit(event{Action: "fail", Package: s.pkg.ImportPath, Elapsed: &elapsed})
	return false
}

// failUnended fails, naming reason, every test that started and did not end
// (subtests before their parents) and every listed test that never started.
func (s *session) failUnended(reason string) {
	if reason == "" {
		reason = "test did not finish"
	}
	pkg := s.pkg.ImportPath
	var names []string
	for name := range s.running {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(b, a) })
	for _, name := range s.pkg.tests {
		if !s.running[name] && !s.ended[name] {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if !s.running[name] {
			s.rep.emit(event{Action: "run", Package: pkg, Test: name})
		}
		s.rep.output(pkg, name, fmt.Sprintf("    vmtest: %s: %s\n", name, reason))
		s.rep.emit(event{Action: "fail", Package: pkg, Test: name, Elapsed: new(float64)})
	}
}

// notRun fails a package whose binary the VM never ran.
func (c *converter) notRun(p *testPackage, reason string) {
	s, err := c.start(p)
	if err != nil {
		c.rep.output(p.ImportPath, "", "vmtest: "+reason+"\n")
		c.rep.emit(event{Action: "fail", Package: p.ImportPath, Elapsed: new(float64)})
		return
	}
	s.finish(-1, reason)
}
