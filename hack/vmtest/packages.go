package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// defaultRun selects the tier's tests; a -test.run passed through overrides it.
const defaultRun = "^TestVM"

// testPackage is one package with tier test files, and its test binary.
type testPackage struct {
	ImportPath string
	Dir        string
	// binDir holds the binary ("test") and a copy of testdata; it becomes
	// the binary's working directory in the VM, as go test would do.
	binDir string
	// tests are the top-level tests the binary would run, listed on the
	// host, so that a VM failure can fail each of them by name.
	tests []string
}

type listedPackage struct {
	ImportPath   string
	Dir          string
	TestGoFiles  []string
	XTestGoFiles []string
}

// findPackages returns the packages matching patterns that have test files
// only with tags: the test file sets of `go list` with and without them differ.
func findPackages(ctx context.Context, tags string, patterns []string) ([]*testPackage, error) {
	with, err := goList(ctx, tags, patterns)
	if err != nil {
		return nil, err
	}
	without, err := goList(ctx, "", patterns)
	if err != nil {
		return nil, err
	}
	var pkgs []*testPackage
	for _, p := range with {
		q := without[p.ImportPath]
		if slices.Equal(p.TestGoFiles, q.TestGoFiles) && slices.Equal(p.XTestGoFiles, q.XTestGoFiles) {
			continue
		}
		pkgs = append(pkgs, &testPackage{ImportPath: p.ImportPath, Dir: p.Dir})
	}
	slices.SortFunc(pkgs, func(a, b *testPackage) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	return pkgs, nil
}

func goList(ctx context.Context, tags string, patterns []string) (map[string]listedPackage, error) {
	args := []string{"list", "-e", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		pkgs[p.ImportPath] = p
	}
}

// build writes the package's static test binary and testdata into dir,
// and leaves no dir behind when it fails (the next package gets dir).
func (p *testPackage) build(ctx context.Context, tags, dir string) (err error) {
	p.binDir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-tags", tags, "-o", filepath.Join(dir, "test"), p.ImportPath)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(bytes.TrimSpace(out)) > 0 {
			return errors.New(string(out)) // the compiler's messages, as go test shows them
		}
		return fmt.Errorf("go test -c %s: %w", p.ImportPath, err)
	}
	testdata := filepath.Join(p.Dir, "testdata")
	if _, err := os.Stat(testdata); err == nil {
		if err := os.CopyFS(filepath.Join(dir, "testdata"), os.DirFS(testdata)); err != nil {
			return fmt.Errorf("copy %s: %w", testdata, err)
		}
	}
	return nil
}

// listTests asks the binary, on the host, which top-level tests match run.
// It is best effort: without the list a VM failure still fails the package.
// labBin is given as $MESHNET_LAB_BIN, so that a labnet TestMain lists
// without building the lab binaries itself.
func (p *testPackage) listTests(ctx context.Context, run, labBin string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, "test"), "-test.list", run)
	cmd.Dir = p.binDir
	cmd.Env = append(os.Environ(), labPrebuiltEnv+"="+labBin)
	out, err := cmd.Output()
	if err != nil {
		return
	}
	for _, name := range strings.Fields(string(out)) {
		if strings.HasPrefix(name, "Test") {
			p.tests = append(p.tests, name)
		}
	}
}

// runPattern is the -test.run the binaries get: the last one passed, or the tier's.
func runPattern(testArgs []string) string {
	run := defaultRun
	for _, a := range testArgs {
		if v, ok := strings.CutPrefix(a, "-test.run="); ok {
			run = v
		}
	}
	return run
}
