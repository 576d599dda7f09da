package clabfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// MaxBindBytes is the most a bind may carry, a file or a directory's files
// together: what one ConfigMap holds.
const MaxBindBytes = 1 << 20

// runDir is where a pod gets what meshnet adds to it (the exec hook's
// script and state); binds may not mount over it.
const runDir = "/run/meshnet-clab"

// bind is one of a node's binds, its source read.
type bind struct {
	// at is where the file sets it, text what it sets.
	at, text string
	// dst is the container path; readOnly is :ro.
	dst      string
	readOnly bool
	src      *source
}

// source is what a bind's source path holds: one file, or the files of a
// directory.
type source struct {
	dir   bool
	files []file
	// err says why the source cannot be carried to a pod; nil when it can.
	err error
}

// file is a file of a bind's source.
type file struct {
	// rel is its path below the bound directory, "" for a bound file.
	rel  string
	data []byte
	// executable keeps the file's executable bit in the pod.
	executable bool
}

// binds resolves a node's binds as containerlab does: the binds of
// defaults, kind, group and node in that order, a later one replacing an
// earlier one with the same container path. They are taken in that order,
// which is the file's, so that errors come in it too; containerlab sorts
// them, which changes nothing to the mounts.
func (p *parser) binds(n *node) {
	all := n.chain.list("binds")
	last := map[string]int{}
	for i, it := range all {
		parts := strings.Split(it.value, ":")
		switch {
		case len(parts) == 1:
			p.errorf("%s: %q: no container path; an anonymous volume (containerlab's volumes) has no counterpart here", n.where(it.at), it.value)
		case len(parts) > 3:
			p.errorf("%s: %q: want source:container-path or source:container-path:mode", n.where(it.at), it.value)
		default:
			last[parts[1]] = i
		}
	}
	for i, it := range all {
		if parts := strings.Split(it.value, ":"); len(parts) < 2 || len(parts) > 3 || last[parts[1]] != i {
			continue
		}
		if b := p.bind(n, it); b != nil {
			n.binds = append(n.binds, b)
		}
	}
}

// bind checks one bind of node n and reads its source; nil when it cannot
// be carried to the pod.
func (p *parser) bind(n *node, it item) *bind {
	at := n.where(it.at)
	parts := strings.Split(it.value, ":")
	src, dst := magicPaths(parts[0], p.lab.Name, n.name), parts[1]
	b := &bind{at: it.at, text: it.value}
	ok := true
	if len(parts) == 3 {
		for _, opt := range strings.Split(parts[2], ",") {
			switch opt {
			case "ro":
				b.readOnly = true
			case "rw", "z", "Z":
				// rw is the default; z and Z relabel for SELinux, which
				// the cluster's runtime does for a pod's volumes.
			default:
				p.errorf("%s: %q: mode %q is not mapped (want ro or rw)", at, it.value, opt)
				ok = false
			}
		}
	}
	switch {
	case !strings.HasPrefix(dst, "/"):
		p.errorf("%s: %q: container path %q is not absolute", at, it.value, dst)
		ok = false
	case path.Clean(dst) == "/":
		p.errorf("%s: %q: a bind over the container's root is not mapped", at, it.value)
		ok = false
	case path.Clean(dst) == runDir || strings.HasPrefix(path.Clean(dst), runDir+"/"):
		p.errorf("%s: %q: %s is where meshnet puts the exec hook's files; bind elsewhere", at, it.value, runDir)
		ok = false
	}
	b.dst = path.Clean(dst)
	name, err := p.sourcePath(src)
	if err != nil {
		p.errorf("%s: %q: %v", at, it.value, err)
		return nil
	}
	if b.src = p.read(name); b.src.err != nil {
		p.errorf("%s: %q: %v", at, it.value, b.src.err)
		return nil
	}
	if !ok {
		return nil
	}
	if !b.readOnly {
		p.ignore(it.at, fmt.Sprintf("%q: containerlab mounts it writable; here it comes from a ConfigMap, which a pod sees read-only: writing to it fails (and would not change the lab's file anyway)", it.value))
	}
	return b
}

// sourcePath resolves a bind's or startup-config's path, relative to the
// lab file's directory as containerlab resolves it, to a path in p.dir;
// an error says why the path cannot be carried to a pod.
func (p *parser) sourcePath(src string) (string, error) {
	labDir := "clab-" + p.lab.Name
	clean := path.Clean(src)
	switch {
	case src == "":
		return "", errors.New("no source path")
	case strings.HasPrefix(src, "~"):
		return "", errors.New("not supported: a path in the home directory of the machine running containerlab; only files under the lab file's directory are carried to the pods (as ConfigMaps)")
	case strings.HasPrefix(src, "/"):
		return "", errors.New("not supported: an absolute path on the containerlab host; a pod runs on any node of the cluster, so only files under the lab file's directory are carried to it (as ConfigMaps)")
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return "", errors.New("not supported: a path outside the lab file's directory; only files under it are carried to the pods (as ConfigMaps)")
	case clean == labDir || strings.HasPrefix(clean, labDir+"/"):
		return "", fmt.Errorf("not supported: %s is containerlab's lab directory, which containerlab fills when it deploys the lab (node directories, inventories, certificates); nothing fills it here", labDir)
	case !fs.ValidPath(clean):
		return "", fmt.Errorf("%q is not a path meshnet can read", src)
	case p.dir == nil:
		return "", errors.New("no lab directory was given to read it from")
	}
	return clean, nil
}

