package images

import (
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FRRPackage is the FRR that the router image runs: Debian bookworm's, at
// this exact version (what `show version` says, whatever name the image
// is pulled by). The other packages follow apt's current versions, which
// Debian's security updates move.
const FRRPackage = "frr=8.4.4-1.1~deb12u1"

// The router image's FRR user and groups, as Debian's frr.postinst makes
// them (adduser --system), and the files its start reads and runs.
const (
	frrUID      = 100
	frrGID      = 101
	frrvtyGID   = 102
	frrDaemons  = "etc/frr/daemons"
	dockerStart = "usr/lib/frr/docker-start"
)

// FRRNames are the names lab files pull FRR's own image by, from
// quay.io/frrouting/frr (FRR's registry; containerlab's frr01 example,
// 10.x tags) and docker.io/frrouting/frr (older labs, v-prefixed tags).
// The cluster's registry serves the FRR image under every one of them (a
// registry mirror is asked for frrouting/frr:<tag> either way): a lab
// file runs unchanged, on FRR 8.4.4 whatever its tag says.
//
//	quay.io/frrouting/frr:latest, 8.4.1, 8.4.4, 9.1.0, 10.1.0, 10.2.1, 10.3.1, 10.5.1
//	docker.io/frrouting/frr:latest, v7.5.0, v7.5.1, v8.4.1, 8.4.1
func FRRNames() []string {
	var names []string
	for _, tag := range []string{"latest", "8.4.1", "8.4.4", "9.1.0", "10.1.0", "10.2.1", "10.3.1", "10.5.1"} {
		names = append(names, "quay.io/frrouting/frr:"+tag)
	}
	for _, tag := range []string{"latest", "v7.5.0", "v7.5.1", "v8.4.1", "8.4.1"} {
		names = append(names, "docker.io/frrouting/frr:"+tag)
	}
	return names
}

// FRRPackages are the Debian packages the FRR image is cut from: FRR and
// the libraries its programs link (the list comes from apt-cache depends
// and readelf; every build checks it with elfdeps, failing on a library no
// package provides), PAM's pam_permit (Debian's vtysh authenticates
// through PAM, which /etc/pam.d/frr lets anyone pass), bash for FRR's
// scripts, tini (the init of FRR's own image), coreutils for the
// install(1) FRR's scripts call, and the tools a lab file's exec commands
// use: iproute2 and ping, busybox for the rest.
func FRRPackages() []string {
	frr := []string{FRRPackage, "libyang2", "libc-ares2", "libjson-c5", "libcap2",
		"libcrypt1", "libpam0g", "libaudit1", "libcap-ng0", "libreadline8", "libtinfo6", "libgcc-s1",
		"bash", "coreutils", "libacl1", "libattr1", "libpam-modules"}
	return append(frr, basePackages()...)
}

// FRR is the router image, cut from a tree of FRRPackages, laid out and
// started as FRR's own image (quay.io/frrouting/frr, FRR's
// docker/alpine/Dockerfile): tini runs docker-start, which reads
// /etc/frr/daemons and runs watchfrr, which starts zebra, staticd and
// every daemon enabled there (frrcommon.sh's daemon_list), each loading
// /etc/frr/frr.conf through vtysh and dropping to user frr. /etc/frr holds
// the default daemons file (all protocol daemons off), an empty frr.conf
// and a vtysh.conf for the integrated configuration; lab files bind their
// own daemons and frr.conf over them.
func FRR(tree string) (v1.Image, error) {
	owned := func(f File) File { f.UID, f.GID = frrUID, frrGID; return f }
	files := append(baseFiles(),
		File{Path: "etc/passwd", Mode: 0o644, Data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/bin/sh\nfrr:x:%d:%d:Frr routing suite:/nonexistent:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
			frrUID, frrGID))},
		File{Path: "etc/group", Mode: 0o644, Data: []byte(fmt.Sprintf(
			"root:x:0:\nfrr:x:%d:\nfrrvty:x:%d:frr\nnogroup:x:65534:\n", frrGID, frrvtyGID))},
		owned(File{Path: "etc/frr", Dir: true, Mode: 0o755}),
		owned(File{Path: frrDaemons, Mode: 0o640, Source: filepath.Join(tree, frrDaemons)}),
		owned(File{Path: "etc/frr/frr.conf", Mode: 0o640, Data: []byte{}}),
		owned(File{Path: "etc/frr/vtysh.conf", Mode: 0o640, Data: []byte("service integrated-vtysh-config\n")}),
		owned(File{Path: "var/run/frr", Dir: true, Mode: 0o755}),
		owned(File{Path: "var/log/frr", Dir: true, Mode: 0o755}),
		// FRR's crash logs and per-thread log buffers.
		File{Path: "var/tmp", Dir: true, Mode: 0o1777},
		File{Path: dockerStart, Mode: 0o755, Data: []byte(dockerStartScript)},
		// Debian's (auth only); account too, which Debian's PAM finds in
		// /etc/pam.d/other, so that vtysh says nothing about it.
		File{Path: "etc/pam.d/frr", Mode: 0o644, Data: []byte("auth\tsufficient\tpam_permit.so\naccount\tsufficient\tpam_permit.so\n")},
	)
	cut := Cut{
		Paths: append([]string{"usr/lib/frr", "usr/lib/x86_64-linux-gnu/frr", "usr/bin/vtysh", "usr/bin/mtracebis",
			"lib/x86_64-linux-gnu/security/pam_permit.so", "bin/bash", "usr/bin/install",
			// glibc loads it for pthread_cancel and backtrace (FRR's crash log).
			"lib/x86_64-linux-gnu/libgcc_s.so.1",
		}, basePaths()...),
		Busybox: "bin/busybox",
		Files:   files,
	}
	list, err := cut.files(tree)
	if err != nil {
		return nil, fmt.Errorf("frr image: %w", err)
	}
	return Build(list, Config{
		Entrypoint: []string{"/sbin/tini", "--"},
		Cmd:        []string{"/" + dockerStart},
		Env:        []string{imagePATH},
	})
}

// dockerStartScript is FRR's docker/alpine/docker-start of FRR 8.4.4.
const dockerStartScript = `#!/bin/bash

if [ -r "/lib/lsb/init-functions" ]; then
        . /lib/lsb/init-functions
else
        log_success_msg() {
                echo "$@"
        }
        log_warning_msg() {
                echo "$@" >&2
        }
        log_failure_msg() {
                echo "$@" >&2
        }
fi

source /usr/lib/frr/frrcommon.sh
/usr/lib/frr/watchfrr $(daemon_list)
`
