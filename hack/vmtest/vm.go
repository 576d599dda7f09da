package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// vm is a prepared VM: kernel, initramfs and the packages it will run.
type vm struct {
	cfg    config
	rd     *runDir
	kernel kernel
	disk   string // ext4 image attached read-only, "" for none
	marker string
	pkgs   []*testPackage
}

func prepareVM(ctx context.Context, log *slog.Logger, logw io.Writer, cfg config, rd *runDir, pkgs []*testPackage) (*vm, error) {
	t := time.Now()
	k, err := fetchKernel(ctx, cfg.cache, cfg.kernelDir, logw)
	if err != nil {
		return nil, err
	}
	log.Info("kernel ready", "release", k.release, "dir", k.dir, "took", since(t))

	t = time.Now()
	disk, err := diskImage(ctx, log, logw, cfg.cache, cfg.assets)
	if err != nil {
		return nil, fmt.Errorf("build disk image: %w", err)
	}
	if cfg.assets == "" {
		log.Warn("KUBEBUILDER_ASSETS is not set: the VM has no kube-apiserver, tests that start one fail")
	}
	log.Info("disk ready", "image", disk, "took", since(t))

	t = time.Now()
	base, err := baseImage(ctx, cfg.cache, k)
	if err != nil {
		return nil, fmt.Errorf("build base initramfs: %w", err)
	}
	// The marker frames the runner's messages among the tests' output; a
	// random part keeps test output from forging them.
	marker := "@@vmtest-" + rand.Text()[:12]
	testArgs := append([]string{"-test.v=test2json", "-test.run=" + defaultRun, "-test.timeout=" + binaryTimeout(cfg.timeout).String()}, cfg.testArgs...)
	if err := payloadImage(ctx, rd, base, marker, testArgs, disk != ""); err != nil {
		return nil, fmt.Errorf("build initramfs: %w", err)
	}
	st, err := os.Stat(rd.initrd())
	if err != nil {
		return nil, err
	}
	log.Info("initramfs ready", "base", base, "bytes", st.Size(), "took", since(t))
	return &vm{cfg: cfg, rd: rd, kernel: k, disk: disk, marker: marker, pkgs: pkgs}, nil
}

// binaryTimeout makes a hung test panic with its stacks before the VM is
// killed, leaving time to boot and report.
func binaryTimeout(tier time.Duration) time.Duration {
	return max(tier-2*time.Minute, tier/2)
}

// qemuArgs boot the VM with ttyS1 on qemu's stdio.
func (v *vm) qemuArgs() []string {
	args := []string{
		"-accel", "tcg,thread=multi", // KVM guests hang on this machine kind
		"-smp", strconv.Itoa(v.cfg.cpus), "-m", strconv.Itoa(v.cfg.memMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", v.kernel.vmlinuz(), "-initrd", v.rd.initrd(),
		"-append", "console=ttyS0 panic=-1 quiet",
		"-serial", "file:" + v.rd.consoleLog(), // ttyS0: kernel console
		"-serial", "stdio", // ttyS1: the runner's messages and test output
	}
	if v.disk != "" {
		// Read-only: runs share the cached image. /dev/vda in the VM.
		args = append(args, "-drive", "file="+v.disk+",if=virtio,format=raw,readonly=on")
	}
	return args
}

// run boots the VM and reports every package; it returns whether all passed.
func (v *vm) run(ctx context.Context, log *slog.Logger, conv *converter) bool {
	tier := ctx
	ctx, cancel := context.WithCancel(tier)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", v.qemuArgs()...)
	var qemuErr bytes.Buffer
	cmd.Stderr = &qemuErr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return v.failAll(conv, err.Error())
	}
	boot := time.Now()
	if err := cmd.Start(); err != nil {
		return v.failAll(conv, fmt.Sprintf("start qemu: %v", err))
	}
	log.Info("vm started", "cpus", v.cfg.cpus, "mem_mib", v.cfg.memMiB, "console_log", v.rd.consoleLog())

	var booted, bootTimedOut atomic.Bool
	bootTimer := time.AfterFunc(v.cfg.bootTimeout, func() {
		if !booted.Load() {
			bootTimedOut.Store(true)
			cancel()
		}
	})
	defer bootTimer.Stop()

	st := &stream{v: v, log: log, conv: conv, booted: &booted, bootStart: boot}
	st.read(stdout)
	waitErr := cmd.Wait()
	if msg := strings.TrimSpace(qemuErr.String()); msg != "" {
		log.Warn("qemu stderr", "output", msg)
	}

	reason := st.fatal
	switch {
	case reason != "":
	case bootTimedOut.Load():
		reason = fmt.Sprintf("VM did not boot within %s", v.cfg.bootTimeout)
	case errors.Is(tier.Err(), context.DeadlineExceeded):
		reason = fmt.Sprintf("VM killed: the tier took longer than %s", v.cfg.timeout)
	case tier.Err() != nil:
		reason = fmt.Sprintf("VM killed: %v", context.Cause(tier))
	case !st.done:
		reason = fmt.Sprintf("VM exited before the tests finished (qemu: %v: %s)", waitErr, strings.TrimSpace(qemuErr.String()))
	}
	if reason != "" {
		reason += "; console log: " + v.rd.consoleLog()
		tail(log, v.rd.consoleLog())
	}
	ok := st.failRest(reason) && reason == ""
	log.Info("vm stopped", "took", since(boot))
	return ok
}

