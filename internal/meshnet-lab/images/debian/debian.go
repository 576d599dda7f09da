// Package debian fetches Debian packages with this machine's own apt
// (apt-get download, never installed) and unpacks them with dpkg -x into a
// tree that images are cut from: the lab's router and host images are
// built from the distribution's binaries, without Docker or a base image.
//
// Everything is cached by exact version under a cache directory (as
// hack/controlplane.sh and hack/vm/kernel.sh cache theirs): the .debs in
// debian/debs, each unpacked set in debian/trees/<digest of its
// name=version list>. A tree is never changed once made, so a warm fetch
// is one apt-cache call and a stat; another version makes another tree.
package debian

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Package is one Debian binary package at an exact version.
type Package struct {
	Name, Version string
}

func (p Package) String() string { return p.Name + "=" + p.Version }

// Tree is a set of packages unpacked together into Dir.
type Tree struct {
	Dir      string
	Packages []Package
}

// Version is the version of the named package in the tree, "" if it has
// none.
func (t Tree) Version(name string) string {
	for _, p := range t.Packages {
		if p.Name == name {
			return p.Version
		}
	}
	return ""
}

// CacheDir is where fetched packages are kept: $MESHNET_CACHE, or
// /var/cache/meshnet as for the project's other cached builds.
func CacheDir() string {
	if d := os.Getenv("MESHNET_CACHE"); d != "" {
		return d
	}
	return "/var/cache/meshnet"
}

// manifest names the file of a finished tree listing its packages; it is
// written last, so a tree without it is an interrupted one.
const manifest = ".packages"

// Fetch unpacks the packages specs name into one tree under cache and
// returns it. A spec is "name=version" (that version, exactly) or "name"
// (the version apt offers now, its candidate: Debian drops superseded
// versions from its mirrors, so only what must not move is pinned). The
// .debs missing from the cache are downloaded in one apt-get call; when
// apt has no package lists yet (a fresh machine) or they are stale (a
// download fails), Fetch runs apt-get update once and tries again.
func Fetch(ctx context.Context, cache string, specs []string) (Tree, error) {
	d := filepath.Join(cache, "debian")
	f := fetcher{ctx: ctx, debs: filepath.Join(d, "debs"), trees: filepath.Join(d, "trees"), resolved: filepath.Join(d, "resolved")}
	tree, err := f.fetch(specs)
	if err == nil {
		return tree, nil
	}
	var stale staleError
	if !errors.As(err, &stale) {
		return Tree{}, err
	}
	if uerr := f.run("apt-get", "update", "-qq"); uerr != nil {
		return Tree{}, fmt.Errorf("%w; apt-get update: %w", err, uerr)
	}
	return f.fetch(specs)
}

// staleError is a failure that fresh package lists may cure.
type staleError struct{ error }

func (e staleError) Unwrap() error { return e.error }

type fetcher struct {
	ctx context.Context
	// debs holds the .deb files, trees the unpacked sets, resolved the
	// versions apt-cache gave.
	debs, trees, resolved string
}

func (f fetcher) fetch(specs []string) (Tree, error) {
	pkgs, err := f.resolve(specs)
	if err != nil {
		return Tree{}, err
	}
	dir := filepath.Join(f.trees, Key(pkgs))
	if _, err := os.Stat(filepath.Join(dir, manifest)); err == nil {
		return Tree{Dir: dir, Packages: pkgs}, nil
	}
	if err := f.download(pkgs); err != nil {
		return Tree{}, err
	}
	if err := f.unpack(dir, pkgs); err != nil {
		return Tree{}, err
	}
	return Tree{Dir: dir, Packages: pkgs}, nil
}

// Key names the tree of pkgs: a digest of their sorted name=version list.
func Key(pkgs []Package) string {
	lines := make([]string, len(pkgs))
	for i, p := range pkgs {
		lines[i] = p.String()
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8])
}

// resolve gives every spec its exact version: pinned ones as written, the
// others apt's candidate (apt-cache show --no-all-versions). apt-cache
// reads every package list, about a second here, so its answer is kept
// for as long as apt's lists and preferences stay as they were.
func (f fetcher) resolve(specs []string) ([]Package, error) {
	var pkgs []Package
	var ask []string
	for _, s := range specs {
		if name, version, ok := strings.Cut(s, "="); ok {
			pkgs = append(pkgs, Package{name, version})
		} else {
			ask = append(ask, s)
		}
	}
	if len(ask) == 0 {
		return sortedUnique(pkgs)
	}
	memo := filepath.Join(f.resolved, Key(append(slices.Clone(pkgs), Package{Name: strings.Join(ask, " "), Version: aptState()})))
	if data, err := os.ReadFile(memo); err == nil {
		return sortedUnique(append(pkgs, parseList(data)...))
	}
	out, err := f.output("apt-cache", append([]string{"show", "--no-all-versions"}, ask...)...)
	if err != nil {
		return nil, staleError{fmt.Errorf("resolve the versions of %s: %w", strings.Join(ask, " "), err)}
	}
	found := ParseShow(out)
	var asked []Package
	for _, name := range ask {
		v, ok := found[name]
		if !ok {
			return nil, staleError{fmt.Errorf("resolve %s: apt-cache show printed no version of it", name)}
		}
		asked = append(asked, Package{name, v})
	}
	if err := writeAtomic(memo, formatList(asked)); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	return sortedUnique(append(pkgs, asked...))
}

