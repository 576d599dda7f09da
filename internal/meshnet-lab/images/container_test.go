//go:build kernel || vm

package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// container is one container of an image, run as a container runtime
// runs it: the image's layer unpacked into root, its own mount, PID and
// UTS namespaces in the network namespace netns, chrooted into root, the
// image's entrypoint, command and environment.
type container struct {
	name, netns, root string
	cfg               v1.Config
	cmd               *exec.Cmd
	out               bytes.Buffer
}

// newContainer unpacks img for a container called name in netns.
func newContainer(t *testing.T, img v1.Image, name, netns string) *container {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := &container{name: name, netns: netns, root: t.TempDir(), cfg: cf.Config}
	unpack(t, img, c.root)
	return c
}

// start runs the image's entrypoint and command, /proc, /dev and /sys
// mounted, the host name the container's name.
func (c *container) start(t *testing.T) {
	t.Helper()
	for _, d := range []string{"proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(c.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const script = `set -e
mount -t proc proc "$1/proc"
mount -o rbind /dev "$1/dev"
mount -t sysfs sysfs "$1/sys"
hostname "$2"
shift 2
exec chroot "$@"`
	argv := []string{"--net=" + c.netns, "--", "unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "--propagation", "private",
		"sh", "-c", script, "sh", c.root, c.name, c.root, "env", "-i"}
	argv = append(append(append(argv, c.cfg.Env...), c.cfg.Entrypoint...), c.cfg.Cmd...)
	c.cmd = exec.Command("nsenter", argv...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", c.name, err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		if t.Failed() {
			t.Logf("%s's output:\n%s", c.name, c.out.String())
		}
	})
}

// init is the PID (in this test's namespace) of the container's PID 1,
// its entrypoint: the child of unshare, which nsenter became.
func (c *container) init(t *testing.T) int {
	t.Helper()
	want := "/" + filepath.Base(c.cfg.Entrypoint[0])
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, ok := child(c.cmd.Process.Pid); ok {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); strings.HasSuffix(exe, want) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not start\n%s", c.name, c.cfg.Entrypoint[0], c.out.String())
		}
	}
}

// child is the first child of pid.
func child(pid int) (int, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}

// command is argv inside the container as kubectl exec runs it: in its
// namespaces and root, with the image's environment.
func (c *container) command(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	pid := strconv.Itoa(c.init(t))
	args := append([]string{"--target", pid, "--mount", "--net", "--pid", "--uts", "--root", "--wd", "--", "env", "-i"}, c.cfg.Env...)
	return exec.Command("nsenter", append(args, argv...)...)
}

// exec runs argv inside the container and returns its output; it fails
// the test when the command fails.
func (c *container) exec(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := c.command(t, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", c.name, strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// unpack writes img's only layer into dir as a container runtime's
// snapshotter would: modes, owners and symlinks kept.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := unpackEntry(tr, h, filepath.Join(dir, h.Name)); err != nil {
			t.Fatalf("unpack %s: %v", h.Name, err)
		}
	}
}

func unpackEntry(r io.Reader, h *tar.Header, p string) error {
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	case tar.TypeSymlink:
		return errors.Join(os.Symlink(h.Linkname, p), os.Lchown(p, h.Uid, h.Gid))
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unexpected type %c", h.Typeflag)
	}
	mode := fs.FileMode(h.Mode).Perm()
	if h.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return errors.Join(os.Chown(p, h.Uid, h.Gid), os.Chmod(p, mode))
}
