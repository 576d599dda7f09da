// Package images builds the OCI images a local cluster of real nodes runs,
// without Docker: meshnet's own image (the same layout as /Dockerfile), a
// pause image, a busybox router image, and the lab's FRR router and Linux
// host images cut from Debian's packages (internal/meshnet-lab/images/debian), each
// one layer on scratch, and serves them from a registry on this machine
// that the nodes' containerd uses as the mirror of docker.io,
// registry.k8s.io, ghcr.io and quay.io.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of an image layer: a regular file with Data (read from
// Source when Data is nil), a symlink to Link, or a directory when Dir is
// set. UID and GID own it (root by default): FRR's daemons, which drop to
// user frr, must own their run and log directories. Directories above a
// file that are not in the list are made root's, mode 0755.
type File struct {
	Path     string
	Mode     int64
	Data     []byte
	Source   string
	Link     string
	Dir      bool
	UID, GID int
}

// Config is the part of an image's configuration the images here set.
type Config struct {
	Entrypoint, Cmd, Env []string
	User                 string
}

// Build makes a linux/amd64 image of one layer holding files, on scratch.
func Build(files []File, cfg Config) (v1.Image, error) {
	layer, err := layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	// containerd filters out images without a platform.
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env, cf.Config.User = cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.User
	return mutate.ConfigFile(img, cf)
}

// layer writes files, and the directories above them, into one tar layer.
func layer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for i, f := range sorted {
		if i > 0 && f.Path == sorted[i-1].Path {
			return nil, fmt.Errorf("image file %s: listed twice", f.Path)
		}
		for _, d := range parents(f.Path) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		if err := writeEntry(w, f); err != nil {
			return nil, err
		}
		if f.Dir {
			dirs[f.Path] = true
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// writeEntry writes f's header and, for a regular file, its data.
func writeEntry(w *tar.Writer, f File) error {
	h := &tar.Header{Name: f.Path, Mode: f.Mode, Uid: f.UID, Gid: f.GID}
	switch {
	case f.Dir:
		h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
		return w.WriteHeader(h)
	case f.Link != "":
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		return w.WriteHeader(h)
	}
	data := f.Data
	if data == nil {
		var err error
		if data, err = os.ReadFile(f.Source); err != nil {
			return fmt.Errorf("image file %s: %w", f.Path, err)
		}
	}
	h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
	if err := w.WriteHeader(h); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// parents are the directories above p, outermost first ("a/b/c" gives a, a/b).
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// Meshnet is meshnet's image, laid out as /Dockerfile lays it out:
// /meshnetd, /meshnet-controller and /meshnet-cni from binDir, user 65532
// (meshnetd's DaemonSet runs it as root), no entrypoint.
func Meshnet(binDir string) (v1.Image, error) {
	var files []File
	for _, name := range []string{"meshnetd", "meshnet-controller", "meshnet-cni"} {
		files = append(files, File{Path: name, Mode: 0o755, Source: path.Join(binDir, name)})
	}
	return Build(files, Config{User: "65532:65532"})
}

// Pause is a pause image: pause, a static binary that sleeps until
// signalled and reaps the sandbox's orphans, as its entrypoint.
func Pause(pause string) (v1.Image, error) {
	return Build([]File{{Path: "pause", Mode: 0o755, Source: pause}}, Config{Entrypoint: []string{"/pause"}, User: "65535:65535"})
}

// Router is the router image for example pods: a static busybox (Debian's
// busybox-static) with every applet it lists linked in /bin, /bin/sh as the
// command. meshnet-cni's test manifests run it as their alpine image.
func Router(busybox string) (v1.Image, error) {
	names, err := applets(busybox)
	if err != nil {
		return nil, err
	}
	files := []File{{Path: "bin/busybox", Mode: 0o755, Source: busybox}}
	for _, a := range names {
		files = append(files, File{Path: "bin/" + a, Link: "busybox"})
	}
	return Build(files, Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}})
}

// applets are the applets the busybox binary at path lists, but busybox.
func applets(busybox string) ([]string, error) {
	return appletsOf(exec.Command(busybox, "--list"), busybox)
}

// debianArch is the multiarch directory of the lab's Debian trees (amd64).
const debianArch = "x86_64-linux-gnu"

// treeApplets are the applets of busybox, a program of the Debian tree at
// root, run with the tree's own loader and libraries: Debian's busybox is
// dynamically linked (libresolv), which the machine running this need not
// have (the vm tier's VM has not).
func treeApplets(root, busybox string) ([]string, error) {
	libs := filepath.Join(root, "lib", debianArch)
	loader := filepath.Join(libs, "ld-linux-x86-64.so.2")
	if _, err := os.Stat(loader); err != nil {
		return applets(busybox) // a static one
	}
	path := libs + ":" + filepath.Join(root, "usr", "lib", debianArch)
	return appletsOf(exec.Command(loader, "--library-path", path, busybox, "--list"), busybox)
}

func appletsOf(cmd *exec.Cmd, busybox string) ([]string, error) {
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list the applets of %s: %w", busybox, err)
	}
	var names []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			names = append(names, a)
		}
	}
	return names, nil
}