// aptState fingerprints what apt-cache's answer depends on: the package
// lists (apt-get update rewrites them), the preferences and the installed
// packages' status.
func aptState() string {
	var b strings.Builder
	note := func(p string) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			fmt.Fprintf(&b, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	for _, dir := range []string{"/var/lib/apt/lists", "/etc/apt/preferences.d", "/etc/apt/sources.list.d"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			note(filepath.Join(dir, e.Name()))
		}
	}
	for _, p := range []string{"/etc/apt/preferences", "/etc/apt/sources.list", "/var/lib/dpkg/status"} {
		note(p)
	}
	return b.String()
}

// formatList and parseList write and read "name version" lines.
func formatList(pkgs []Package) []byte {
	var b strings.Builder
	for _, p := range pkgs {
		fmt.Fprintf(&b, "%s %s\n", p.Name, p.Version)
	}
	return []byte(b.String())
}

func parseList(data []byte) []Package {
	var pkgs []Package
	for _, line := range strings.Split(string(data), "\n") {
		if name, version, ok := strings.Cut(line, " "); ok {
			pkgs = append(pkgs, Package{name, version})
		}
	}
	return pkgs
}

// writeAtomic writes data to name through a temporary file and a rename,
// so a reader never sees half of it.
func writeAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

func sortedUnique(pkgs []Package) ([]Package, error) {
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(pkgs); i++ {
		if pkgs[i].Name == pkgs[i-1].Name {
			return nil, fmt.Errorf("package %s named twice (%s, %s)", pkgs[i].Name, pkgs[i-1].Version, pkgs[i].Version)
		}
	}
	return pkgs, nil
}

// ParseShow reads apt-cache show's stanzas into package -> version.
func ParseShow(out []byte) map[string]string {
	found := map[string]string{}
	var name string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			name = ""
		case strings.HasPrefix(line, "Package: "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "Package: "))
		case strings.HasPrefix(line, "Version: ") && name != "":
			if _, dup := found[name]; !dup {
				found[name] = strings.TrimSpace(strings.TrimPrefix(line, "Version: "))
			}
		}
	}
	return found
}

// debPath is where the .deb of p is kept.
func (f fetcher) debPath(p Package) string {
	return filepath.Join(f.debs, strings.ReplaceAll(p.Name+"_"+p.Version, ":", "%3a")+".deb")
}

// download fetches the .debs not yet in the cache, in one apt-get call,
// into a directory of its own, and moves each to its name by what dpkg-deb
// says it is (apt-get's file names encode epochs and architectures).
func (f fetcher) download(pkgs []Package) error {
	var missing []string
	for _, p := range pkgs {
		if _, err := os.Stat(f.debPath(p)); err != nil {
			missing = append(missing, p.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(f.debs, 0o755); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	work, err := os.MkdirTemp(f.debs, ".download-")
	if err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	defer os.RemoveAll(work)
	// apt's sandbox user cannot write into a root-only cache directory.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	args := append([]string{"download", "-q=2", "-o", "APT::Sandbox::User=root"}, missing...)
	cmd := exec.CommandContext(f.ctx, "apt-get", args...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return staleError{fmt.Errorf("apt-get download %s: %w: %s", strings.Join(missing, " "), err, strings.TrimSpace(string(out)))}
	}
	files, err := filepath.Glob(filepath.Join(work, "*.deb"))
	if err != nil {
		return err
	}
	for _, file := range files {
		out, err := f.output("dpkg-deb", "--showformat=${Package}\n${Version}\n", "--show", file)
		if err != nil {
			return fmt.Errorf("read %s: %w", filepath.Base(file), err)
		}
		name, version, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if err := os.Rename(file, f.debPath(Package{name, version})); err != nil {
			return fmt.Errorf("package cache: %w", err)
		}
	}
	for _, p := range pkgs {
		if _, err := os.Stat(f.debPath(p)); err != nil {
			return fmt.Errorf("apt-get download %s left no .deb of it", p)
		}
	}
	return nil
}

// unpack extracts pkgs into a fresh directory and renames it to dir once
// complete; a concurrent fetch of the same set may win the rename, which
// is fine: the trees are the same.
func (f fetcher) unpack(dir string, pkgs []Package) error {
	if err := os.MkdirAll(f.trees, 0o755); err != nil {
		return fmt.Errorf("tree cache: %w", err)
	}
	work, err := os.MkdirTemp(f.trees, ".unpack-")
	if err != nil {
		return fmt.Errorf("tree cache: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	for _, p := range pkgs {
		if err := f.run("dpkg", "-x", f.debPath(p), work); err != nil {
			return fmt.Errorf("unpack %s: %w", p, err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, manifest), formatList(pkgs), 0o644); err != nil {
		return err
	}
	if err := os.Rename(work, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, manifest)); serr == nil {
			return nil
		}
		return fmt.Errorf("tree cache: %w", err)
	}
	return nil
}

func (f fetcher) output(name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(f.ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (f fetcher) run(name string, args ...string) error {
	out, err := exec.CommandContext(f.ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
