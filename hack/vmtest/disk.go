package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images"
	"github.com/meshnet/meshnet/internal/meshnet-lab/images/debian"
)

// diskLayout names the layout of the disk image; change it when the code
// that lays the disk out changes, so that cached images are rebuilt.
const diskLayout = "disk-v2"

// The VM mounts its disk at /opt/disk (init.sh); the control plane goes in
// kube/ (KUBEBUILDER_ASSETS), the command-line tools in bin/ (PATH) and
// the FRR image's tree in frr/.
const (
	diskKube = "kube"
	diskBin  = "bin"
	// diskFRR is the FRR image's Debian tree ($MESHNET_FRR_TREE).
	diskFRR = "frr"
)

// diskImage returns the cached ext4 image holding what is too big for the
// initramfs: kube-apiserver and etcd from $KUBEBUILDER_ASSETS (for envtest in
// the VM), kubectl and grpcurl (for tests that drive the lab as an operator
// would), and the Debian tree the FRR image is built from. It is keyed by the files' sizes and modification times. It
// returns "" when there is nothing to ship.
func diskImage(ctx context.Context, log *slog.Logger, logw io.Writer, cache, assets string) (string, error) {
	files, err := diskFiles(ctx, logw, cache, assets)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", nil
	}
	h := sha256.New()
	fmt.Fprintln(h, diskLayout)
	var size int64
	for _, f := range files {
		if f.tree {
			n, err := treeSize(f.src)
			if err != nil {
				return "", err
			}
			size += n
			fmt.Fprintln(h, f.dst, f.src, "tree")
			continue
		}
		st, err := os.Stat(f.src)
		if err != nil {
			return "", err
		}
		size += st.Size()
		fmt.Fprintln(h, f.dst, f.src, st.Size(), st.ModTime().UnixNano(), st.Mode())
	}
	dir := filepath.Join(cache, "vm", "disk")
	image := filepath.Join(dir, "disk-"+hex.EncodeToString(h.Sum(nil))[:16]+".img")
	if _, err := os.Stat(image); err == nil {
		return image, nil
	}
	log.Info("building disk image", "image", image, "files", len(files), "bytes", size)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "disk-*.img"))
	for _, o := range old {
		os.Remove(o) // the inputs changed; keep one image, not one per version
	}
	tree, err := os.MkdirTemp(dir, ".disk-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	for _, f := range files {
		if f.tree {
			if out, err := exec.CommandContext(ctx, "cp", "-a", f.src, filepath.Join(tree, f.dst)).CombinedOutput(); err != nil {
				return "", fmt.Errorf("copy %s: %w: %s", f.src, err, strings.TrimSpace(string(out)))
			}
			continue
		}
		if err := copyFile(filepath.Join(tree, f.dst), f.src); err != nil {
			return "", err
		}
	}
	// Room for ext4's metadata: inode tables and block groups take a few
	// percent; no journal, the VM mounts it read-only.
	mib := size/(1<<20) + size/(1<<20)/16 + 16
	tmp := fmt.Sprintf("%s.%d.tmp", image, os.Getpid()) // runs may race to build it
	cmd := exec.CommandContext(ctx, "mke2fs", "-q", "-t", "ext4", "-O", "^has_journal", "-L", "vmtest",
		"-E", "root_owner=0:0", "-d", tree, tmp, fmt.Sprintf("%dM", mib))
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mke2fs -d %s (hack/deps.sh installs e2fsprogs): %w: %s", tree, err, strings.TrimSpace(string(out)))
	}
	return image, os.Rename(tmp, image)
}

// diskFiles lists the disk's files. The control plane is left out when
// assets is empty: the tests that need it then fail, saying so.
func diskFiles(ctx context.Context, logw io.Writer, cache, assets string) ([]file, error) {
	var files []file
	if assets != "" {
		for _, name := range []string{"kube-apiserver", "etcd"} {
			src := filepath.Join(assets, name)
			if err := checkStatic(src); err != nil {
				return nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", assets, err)
			}
			files = append(files, file{dst: filepath.Join(diskKube, name), src: src})
		}
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		if err := checkStatic(kubectl); err != nil {
			return nil, err
		}
		files = append(files, file{dst: filepath.Join(diskBin, "kubectl"), src: kubectl})
	}
	grpcurl, err := buildGrpcurl(ctx, logw, cache)
	if err != nil {
		return nil, err
	}
	files = append(files, file{dst: filepath.Join(diskBin, "grpcurl"), src: grpcurl})
	// The FRR image's Debian tree, as the lab fetches it (shared cache):
	// the VM builds the image from it, having no apt.
	frr, err := debian.Fetch(ctx, debian.CacheDir(), images.FRRPackages())
	if err != nil {
		return nil, fmt.Errorf("fetch the FRR image's Debian packages with apt (this machine's apt sources must serve Debian bookworm): %w", err)
	}
	return append(files, file{dst: diskFRR, src: frr.Dir, tree: true}), nil
}

// treeSize is the bytes of the regular files under dir.
func treeSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		info, err := e.Info()
		if err == nil {
			size += info.Size()
		}
		return err
	})
	return size, err
}

// checkStatic fails for a binary the VM cannot run: it has no shared
// libraries but those of the tools in the initramfs.
func checkStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("ship %s into the VM: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("ship %s into the VM: it is dynamically linked; the VM needs a static binary", bin)
		}
	}
	return nil
}

// buildGrpcurl builds grpcurl at the version tools/go.mod pins, cached by
// that module file and the Go version: the disk image is keyed by its
// modification time, which a rebuild on every run would change.
func buildGrpcurl(ctx context.Context, logw io.Writer, cache string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	modfile := filepath.Join(root, "tools", "go.mod")
	h := sha256.New()
	for _, f := range []string{modfile, filepath.Join(root, "tools", "go.sum")} {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("grpcurl: %w", err)
		}
		h.Write(data)
	}
	ver, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	h.Write(ver)
	bin := filepath.Join(cache, "vm", "tools", "grpcurl-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-modfile="+modfile, "-trimpath", "-ldflags=-s -w", "-o", tmp,
		"github.com/fullstorydev/grpcurl/cmd/grpcurl")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(&out, logw)
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build grpcurl: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return bin, os.Rename(tmp, bin)
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod))), nil
}
