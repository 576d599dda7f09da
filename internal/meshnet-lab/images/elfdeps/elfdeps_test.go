package elfdeps

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostFile copies the file at src (symlinks followed) to rel under root.
func hostFile(t *testing.T, root, rel, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("this test copies the host's %s (Debian's libc6 and coreutils): %v", src, err)
	}
	put(t, root, rel, data)
}

func put(t *testing.T, root, rel string, data []byte) {
	t.Helper()
	full := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, root, rel, target string) {
	t.Helper()
	full := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

// TestClosureOfARealProgram: the host's true(1), laid out as Debian's
// packages lay it out (libc in /lib/x86_64-linux-gnu, the loader reached
// through /lib64's absolute symlink), needs the loader, that symlink and
// libc; without libc the error names the program and the library.
func TestClosureOfARealProgram(t *testing.T) {
	root := t.TempDir()
	hostFile(t, root, "usr/bin/true", "/usr/bin/true")
	hostFile(t, root, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")
	link(t, root, "lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	hostFile(t, root, "lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
	put(t, root, "usr/share/doc/readme", []byte("not ELF"))

	got, err := Closure(root, []string{"usr/bin/true", "usr/share/doc/readme"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Errorf("closure %q, want %q", got, want)
	}

	if err := os.Remove(filepath.Join(root, "lib/x86_64-linux-gnu/libc.so.6")); err != nil {
		t.Fatal(err)
	}
	_, err = Closure(root, []string{"usr/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "usr/bin/true needs libc.so.6") {
		t.Errorf("closure without libc: %v, want an error naming usr/bin/true and libc.so.6", err)
	}
}

// TestClosureFollowsLibrarySymlinks: a library found through a symlink
// (libfoo.so.1 -> libfoo.so.1.2.3, the usual soname link) brings both.
func TestClosureFollowsLibrarySymlinks(t *testing.T) {
	root := t.TempDir()
	hostFile(t, root, "usr/bin/true", "/usr/bin/true")
	hostFile(t, root, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")
	link(t, root, "lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	hostFile(t, root, "usr/lib/x86_64-linux-gnu/libc-2.36.so", "/lib/x86_64-linux-gnu/libc.so.6")
	link(t, root, "usr/lib/x86_64-linux-gnu/libc.so.6", "libc-2.36.so")
	got, err := Closure(root, []string{"usr/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libc-2.36.so"} {
		if !slices.Contains(got, w) {
			t.Errorf("closure %q lacks %s", got, w)
		}
	}
}

// TestResolveStaysInRoot: symlinks resolve inside the root, absolute ones
// from the root, and ".." never leaves it.
func TestResolveStaysInRoot(t *testing.T) {
	root := t.TempDir()
	put(t, root, "usr/lib/x/libz.so.1.2", []byte("z"))
	link(t, root, "usr/lib/x/libz.so.1", "libz.so.1.2")
	link(t, root, "lib", "usr/lib")
	link(t, root, "abs", "/lib/x/libz.so.1")
	link(t, root, "up", "../../../../usr/lib/x/libz.so.1.2")
	for _, c := range []struct {
		path, target string
		links        []string
	}{
		{"lib/x/libz.so.1", "usr/lib/x/libz.so.1.2", []string{"lib", "usr/lib/x/libz.so.1"}},
		{"abs", "usr/lib/x/libz.so.1.2", []string{"abs", "lib", "usr/lib/x/libz.so.1"}},
		{"up", "usr/lib/x/libz.so.1.2", []string{"up"}},
		{"/usr/lib/x/../x/libz.so.1.2", "usr/lib/x/libz.so.1.2", nil},
	} {
		links, target, err := Resolve(root, c.path)
		if err != nil || target != c.target || !slices.Equal(links, c.links) {
			t.Errorf("Resolve(%s) = %q, %s, %v; want %q, %s", c.path, links, target, err, c.links, c.target)
		}
	}
	link(t, root, "loop", "loop")
	if _, _, err := Resolve(root, "loop"); err == nil {
		t.Error("a symlink loop resolved")
	}
}
