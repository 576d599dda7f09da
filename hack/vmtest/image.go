package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// initScript is the VM's /init.
//
//go:embed init.sh
var initScript []byte

// baseLayout names the layout of the base image; change it when the code
// that lays the image out changes, so that cached images are rebuilt.
const baseLayout = "base-v2"

// hostTools are copied into the VM with their shared libraries: busybox's
// ip and tc lack most of what tests shell out for (netns exec, netem, ...),
// and busybox's nsenter runs its own applets for the commands it is given
// (ip would be busybox's), where util-linux's runs the ones in PATH.
// util-linux's setsid gives the lab's shell (vmtest -lab) a controlling
// terminal, so that ^C reaches what it runs; its unshare, unlike busybox's,
// kills a container's init with it (--kill-child: the FRR image's test).
var hostTools = []string{"/usr/sbin/ip", "/usr/sbin/tc", "/usr/bin/ping", "/usr/bin/nsenter", "/usr/bin/setsid", "/usr/bin/unshare", hostShell}

// hostShell is the VM's /bin/sh. Busybox's sh runs its own applets before
// those in PATH, so `sh -c "ip ..."` would get busybox's ip; dash does not.
const hostShell = "/bin/dash"

// hostData are the data directories iproute2 reads (tc's netem
// distribution tables, ip's name tables), copied when they exist.
var hostData = []string{"/usr/lib/x86_64-linux-gnu/tc", "/usr/lib/tc", "/etc/iproute2", "/usr/share/iproute2"}

// runDir is one run's working directory under $MESHNET_CACHE/vm/runs: the
// payload tree, the initramfs and the console log.
type runDir struct {
	path string
}

// keepRuns is how long the directories of failed runs are kept.
const keepRuns = 7 * 24 * time.Hour

func newRunDir(cache string) (*runDir, error) {
	runs := filepath.Join(cache, "vm", "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(runs, "run-*"))
	for _, dir := range old {
		if st, err := os.Stat(dir); err == nil && time.Since(st.ModTime()) > keepRuns {
			os.RemoveAll(dir)
		}
	}
	dir, err := os.MkdirTemp(runs, "run-")
	if err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	return &runDir{path: dir}, nil
}

func (r *runDir) payload() string    { return filepath.Join(r.path, "payload") }
func (r *runDir) initrd() string     { return filepath.Join(r.path, "initrd.img") }
func (r *runDir) consoleLog() string { return filepath.Join(r.path, "console.log") }
func (r *runDir) lab() string        { return filepath.Join(r.payload(), "lab") }
func (r *runDir) remove()            { os.RemoveAll(r.path) }

// testDir is the n-th binary's directory, /tests/NNN in the VM; init runs
// them in name order.
func (r *runDir) testDir(n int) string {
	return filepath.Join(r.payload(), "tests", fmt.Sprintf("%03d", n))
}

// kernel is a directory made by hack/vm/kernel.sh.
type kernel struct {
	dir     string
	release string
}

func (k kernel) vmlinuz() string { return filepath.Join(k.dir, "vmlinuz") }

// fetchKernel runs hack/vm/kernel.sh (cached by version) unless dir is
// given. The script's messages go to logw, and into the error if it fails.
func fetchKernel(ctx context.Context, cache, dir string, logw io.Writer) (kernel, error) {
	if dir == "" {
		root, err := moduleRoot(ctx)
		if err != nil {
			return kernel{}, err
		}
		script := filepath.Join(root, "hack", "vm", "kernel.sh")
		cmd := exec.CommandContext(ctx, script)
		cmd.Env = append(os.Environ(), "MESHNET_CACHE="+cache)
		var stderr bytes.Buffer
		cmd.Stderr = io.MultiWriter(logw, &stderr)
		out, err := cmd.Output()
		if err != nil {
			return kernel{}, fmt.Errorf("fetch kernel with %s: %w: %s", script, err, strings.TrimSpace(stderr.String()))
		}
		dir = strings.TrimSpace(string(out))
	}
	release, err := os.ReadFile(filepath.Join(dir, "release"))
	if err != nil {
		return kernel{}, fmt.Errorf("kernel directory %s: %w", dir, err)
	}
	return kernel{dir: dir, release: strings.TrimSpace(string(release))}, nil
}

// baseImage returns the cached initramfs holding everything but the tests:
// busybox, the host tools with their libraries, and the kernel's modules.
// It is keyed by the kernel and by the host files it copies.
func baseImage(ctx context.Context, cache string, k kernel) (string, error) {
	files, err := baseFiles(ctx, k)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintln(h, baseLayout, k.dir)
	for _, f := range files {
		st, err := os.Stat(f.src)
		if err != nil {
			return "", err
		}
		fmt.Fprintln(h, f.dst, f.src, st.Size(), st.ModTime().UnixNano(), st.Mode())
	}
	dir := filepath.Join(cache, "vm", "initramfs")
	image := filepath.Join(dir, "base-"+hex.EncodeToString(h.Sum(nil))[:16]+".cpio.gz")
	if _, err := os.Stat(image); err == nil {
		return image, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tree, err := os.MkdirTemp(dir, ".base-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "run", "tmp", "root", "etc", "var"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Symlink("../run", filepath.Join(tree, "var", "run")); err != nil {
		return "", err
	}
	for _, f := range files {
		if err := copyFile(filepath.Join(tree, f.dst), f.src); err != nil {
			return "", err
		}
	}
	applets, err := exec.CommandContext(ctx, "/bin/busybox", "--list").Output()
	if err != nil {
		return "", fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" || a == "sh" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(tree, "bin", a)); err != nil {
			return "", err
		}
	}
	if err := os.Symlink(filepath.Base(hostShell), filepath.Join(tree, "bin", "sh")); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", image, os.Getpid()) // runs may race to build it
	if err := packCPIO(ctx, tmp, tree, true); err != nil {
		return "", err
	}
	return image, os.Rename(tmp, image)
}

// file is one file of an image: src on the host, dst relative to the root.
type file struct {
	dst, src string
	// tree marks a directory copied whole (modes, owners and links kept),
	// whose name is the key of its content.
	tree bool
}

func baseFiles(ctx context.Context, k kernel) ([]file, error) {
	files := []file{{dst: "bin/busybox", src: "/bin/busybox"}}
	seen := map[string]bool{}
	for _, tool := range append([]string{"/bin/busybox"}, hostTools...) {
		if tool != "/bin/busybox" {
			files = append(files, file{dst: strings.TrimPrefix(tool, "/"), src: tool})
		}
		libs, err := sharedLibraries(ctx, tool)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if !seen[lib] {
				seen[lib] = true
				files = append(files, file{dst: strings.TrimPrefix(lib, "/"), src: lib})
			}
		}
	}
	for _, d := range hostData {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			files = append(files, file{dst: strings.TrimPrefix(path, "/"), src: path})
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("copy %s: %w", d, err)
		}
	}
	modules := filepath.Join("lib", "modules", k.release)
	load, err := os.ReadFile(filepath.Join(k.dir, "modules.load"))
	if err != nil {
		return nil, err
	}
	files = append(files, file{dst: filepath.Join(modules, "modules.load"), src: filepath.Join(k.dir, "modules.load")})
	for _, m := range strings.Fields(string(load)) {
		files = append(files, file{dst: filepath.Join(modules, m), src: filepath.Join(k.dir, "modules", m)})
	}
	return files, nil
}

