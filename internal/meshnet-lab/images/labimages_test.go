package images

import (
	"archive/tar"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// baseTree is what a tree of basePackages holds of basePaths, and files
// that no image takes.
func baseTree() []string {
	return []string{"usr/bin/tini", "bin/ip", "sbin/ip -> /bin/ip", "bin/ss", "sbin/tc", "sbin/bridge",
		"etc/iproute2/rt_tables", "etc/iproute2/rt_protos.d/", "usr/lib/x86_64-linux-gnu/tc/normal.dist",
		"bin/ping", "bin/ping4 -> ping", "bin/ping6 -> ping",
		"usr/lib/x86_64-linux-gnu/tc/q_atm.so", "usr/share/doc/iproute2/changelog.gz", "sbin/rtmon"}
}

// TestFRRImageLayout: the FRR image is laid out and started as FRR's own
// image: tini runs docker-start; /etc/frr holds the default daemons file,
// an empty frr.conf and vtysh.conf, owned by user frr as are the run and
// log directories; busybox fills in the shell tools; what no path names
// (documentation, tc's plugins) stays out.
func TestFRRImageLayout(t *testing.T) {
	tree := fakeTree(t, append(baseTree(),
		"usr/lib/frr/zebra", "usr/lib/frr/ospfd", "usr/lib/frr/watchfrr", "usr/lib/frr/frrcommon.sh", "usr/lib/frr/frrinit.sh",
		"usr/lib/x86_64-linux-gnu/frr/libfrr.so.0.0.0", "usr/lib/x86_64-linux-gnu/frr/libfrr.so.0 -> libfrr.so.0.0.0",
		"usr/bin/vtysh", "usr/bin/mtracebis", "bin/bash", "usr/bin/install", "lib/x86_64-linux-gnu/libgcc_s.so.1",
		"etc/frr/daemons", "etc/frr/frr.conf", "usr/share/doc/frr/changelog.gz",
		"lib/x86_64-linux-gnu/security/pam_permit.so")...)
	img, err := FRR(tree)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/sbin/tini", "--"}) || !slices.Equal(c.Cmd, []string{"/usr/lib/frr/docker-start"}) || c.User != "" {
		t.Errorf("entrypoint %q, cmd %q, user %q: want FRR image's tini -- docker-start as root", c.Entrypoint, c.Cmd, c.User)
	}
	if !slices.Contains(c.Env, imagePATH) {
		t.Errorf("env %q lacks %s", c.Env, imagePATH)
	}
	got := entries(t, img)
	want := map[string]struct {
		typ      byte
		mode     int64
		uid, gid int
		data     string
	}{
		"etc/frr":                  {tar.TypeDir, 0o755, 100, 101, ""},
		"etc/frr/daemons":          {tar.TypeReg, 0o640, 100, 101, "fake etc/frr/daemons\n"},
		"etc/frr/frr.conf":         {tar.TypeReg, 0o640, 100, 101, ""},
		"etc/frr/vtysh.conf":       {tar.TypeReg, 0o640, 100, 101, "service integrated-vtysh-config\n"},
		"var/run/frr":              {tar.TypeDir, 0o755, 100, 101, ""},
		"var/log/frr":              {tar.TypeDir, 0o755, 100, 101, ""},
		"tmp":                      {tar.TypeDir, 0o1777, 0, 0, ""},
		"usr/lib/frr/zebra":        {tar.TypeReg, 0o755, 0, 0, "fake usr/lib/frr/zebra\n"},
		"usr/bin/vtysh":            {tar.TypeReg, 0o755, 0, 0, "fake usr/bin/vtysh\n"},
		"bin/ip":                   {tar.TypeReg, 0o755, 0, 0, "fake bin/ip\n"},
		"usr/lib/frr/docker-start": {tar.TypeReg, 0o755, 0, 0, dockerStartScript},
	}
	for p, w := range want {
		e, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s missing", p)
		case e.hdr.Typeflag != w.typ || e.hdr.Mode != w.mode || e.hdr.Uid != w.uid || e.hdr.Gid != w.gid || e.data != w.data:
			t.Errorf("%s: type %c mode %o owner %d:%d data %q; want type %c mode %o owner %d:%d data %q",
				p, e.hdr.Typeflag, e.hdr.Mode, e.hdr.Uid, e.hdr.Gid, e.data, w.typ, w.mode, w.uid, w.gid, w.data)
		}
	}
	links := map[string]string{"sbin/tini": "/usr/bin/tini", "sbin/ip": "/bin/ip", "bin/ping6": "ping",
		"usr/lib/x86_64-linux-gnu/frr/libfrr.so.0": "libfrr.so.0.0.0", "bin/sh": "busybox", "bin/traceroute": "busybox"}
	checkLinks(t, got, links)
	if !strings.Contains(got["usr/lib/frr/docker-start"].data, "/usr/lib/frr/watchfrr $(daemon_list)") {
		t.Error("docker-start does not start watchfrr with the daemons of /etc/frr/daemons")
	}
	if !strings.Contains(got["etc/passwd"].data, "\nfrr:x:100:101:") || !strings.Contains(got["etc/group"].data, "\nfrrvty:x:102:frr\n") {
		t.Errorf("passwd/group lack user frr (100:101) in frrvty:\n%s%s", got["etc/passwd"].data, got["etc/group"].data)
	}
	for _, p := range []string{"usr/share/doc/frr/changelog.gz", "usr/lib/x86_64-linux-gnu/tc/q_atm.so", "sbin/rtmon"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is in the image; no path names it", p)
		}
	}
}

