package images

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshnet/meshnet/internal/meshnet-lab/images/elfdeps"
)

// Cut is what an image takes from a tree of unpacked Debian packages
// (debian.Fetch): the files it names, the libraries their programs load
// (elfdeps, so a package's documentation, headers and unused programs stay
// out), busybox's applets for the shell tools no package supplies, and
// files made for the image.
type Cut struct {
	// Paths are files, symlinks or whole directories of the tree, or
	// patterns of them (path.Match); each must match something.
	Paths []string
	// Busybox is the tree's static busybox, if any: its applets are linked
	// in /bin, each where no file of the image has its name in /bin,
	// /sbin, /usr/bin or /usr/sbin (iproute2's ip, not busybox's).
	Busybox string
	// Files are made for the image; they replace the tree's at the same
	// path (FRR's /etc/frr, owned by user frr; /etc/passwd).
	Files []File
}

// files lists the image's files, cut from the tree at root.
func (c Cut) files(root string) ([]File, error) {
	byPath := map[string]File{}
	var progs []string
	for _, pattern := range c.Paths {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, fmt.Errorf("path %s: %w", pattern, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("path %s: no package of the set has it", pattern)
		}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				f, err := treeFile(root, filepath.ToSlash(rel))
				if err != nil {
					return err
				}
				byPath[f.Path] = f
				if f.Source != "" {
					progs = append(progs, f.Path)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("path %s: %w", pattern, err)
			}
		}
	}
	libs, err := elfdeps.Closure(root, progs)
	if err != nil {
		return nil, fmt.Errorf("libraries: %w", err)
	}
	for _, l := range libs {
		if _, ok := byPath[l]; ok {
			continue
		}
		f, err := treeFile(root, l)
		if err != nil {
			return nil, fmt.Errorf("libraries: %w", err)
		}
		byPath[l] = f
	}
	for _, f := range c.Files {
		byPath[f.Path] = f
	}
	if c.Busybox != "" {
		if err := linkApplets(byPath, root, c.Busybox); err != nil {
			return nil, err
		}
	}
	files := make([]File, 0, len(byPath))
	for _, f := range byPath {
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// linkApplets links the applets of busybox, a program of the tree at root,
// in /bin where the image has no program of their name on its PATH.
func linkApplets(byPath map[string]File, root, busybox string) error {
	names, err := treeApplets(root, filepath.Join(root, busybox))
	if err != nil {
		return err
	}
	for _, a := range names {
		taken := false
		for _, dir := range []string{"bin", "sbin", "usr/bin", "usr/sbin"} {
			if _, ok := byPath[dir+"/"+a]; ok {
				taken = true
			}
		}
		if !taken {
			byPath["bin/"+a] = File{Path: "bin/" + a, Link: "busybox"}
		}
	}
	return nil
}

// treeFile is the image file for rel, a path of the tree at root, owned by
// root as dpkg would install it.
func treeFile(root, rel string) (File, error) {
	full := filepath.Join(root, rel)
	fi, err := os.Lstat(full)
	if err != nil {
		return File{}, err
	}
	f := File{Path: rel, Mode: tarMode(fi.Mode())}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if f.Link, err = os.Readlink(full); err != nil {
			return File{}, err
		}
	case fi.IsDir():
		f.Dir = true
	case fi.Mode().IsRegular():
		f.Source = full
	default:
		return File{}, fmt.Errorf("%s: not a file, directory or symlink (%v)", rel, fi.Mode().Type())
	}
	return f, nil
}

// tarMode is m's permission bits as tar writes them, setuid, setgid and
// sticky included.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