// read reads a bind's source, once per path.
func (p *parser) read(name string) *source {
	if s, ok := p.files[name]; ok {
		return s
	}
	s := readSource(p.dir, name)
	p.files[name] = s
	return s
}

// readSource reads a file, or a directory's files at any depth, of at most
// MaxBindBytes together.
func readSource(fsys fs.FS, name string) *source {
	info, err := fs.Stat(fsys, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &source{err: fmt.Errorf("%s: no such file or directory under the lab file's directory (containerlab refuses it too)", name)}
	case err != nil:
		return &source{err: fmt.Errorf("read %s: %w", name, err)}
	case info.IsDir():
		s := &source{dir: true}
		total := 0
		s.err = readDir(fsys, name, "", s, &total)
		return s
	case !info.Mode().IsRegular():
		return &source{err: fmt.Errorf("%s is not a regular file", name)}
	case info.Size() > MaxBindBytes:
		return &source{err: fmt.Errorf("file %s is %d bytes, more than the %d (1 MiB) a ConfigMap holds", name, info.Size(), MaxBindBytes)}
	}
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return &source{err: fmt.Errorf("read %s: %w", name, err)}
	}
	if len(data) > MaxBindBytes {
		return &source{err: fmt.Errorf("file %s is %d bytes, more than the %d (1 MiB) a ConfigMap holds", name, len(data), MaxBindBytes)}
	}
	return &source{files: []file{{data: data, executable: info.Mode()&0o111 != 0}}}
}

// readDir adds the files below root/rel to s. A ConfigMap holds files
// only: an empty directory, a link to a directory or a special file cannot
// be carried, and is refused.
func readDir(fsys fs.FS, root, rel string, s *source, total *int) error {
	dir := path.Join(root, rel)
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("directory %s is empty: a ConfigMap holds files, not empty directories (a directory for the node to write into the lab's has no counterpart)", dir)
	}
	for _, e := range entries {
		r := path.Join(rel, e.Name())
		full := path.Join(root, r)
		info, err := fs.Stat(fsys, full)
		switch {
		case err != nil:
			return fmt.Errorf("read %s: %w", full, err)
		case info.IsDir() && e.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a link to a directory, which a ConfigMap cannot hold", full)
		case info.IsDir():
			if err := readDir(fsys, root, r, s, total); err != nil {
				return err
			}
			continue
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file", full)
		case *total+int(info.Size()) > MaxBindBytes:
			return fmt.Errorf("directory %s holds more than the %d bytes (1 MiB) a ConfigMap holds (at %s)", root, MaxBindBytes, full)
		}
		data, err := fs.ReadFile(fsys, full)
		if err != nil {
			return fmt.Errorf("read %s: %w", full, err)
		}
		if *total += len(data); *total > MaxBindBytes {
			return fmt.Errorf("directory %s holds more than the %d bytes (1 MiB) a ConfigMap holds (at %s)", root, MaxBindBytes, full)
		}
		s.files = append(s.files, file{rel: r, data: data, executable: info.Mode()&0o111 != 0})
	}
	return nil
}

// startupConfig checks a node's startup-config. containerlab's kind linux
// applies none: it only checks that a file given by path exists. So the
// file is checked the same, and the setting listed as ignored.
func (p *parser) startupConfig(n *node, it item) {
	const reason = "kind linux applies no startup configuration (containerlab only checks that the file exists); configure the node with binds or exec"
	v := it.value
	switch {
	case strings.Contains(v, "\n"):
		p.ignore(it.at, "an embedded configuration: "+reason)
		return
	case strings.Contains(v, "://"):
		p.ignore(it.at, "a remote file: "+reason)
		return
	}
	name, err := p.sourcePath(magicPaths(v, p.lab.Name, n.name))
	if err != nil {
		// Not under the lab file's directory (an absolute path...):
		// containerlab would check it on its host; nothing uses it.
		p.ignore(it.at, reason+"; the file is not checked here")
		return
	}
	if _, err := fs.Stat(p.dir, name); errors.Is(err, fs.ErrNotExist) {
		p.errorf("%s: %q: no such file under the lab file's directory (containerlab refuses it too)", n.where(it.at), v)
		return
	} else if err != nil {
		p.errorf("%s: %q: %v", n.where(it.at), v, err)
		return
	}
	p.ignore(it.at, reason)
}
