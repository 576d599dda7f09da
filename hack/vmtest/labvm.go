package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
)

// runLab boots the VM with the lab of cfg.lab instead of tests: init runs
// `meshnet-lab up` there, prints its guide and gives this terminal a shell
// in the VM, whose stock kernel shapes links (the host's may not). The VM,
// and the lab with it, ends when that shell runs poweroff -f.
func runLab(ctx context.Context, log *slog.Logger, logw io.Writer, cfg config) error {
	if cfg.assets == "" {
		return fmt.Errorf("-lab needs kube-apiserver and etcd: set KUBEBUILDER_ASSETS (hack/controlplane.sh prints it) or -assets")
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	rd, err := newRunDir(cfg.cache)
	if err != nil {
		return err
	}
	defer rd.remove()
	if err := buildLab(ctx, root, rd.lab()); err != nil {
		return fmt.Errorf("build the lab binaries: %w", err)
	}
	tests := filepath.Join(rd.payload(), "tests")
	if err := os.MkdirAll(tests, 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(tests, "lab.yml"), cfg.lab); err != nil {
		return fmt.Errorf("topology file: %w", err)
	}
	v, err := prepareVM(ctx, log, logw, cfg, rd, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "vmtest: booting the VM (%d CPUs, %d MiB); the lab's guide follows\n", cfg.cpus, cfg.memMiB)
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", v.qemuArgs()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("qemu: %w (console log: %s)", err, rd.consoleLog())
	}
	return nil
}
