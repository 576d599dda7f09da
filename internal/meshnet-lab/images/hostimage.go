package images

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// HostNames are the names lab files pull a Linux host with network tools
// by; the cluster's registry serves the host image under every one of
// them. containerlab's lab examples use wbitt/network-multitool (most
// with :alpine-extra, frr01 with :3.22.2) and ghcr.io/hellt/network-multitool;
// older ones praqma/network-multitool, wbitt's former name.
//
//	docker.io/wbitt/network-multitool:latest, alpine-extra, alpine-minimal, extra, minimal, 3.22.2
//	ghcr.io/hellt/network-multitool:latest
//	docker.io/praqma/network-multitool:latest
func HostNames() []string {
	var names []string
	for _, tag := range []string{"latest", "alpine-extra", "alpine-minimal", "extra", "minimal", "3.22.2"} {
		names = append(names, "docker.io/wbitt/network-multitool:"+tag)
	}
	return append(names, "ghcr.io/hellt/network-multitool:latest", "docker.io/praqma/network-multitool:latest")
}

// HostPackages are the Debian packages the host image is cut from: the
// tools (traceroute, tcpdump, iperf3) with the libraries they link, and
// those both lab images hold (iproute2, ping, busybox, tini).
func HostPackages() []string {
	tools := []string{"traceroute", "tcpdump", "libpcap0.8", "libdbus-1-3", "libsystemd0", "libgcrypt20",
		"libgpg-error0", "liblz4-1", "liblzma5", "libzstd1", "libcap2", "libssl3", "iperf3", "libiperf0", "libsctp1"}
	return append(tools, basePackages()...)
}

// Host is the lab's Linux host image, cut from a tree of HostPackages:
// iproute2 (ip, ss, tc, bridge), ping, traceroute, tcpdump, iperf3 and
// busybox's shell and tools. Like network-multitool, whose names it is
// served under, it runs a web server on port 80 ($HTTP_PORT) that answers
// with the host's name, so it stays up as a pod and is something to reach.
func Host(tree string) (v1.Image, error) {
	files := append(baseFiles(),
		// tcpdump drops to user tcpdump, as Debian builds it.
		File{Path: "etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/bin/sh\ntcpdump:x:100:101::/nonexistent:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		File{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\ntcpdump:x:101:\nnogroup:x:65534:\n")},
		// What Debian's update-alternatives would link.
		File{Path: "usr/bin/traceroute", Link: "traceroute.db"},
		File{Path: "usr/bin/traceroute6", Link: "traceroute6.db"},
		File{Path: "var/www", Dir: true, Mode: 0o755},
	)
	cut := Cut{
		Paths: append([]string{"usr/bin/traceroute.db", "usr/bin/traceroute6.db", "usr/bin/tcpdump", "usr/bin/iperf3"},
			basePaths()...),
		Busybox: "bin/busybox",
		Files:   files,
	}
	list, err := cut.files(tree)
	if err != nil {
		return nil, fmt.Errorf("host image: %w", err)
	}
	return Build(list, Config{
		Entrypoint: []string{"/sbin/tini", "--"},
		Cmd:        []string{"/bin/sh", "-c", `hostname > /var/www/index.html && exec httpd -f -p "${HTTP_PORT:-80}" -h /var/www`},
		Env:        []string{imagePATH},
	})
}
