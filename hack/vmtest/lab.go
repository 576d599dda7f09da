package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// labPackages are the programs internal/meshnet-lab/lab/labnet runs, and meshnet-lab for
// vmtest -lab; go build names each binary after its package, as
// labnet.PrebuiltEnv expects.
var labPackages = []string{
	"./cmd/meshnet-lab",
	"./cmd/meshnetd",
	"./cmd/meshnet-cni",
	"./cmd/meshnet-controller",
	"github.com/containernetworking/plugins/plugins/main/loopback",
}

// labPrebuiltEnv is labnet.PrebuiltEnv; init.sh sets it to /lab, the
// payload's lab directory.
const labPrebuiltEnv = "MESHNET_LAB_BIN"

// buildLab builds the lab binaries, static, into the payload's lab
// directory. One go build links them in parallel; stripped, they cost
// the initramfs less.
func buildLab(ctx context.Context, root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}, labPackages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(bytes.TrimSpace(out)) > 0 {
			return errors.New(string(out))
		}
		return fmt.Errorf("go build the lab binaries: %w", err)
	}
	return nil
}
