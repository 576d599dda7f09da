package debian

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseShow: the first stanza of a package gives its version.
func TestParseShow(t *testing.T) {
	out := "Package: frr\nVersion: 8.4.4-1.1~deb12u1\nDepends: libc6 (>= 2.34)\nDescription: x\n foo\n\n" +
		"Package: libc6\nSource: glibc\nVersion: 2.36-9+deb12u14\n\nPackage: libc6\nVersion: 2.36-9+deb12u7\n"
	got := ParseShow([]byte(out))
	if len(got) != 2 || got["frr"] != "8.4.4-1.1~deb12u1" || got["libc6"] != "2.36-9+deb12u14" {
		t.Errorf("ParseShow = %v", got)
	}
}

// TestKeyIsTheSet: a tree's key depends on the set of name=version, not
// on the order it is given in.
func TestKeyIsTheSet(t *testing.T) {
	a := []Package{{"frr", "8.4.4"}, {"libc6", "2.36"}}
	b := []Package{{"libc6", "2.36"}, {"frr", "8.4.4"}}
	c := []Package{{"libc6", "2.37"}, {"frr", "8.4.4"}}
	if Key(a) != Key(b) || Key(a) == Key(c) {
		t.Errorf("keys %s %s %s: want the first two equal, the third not", Key(a), Key(b), Key(c))
	}
}

// fakeApt puts apt-cache, apt-get, dpkg-deb and dpkg on PATH that act on
// a pretend archive: version 1.0 of every package, a .deb being a text
// file naming it. Every call is appended to the returned log file. With
// lists false, apt-cache finds nothing until apt-get update has run.
func fakeApt(t *testing.T, lists bool) string {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(bin, "calls")
	listed := filepath.Join(bin, "listed")
	if lists {
		if err := os.WriteFile(listed, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scripts := map[string]string{
		"apt-cache": `[ -e ` + listed + ` ] || { echo "E: No packages found" >&2; exit 100; }
shift 2; for p; do printf 'Package: %s\nVersion: 1:1.0\n\n' "$p"; done`,
		"apt-get": `case $1 in
update) touch ` + listed + ` ;;
download) shift 4; for s; do printf '%s\n%s\n' "${s%%=*}" "${s#*=}" > "$(echo "${s%%=*}_${s#*=}" | sed 's/:/%3a/')_amd64.deb"; done ;;
esac`,
		"dpkg-deb": `cat "$3"`,
		"dpkg":     `name=$(head -n1 "$2"); mkdir -p "$3/usr/share/$name"; cp "$2" "$3/usr/share/$name/deb"`,
	}
	for name, body := range scripts {
		script := "#!/bin/sh\necho " + name + " \"$@\" >> " + log + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return log
}

func calls(t *testing.T, log string) string {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// TestFetchCachesByVersion: a cold fetch resolves the unpinned packages,
// downloads every .deb in one call and unpacks them into one tree; a warm
// one calls nothing and returns the same tree.
func TestFetchCachesByVersion(t *testing.T) {
	log := fakeApt(t, true)
	cache := t.TempDir()
	specs := []string{"frr=8.4.4-1", "libc6", "busybox-static"}
	tree, err := Fetch(context.Background(), cache, specs)
	if err != nil {
		t.Fatal(err)
	}
	if v := tree.Version("libc6"); v != "1:1.0" {
		t.Errorf("libc6 at %q, want apt's candidate 1:1.0", v)
	}
	if v := tree.Version("frr"); v != "8.4.4-1" {
		t.Errorf("frr at %q, want the pinned 8.4.4-1", v)
	}
	for _, name := range []string{"frr", "libc6", "busybox-static"} {
		data, err := os.ReadFile(filepath.Join(tree.Dir, "usr/share", name, "deb"))
		if err != nil || !strings.HasPrefix(string(data), name+"\n") {
			t.Errorf("tree lacks %s's files: %v %q", name, err, data)
		}
	}
	if c := calls(t, log); strings.Count(c, "apt-get download") != 1 || !strings.Contains(c, "apt-cache show --no-all-versions libc6 busybox-static") {
		t.Errorf("cold fetch calls:\n%s", c)
	}
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	again, err := Fetch(context.Background(), cache, specs)
	if err != nil {
		t.Fatal(err)
	}
	if again.Dir != tree.Dir {
		t.Errorf("warm fetch gave %s, want %s", again.Dir, tree.Dir)
	}
	if c := calls(t, log); c != "" {
		t.Errorf("warm fetch called:\n%s", c)
	}
}

// TestFetchUpdatesListsOnce: on a machine whose apt has no package lists
// yet, Fetch runs apt-get update and succeeds.
func TestFetchUpdatesListsOnce(t *testing.T) {
	log := fakeApt(t, false)
	if _, err := Fetch(context.Background(), t.TempDir(), []string{"tini"}); err != nil {
		t.Fatal(err)
	}
	if c := calls(t, log); strings.Count(c, "apt-get update") != 1 {
		t.Errorf("calls:\n%s", c)
	}
}
