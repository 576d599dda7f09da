// Package elfdeps finds, inside an unpacked root file system, every file
// that ELF programs need at load time, the way the dynamic loader would
// find them there: an image cut from Debian packages then holds each
// library its programs load and no other, and a library that no package of
// the set provides is an error at build time, not a program that fails to
// start in a pod.
package elfdeps

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// defaultDirs are where Debian's dynamic loader (multiarch glibc) looks
// when an object's runpath does not name the library and there is no
// ld.so.cache, as in an image.
func defaultDirs() []string {
	return []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib"}
}

// Closure returns, relative to root, the files the ELF files among paths
// need to be loaded: their interpreter and the shared objects their
// DT_NEEDED entries name, recursively, with every symlink on the way. The
// files of paths themselves are not in the result unless another needs
// them. paths are relative to root; other files are skipped. A library not
// found is an error naming the file that needs it.
func Closure(root string, paths []string) ([]string, error) {
	c := closure{root: root, out: map[string]bool{}, bySoname: map[string]string{}, visited: map[string]bool{}}
	queue := slices.Clone(paths)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		more, err := c.visit(p)
		if err != nil {
			return nil, err
		}
		queue = append(queue, more...)
	}
	inputs := map[string]bool{}
	for _, p := range paths {
		inputs[path.Clean(p)] = true
	}
	var out []string
	for p := range c.out {
		if !inputs[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

type closure struct {
	root string
	// out holds every file and symlink found; bySoname the file each
	// soname resolved to, as the loader reuses an object already loaded;
	// visited the files read.
	out      map[string]bool
	bySoname map[string]string
	visited  map[string]bool
}

// visit reads the ELF file at p (a file, not a symlink) and returns the
// files it needs that have not been visited yet.
func (c *closure) visit(p string) ([]string, error) {
	if c.visited[p] {
		return nil, nil
	}
	c.visited[p] = true
	links, file, err := Resolve(c.root, p)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		c.out[l] = true
	}
	if file != p {
		c.out[file] = true
		if c.visited[file] {
			return nil, nil
		}
		c.visited[file] = true
	}
	f, err := openELF(filepath.Join(c.root, file))
	if err != nil || f == nil {
		return nil, err
	}
	defer f.Close()
	var next []string
	if interp, err := interpreter(f); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	} else if interp != "" {
		links, target, err := Resolve(c.root, interp)
		if err != nil {
			return nil, fmt.Errorf("%s: interpreter %s: %w", p, interp, err)
		}
		for _, l := range append(links, target) {
			c.out[l] = true
		}
		next = append(next, target)
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	dirs := searchDirs(f, path.Dir(file))
	for _, soname := range needed {
		if got, ok := c.bySoname[soname]; ok {
			next = append(next, got)
			continue
		}
		target, err := c.find(soname, dirs)
		if err != nil {
			return nil, fmt.Errorf("%s needs %s: %w", p, soname, err)
		}
		c.bySoname[soname] = target
		next = append(next, target)
	}
	return next, nil
}

// find looks for soname in dirs, recording the symlinks that lead to it.
func (c *closure) find(soname string, dirs []string) (string, error) {
	for _, d := range dirs {
		links, target, err := Resolve(c.root, path.Join(d, soname))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		for _, l := range append(links, target) {
			c.out[l] = true
		}
		return target, nil
	}
	return "", fmt.Errorf("no package of the set provides it (looked in %s)", strings.Join(dirs, ", "))
}

// searchDirs are the loader's directories for f's own DT_NEEDED: its
// DT_RUNPATH, or DT_RPATH when it has none, then the default ones.
// $ORIGIN is the directory holding f.
func searchDirs(f *elf.File, origin string) []string {
	var dirs []string
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	if len(runpath) == 0 {
		runpath, _ = f.DynString(elf.DT_RPATH)
	}
	for _, rp := range runpath {
		for _, d := range strings.Split(rp, ":") {
			d = strings.NewReplacer("${ORIGIN}", "/"+origin, "$ORIGIN", "/"+origin).Replace(d)
			if d = strings.TrimPrefix(path.Clean("/"+d), "/"); d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	return append(dirs, defaultDirs()...)
}

// interpreter is f's PT_INTERP, "" for a static program or a library.
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("read interpreter: %w", err)
		}
		return string(bytes.TrimRight(data, "\x00")), nil
	}
	return "", nil
}

// openELF opens an ELF file, or returns nil for any other file.
func openELF(name string) (*elf.File, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	magic := make([]byte, 4)
	_, err = io.ReadFull(fh, magic)
	fh.Close()
	if err != nil || string(magic) != elf.ELFMAG {
		return nil, nil
	}
	f, err := elf.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// IsELF says whether the file at name starts as an ELF file does.
func IsELF(name string) bool {
	f, err := openELF(name)
	if f != nil {
		f.Close()
	}
	return err == nil && f != nil
}

// Resolve follows the symlinks of p (relative to root) inside root, where
// an absolute target starts at root, as it will inside the image. It
// returns the symlinks it passed (relative to root) and the path of the
// file or directory reached.
func Resolve(root, p string) (links []string, target string, err error) {
	hops := 0
	return resolve(root, clean(p), &hops)
}

func resolve(root, p string, hops *int) ([]string, string, error) {
	parts := strings.Split(p, "/")
	cur := ""
	for i, part := range parts {
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return nil, "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if *hops++; *hops > 40 {
			return nil, "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		dest, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return nil, "", err
		}
		base := cur
		if path.IsAbs(dest) {
			base = ""
		}
		rest := clean(path.Join(append([]string{base, dest}, parts[i+1:]...)...))
		links, target, err := resolve(root, rest, hops)
		return append([]string{next}, links...), target, err
	}
	return nil, cur, nil
}

// clean makes p relative to the root, never above it.
func clean(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
