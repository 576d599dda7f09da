package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// entry is one entry of an image's only layer.
type entry struct {
	hdr  tar.Header
	data string
}

// entries reads img's only layer, by path without a trailing slash.
func entries(t testing.TB, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if _, dup := out[name]; dup {
			t.Errorf("layer has %s twice", name)
		}
		out[name] = entry{*h, string(data)}
	}
}

// fakeTree lays out, under a temporary directory, what a tree of unpacked
// packages holds at paths: a symlink for "path -> target", a directory
// for "path/", otherwise a small text file (not ELF, so no libraries are
// looked for). bin/busybox is a script listing a few applets.
func fakeTree(t testing.TB, paths ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range append(paths, "bin/busybox") {
		full := filepath.Join(root, strings.Split(p, " -> ")[0])
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch name, target, link := strings.Cut(p, " -> "); {
		case link:
			err = os.Symlink(target, filepath.Join(root, name))
		case strings.HasSuffix(p, "/"):
			err = os.MkdirAll(full, 0o755)
		case p == "bin/busybox":
			err = os.WriteFile(full, []byte("#!/bin/sh\necho busybox sh ls ip ping traceroute httpd\n"), 0o755)
		default:
			err = os.WriteFile(full, []byte("fake "+p+"\n"), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}
