package lab

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a lab program (a meshnetd, a controller) running inside a
// node's namespace, logging to a file.
type Process struct {
	Name    string
	LogFile string

	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// startIn starts argv inside the namespace at nsPath, its output appended
// to logFile.
func startIn(name, nsPath, logFile string, argv ...string) (*Process, error) {
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a terminal's ^C reaches the lab, which stops
	// its programs in order, not every program at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogFile: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// State describes how the process ended; nil while it runs.
func (p *Process) State() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Stop sends sig and waits for the process to end, killing it after
// grace. It returns an error if it had to kill. Only the first call acts.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
			err = fmt.Errorf("%s did not stop within %v of %v; killed", p.Name, grace, sig)
		}
	})
	return err
}

// Log is the process's output so far.
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.LogFile)
	return string(data)
}