var lddPath = regexp.MustCompile(`(?m)(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)$`)

// sharedLibraries lists what the dynamic loader maps for bin (ldd), none
// for a static binary.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("host tool %s (hack/deps.sh installs it): %w", bin, err)
	}
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	f.Close()
	if !dynamic {
		return nil, nil
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		libs = append(libs, m[1])
	}
	return libs, nil
}

// payloadImage writes the run's initramfs: a copy of the base image and,
// appended, the payload (init, tests and lab binaries) as a second archive (the kernel
// unpacks concatenated archives in order). The payload is not compressed:
// the host need not compress test binaries on every run, nor the emulated
// guest inflate them.
func payloadImage(ctx context.Context, rd *runDir, base, marker string, testArgs []string, disk bool) error {
	p := rd.payload()
	if err := os.WriteFile(filepath.Join(p, "init"), initScript, 0o755); err != nil {
		return err
	}
	if disk {
		// Tells init a disk is attached, so that failing to mount it is fatal.
		if err := os.WriteFile(filepath.Join(p, "tests", "disk"), nil, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(p, "tests", "marker"), []byte(marker+"\n"), 0o644); err != nil {
		return err
	}
	var args bytes.Buffer
	for _, a := range testArgs {
		if strings.Contains(a, "\n") {
			return fmt.Errorf("test flag %q has a newline", a)
		}
		args.WriteString(a + "\n")
	}
	if err := os.WriteFile(filepath.Join(p, "tests", "args"), args.Bytes(), 0o644); err != nil {
		return err
	}
	if err := copyFile(rd.initrd(), base); err != nil {
		return err
	}
	return packCPIO(ctx, rd.initrd(), p, false)
}

// packCPIO writes (or appends to) image a newc archive of tree, owned by root.
func packCPIO(ctx context.Context, image, tree string, compress bool) error {
	var list bytes.Buffer
	err := filepath.WalkDir(tree, func(path string, _ fs.DirEntry, err error) error {
		if err != nil || path == tree {
			return err
		}
		rel, err := filepath.Rel(tree, path)
		list.WriteString(rel + "\x00")
		return err
	})
	if err != nil {
		return err
	}
	out, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var w io.Writer = out
	var zw *gzip.Writer
	if compress {
		zw, _ = gzip.NewWriterLevel(out, gzip.BestSpeed)
		w = zw
	}
	cmd := exec.CommandContext(ctx, "cpio", "--null", "--create", "--format=newc", "--owner=0:0", "--quiet")
	cmd.Dir = tree
	cmd.Stdin = &list
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cpio %s: %w: %s", tree, err, strings.TrimSpace(stderr.String()))
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
		// The kernel finds an uncompressed archive after a compressed one
		// only at a 4-byte boundary, skipping zeros up to it.
		end, err := out.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		if _, err := out.Write(make([]byte, (4-end%4)%4)); err != nil {
			return err
		}
	}
	return out.Close()
}

// copyFile copies src's content and mode to dst, following links.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