// TestHostImageLayout: the host image has the tools as Debian installs
// them (traceroute through its alternatives link, not busybox's), a
// tcpdump user for tcpdump to drop to, and a long-running command.
func TestHostImageLayout(t *testing.T) {
	tree := fakeTree(t, append(baseTree(),
		"usr/bin/traceroute.db", "usr/bin/traceroute6.db -> traceroute.db", "usr/bin/tcpdump", "usr/bin/iperf3")...)
	img, err := Host(tree)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/sbin/tini", "--"}) || len(c.Cmd) != 3 || !strings.Contains(c.Cmd[2], "exec httpd -f") {
		t.Errorf("entrypoint %q, cmd %q: want tini running httpd in the foreground", c.Entrypoint, c.Cmd)
	}
	got := entries(t, img)
	checkLinks(t, got, map[string]string{"usr/bin/traceroute": "traceroute.db", "usr/bin/traceroute6": "traceroute6.db",
		"sbin/tini": "/usr/bin/tini", "bin/sh": "busybox", "bin/httpd": "busybox"})
	for _, p := range []string{"usr/bin/tcpdump", "usr/bin/iperf3", "bin/ip", "bin/ping", "usr/bin/traceroute.db"} {
		if e := got[p]; e.hdr.Typeflag != tar.TypeReg {
			t.Errorf("%s: type %c, want the package's file", p, e.hdr.Typeflag)
		}
	}
	for _, p := range []string{"bin/traceroute", "bin/ip", "bin/ping"} {
		if got[p].hdr.Linkname == "busybox" {
			t.Errorf("%s is busybox's applet; the package's program has its name", p)
		}
	}
	if !strings.Contains(got["etc/passwd"].data, "\ntcpdump:x:") {
		t.Errorf("passwd lacks user tcpdump:\n%s", got["etc/passwd"].data)
	}
}

// TestCutNamesWhatIsMissing: a path no package of the set provides fails
// the build, naming it.
func TestCutNamesWhatIsMissing(t *testing.T) {
	tree := fakeTree(t, baseTree()...)
	_, err := Host(tree)
	if err == nil || !strings.Contains(err.Error(), "usr/bin/traceroute.db") {
		t.Fatalf("host image from a tree without traceroute: %v, want an error naming usr/bin/traceroute.db", err)
	}
}

// TestLayerOwnersAndDirectories: Build writes explicit directories with
// their owners and modes, makes root's 0755 parents for the others, and
// refuses a path listed twice.
func TestLayerOwnersAndDirectories(t *testing.T) {
	img, err := Build([]File{
		{Path: "var/run/frr", Dir: true, Mode: 0o750, UID: 100, GID: 101},
		{Path: "var/run/frr/x", Mode: 0o600, Data: []byte("x"), UID: 100, GID: 101},
		{Path: "a/b/c", Mode: 0o644, Source: writeTemp(t, "c")},
	}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := entries(t, img)
	for p, w := range map[string][3]int64{"var": {0o755, 0, 0}, "var/run": {0o755, 0, 0}, "var/run/frr": {0o750, 100, 101},
		"var/run/frr/x": {0o600, 100, 101}, "a/b": {0o755, 0, 0}, "a/b/c": {0o644, 0, 0}} {
		h := got[p].hdr
		if h.Mode != w[0] || int64(h.Uid) != w[1] || int64(h.Gid) != w[2] {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", p, h.Mode, h.Uid, h.Gid, w[0], w[1], w[2])
		}
	}
	if got["a/b/c"].data != "c" {
		t.Errorf("a/b/c holds %q, want its source's c", got["a/b/c"].data)
	}
	if _, err := Build([]File{{Path: "x", Data: []byte{}}, {Path: "x", Link: "y"}}, Config{}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a path listed twice: %v, want an error", err)
	}
}

func checkLinks(t *testing.T, got map[string]entry, links map[string]string) {
	t.Helper()
	for p, target := range links {
		if e := got[p]; e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != target {
			t.Errorf("%s: type %c link %q, want a symlink to %s", p, e.hdr.Typeflag, e.hdr.Linkname, target)
		}
	}
}

func writeTemp(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