// failAll fails every package with reason.
func (v *vm) failAll(conv *converter, reason string) bool {
	for _, p := range v.pkgs {
		conv.notRun(p, reason)
	}
	return false
}

// stream follows the VM's report port.
type stream struct {
	v         *vm
	log       *slog.Logger
	conv      *converter
	booted    *atomic.Bool
	bootStart time.Time
	cur       *session
	next      int // packages before next have been reported
	ok        bool
	done      bool
	fatal     string
}

func (s *stream) read(r io.Reader) {
	s.ok = true
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line != "" || err == nil {
			s.line(line)
		}
		if err != nil {
			return
		}
	}
}

func (s *stream) line(line string) {
	i := strings.Index(line, s.v.marker+" ")
	if i < 0 {
		if s.cur != nil {
			s.cur.write(line)
		} else if line != "" {
			s.log.Warn("vm output outside a test binary", "line", line)
		}
		return
	}
	if i > 0 && s.cur != nil {
		s.cur.write(line[:i]) // the binary's last line had no newline
	}
	f := strings.Fields(line[i+len(s.v.marker)+1:])
	if len(f) == 0 {
		return
	}
	switch f[0] {
	case "boot":
		s.booted.Store(true)
		s.log.Info("vm booted", "took", since(s.bootStart), "guest_uptime_s", strings.Join(f[1:], " "))
	case "fatal":
		s.fatal = "VM setup failed: " + strings.Join(f[1:], " ")
	case "start":
		n, err := strconv.Atoi(f[1])
		if err != nil || n != s.next || n >= len(s.v.pkgs) {
			s.fatal = "VM runner out of step: " + line[i:]
			return
		}
		sess, err := s.conv.start(s.v.pkgs[n])
		if err != nil {
			s.fatal = err.Error()
			return
		}
		s.cur, s.next = sess, n+1
	case "exit":
		if s.cur == nil || len(f) < 3 {
			return
		}
		status, err := strconv.Atoi(f[2])
		if err != nil {
			status = -1
		}
		s.ok = s.cur.finish(status, "") && s.ok
		s.cur = nil
	case "done":
		s.done = true
	}
}

// failRest ends the binary that was running and fails those never started.
func (s *stream) failRest(reason string) bool {
	if reason == "" && (s.cur != nil || s.next < len(s.v.pkgs)) {
		reason = "VM stopped before the test binary finished"
	}
	if s.cur != nil {
		s.cur.finish(-1, reason)
		s.cur = nil
		s.ok = false
	}
	for ; s.next < len(s.v.pkgs); s.next++ {
		s.conv.notRun(s.v.pkgs[s.next], reason)
		s.ok = false
	}
	return s.ok
}

// tail copies the end of the console log to the log, for a failed VM.
func tail(log *slog.Logger, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for _, l := range lines[max(0, len(lines)-20):] {
		if l = strings.TrimRight(l, "\r"); l != "" {
			log.Error("vm console", "line", l)
		}
	}
}
