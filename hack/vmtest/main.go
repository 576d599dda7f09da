// Command vmtest runs meshnet's vm test tier: the tests that need a stock
// distro kernel (sch_netem and friends, which the host kernel lacks).
//
// It finds the packages matching the given patterns that have test files
// with the given build tags, builds each as a static test binary, boots them
// in a qemu VM with a Debian cloud kernel (hack/vm/kernel.sh), runs each
// binary there as root and prints the results on stdout as `go test -json`
// events, so that gotestsum and `go tool test2json` consumers count them like
// ordinary tests. The VM also has the lab's binaries ($MESHNET_LAB_BIN) and,
// on a disk, kube-apiserver and etcd from $KUBEBUILDER_ASSETS, kubectl and
// grpcurl, so that tests run the whole stack:
//
//	go run ./hack/vmtest -tags vm ./...
//	go run ./hack/vmtest -tags vm ./... -test.run=^$ -test.bench=BenchmarkVM
//
// Arguments of the form -test.name=value (or -test.boolflag) are passed to
// every test binary, after the defaults -test.v=test2json -test.run=^TestVM. A VM that fails to boot or times out, and a test
// binary that exits with an error, become failure events naming the reason.
// Progress and timings go to $MESHNET_CACHE/vm/last-run.log (and stderr with
// -v: gotestsum counts a raw command's stderr lines as errors); the VM
// console goes to a log file in the run's directory, $MESHNET_CACHE/vm/runs/,
// which is kept when the run fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is what the command line sets.
type config struct {
	tags        string
	patterns    []string
	testArgs    []string
	cache       string
	kernelDir   string
	assets      string
	timeout     time.Duration
	bootTimeout time.Duration
	memMiB      int
	cpus        int
	keep        bool
	verbose     bool
	// lab is a topology file: boot the lab instead of running tests.
	lab string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(2)
	}
	logFile, err := openLog(cfg.cache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(1)
	}
	defer logFile.Close()
	var logw io.Writer = logFile
	if cfg.verbose {
		logw = io.MultiWriter(logFile, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.lab != "" {
		if err := runLab(ctx, log, logw, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "vmtest:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := run(ctx, log, logw, cfg, newReporter(os.Stdout))
	if err != nil {
		log.Error("vm tier cannot run", "err", err)
		fmt.Fprintln(os.Stderr, "vmtest: vm tier cannot run:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("vmtest", flag.ContinueOnError)
	fs.StringVar(&cfg.tags, "tags", "vm", "build tags selecting the tier's test files")
	fs.StringVar(&cfg.cache, "cache", envOr("MESHNET_CACHE", "/var/cache/meshnet"), "cache directory (kernel, initramfs, run logs)")
	fs.StringVar(&cfg.kernelDir, "kernel", "", "kernel directory made by hack/vm/kernel.sh (default: run it)")
	fs.StringVar(&cfg.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory of kube-apiserver and etcd to ship for envtest in the VM")
	// On a cold build cache the build alone takes 7 minutes, and qemu
	// emulates the CPU (no KVM on this machine kind): 10 minutes was too
	// tight for a fresh machine.
	fs.DurationVar(&cfg.timeout, "timeout", 20*time.Minute, "limit for the whole tier: build, boot and tests")
	fs.DurationVar(&cfg.bootTimeout, "boot-timeout", 3*time.Minute, "limit for the VM to boot to its test runner")
	fs.IntVar(&cfg.memMiB, "m", 3072, "VM memory in MiB (kube-apiserver and etcd take about 1.5 GiB)")
	fs.IntVar(&cfg.cpus, "smp", 2, "VM CPUs")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the run directory (payload, console log) after a passing run")
	fs.BoolVar(&cfg.verbose, "v", false, "log progress and timings to stderr too")
	fs.StringVar(&cfg.lab, "lab", "", "instead of tests, run `meshnet-lab up` of this topology file in the VM and give the terminal a shell there")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	// Patterns and -test.* flags may be mixed after the runner's own flags.
	for _, a := range fs.Args() {
		if strings.HasPrefix(a, "-test.") || strings.HasPrefix(a, "--test.") {
			cfg.testArgs = append(cfg.testArgs, "-"+strings.TrimLeft(a, "-"))
			continue
		}
		if strings.HasPrefix(a, "-") {
			return cfg, fmt.Errorf("flag %s after the package patterns: only -test.* flags go there", a)
		}
		cfg.patterns = append(cfg.patterns, a)
	}
	if len(cfg.patterns) == 0 {
		cfg.patterns = []string{"./..."}
	}
	if cfg.tags == "" {
		return cfg, errors.New("-tags must name the tier's build tags")
	}
	return cfg, nil
}

// openLog truncates the progress log, $cache/vm/last-run.log.
func openLog(cache string) (*os.File, error) {
	dir := filepath.Join(cache, "vm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache directory: %w", err)
	}
	return os.Create(filepath.Join(dir, "last-run.log"))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// run runs the tier. It returns an error when the tier cannot start at all
// (bad patterns, no packages, no cache directory); from the builds on, every
// failure is reported as test events and ok is false.
func run(ctx context.Context, log *slog.Logger, logw io.Writer, cfg config, rep *reporter) (ok bool, err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	pkgs, err := findPackages(ctx, cfg.tags, cfg.patterns)
	if err != nil {
		return false, err
	}
	if len(pkgs) == 0 {
		return false, fmt.Errorf("no package matching %s has test files with tags %q", strings.Join(cfg.patterns, " "), cfg.tags)
	}
	log.Info("found packages", "tags", cfg.tags, "count", len(pkgs))

	conv, err := newConverter(ctx, rep)
	if err != nil {
		return false, err
	}
	rd, err := newRunDir(cfg.cache)
	if err != nil {
		return false, err
	}

	root, err := moduleRoot(ctx)
	if err != nil {
		return false, err
	}
	// The lab binaries link while the test binaries build.
	labErr := make(chan error, 1)
	go func() {
		t := time.Now()
		err := buildLab(ctx, root, rd.lab())
		log.Info("built lab binaries", "dir", rd.lab(), "err", err, "took", since(t))
		labErr <- err
	}()

	built := time.Now()
	var runnable []*testPackage
	for _, p := range pkgs {
		if err := p.build(ctx, cfg.tags, rd.testDir(len(runnable))); err != nil {
			rep.buildFailed(p.ImportPath, err)
			continue
		}
		p.listTests(ctx, runPattern(cfg.testArgs), rd.lab())
		runnable = append(runnable, p)
	}
	log.Info("built test binaries", "count", len(runnable), "failed", len(pkgs)-len(runnable), "took", since(built))
	allOK := len(runnable) == len(pkgs)
	if err := <-labErr; err != nil {
		err = fmt.Errorf("build the lab binaries ($MESHNET_LAB_BIN in the VM): %w", err)
		log.Error("vm tier failed", "err", err, "run_dir", rd.path)
		for _, p := range runnable {
			conv.notRun(p, err.Error())
		}
		return false, nil
	}
	if len(runnable) == 0 {
		return false, nil
	}

	vm, err := prepareVM(ctx, log, logw, cfg, rd, runnable)
	if err != nil {
		for _, p := range runnable {
			conv.notRun(p, err.Error())
		}
		log.Error("vm tier failed", "err", err, "run_dir", rd.path)
		return false, nil
	}
	vmOK := vm.run(ctx, log, conv)
	log.Info("vm tier finished", "ok", allOK && vmOK, "took", since(start))
	if allOK && vmOK && !cfg.keep {
		rd.remove()
	} else {
		log.Info("kept run directory", "run_dir", rd.path, "console_log", rd.consoleLog())
	}
	return allOK && vmOK, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
