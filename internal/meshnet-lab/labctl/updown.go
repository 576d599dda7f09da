package labctl

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
)

// Up starts `self serve args...` in the background, detached from the
// terminal, and returns the guide once the lab is ready. When the lab fails
// to come up, the error carries the end of its log.
func Up(dir string, self string, args []string, within time.Duration) (string, error) {
	if pid, ok := running(dir); ok {
		return "", fmt.Errorf("a lab is already running (pid %d, %s); remove it first: make lab-down", pid, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	_ = os.Remove(filepath.Join(dir, guideFile))
	logf, err := os.Create(filepath.Join(dir, logFile))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start the lab: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(within)
	for {
		if g, err := os.ReadFile(filepath.Join(dir, guideFile)); err == nil {
			return string(g), nil
		}
		select {
		case err := <-exited:
			return "", fmt.Errorf("the lab exited (%v) before it was ready:\n%s", err, tail(filepath.Join(dir, logFile)))
		case <-deadline:
			return "", fmt.Errorf("the lab was not ready within %v (it keeps starting; make lab-down stops it):\n%s", within, tail(filepath.Join(dir, logFile)))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StopTimeout is how long Down waits for a running lab to stop before it
// kills it: longer than the lab's own stop, which gives its API server
// controlplane.StopTimeout.
const StopTimeout = controlplane.StopTimeout + 30*time.Second

// Down stops a running lab (it removes what it made) and then removes what
// a crashed one left: namespaces, the host's interface, the state
// directory. It returns what it removed.
func Down(dir string, within time.Duration) ([]string, error) {
	var removed []string
	var errs []error
	if pid, ok := running(dir); ok {
		p, _ := os.FindProcess(pid)
		_ = p.Signal(syscall.SIGTERM)
		deadline := time.Now().Add(within)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			_ = p.Signal(syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("the lab (pid %d) did not stop within %v; killed it", pid, within))
		}
		removed = append(removed, fmt.Sprintf("lab process %d", pid))
	}
	swept, err := lab.Sweep(NetnsPrefix)
	removed = append(removed, swept...)
	errs = append(errs, err)
	swept, err = kubecluster.Sweep(dir, NetnsPrefix)
	removed = append(removed, swept...)
	errs = append(errs, err)
	if _, err := os.Stat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "directory "+dir)
		}
	}
	return removed, errors.Join(errs...)
}

// running returns the pid of the lab serving dir, if it is alive.
func running(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid, err == nil && alive(pid)
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

// tail is the end of a log file.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
