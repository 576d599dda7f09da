package images

// The lab's images, FRR (frr.go) and host (hostimage.go), are cut (Cut)
// from trees of Debian packages that debian.Fetch unpacks. This is what
// they share.

// imagePATH is both images' PATH, that of FRR's own image (Alpine's).
const imagePATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// basePackages are what both lab images hold: libc, busybox, tini,
// iproute2 and ping, each with the libraries it links. busybox is
// Debian's dynamic one: busybox-static prefers its own applets to PATH,
// so its sh would run busybox's ip for a lab file's `ip ...`.
func basePackages() []string {
	return []string{"libc6", "busybox", "tini",
		"iproute2", "libbpf1", "libelf1", "zlib1g", "libbsd0", "libmd0", "libmnl0", "libxtables12", "libselinux1", "libpcre2-8-0",
		"libtirpc3", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libcom-err2", "libkrb5support0", "libkeyutils1",
		"iputils-ping", "libidn2-0", "libunistring2"}
}

// basePaths are the files of basePackages both images take.
func basePaths() []string {
	return []string{"bin/busybox", "usr/bin/tini",
		"bin/ip", "sbin/ip", "bin/ss", "sbin/tc", "sbin/bridge", "etc/iproute2",
		// tc netem's delay distributions; tc's plugins link what is not here.
		"usr/lib/x86_64-linux-gnu/tc/*.dist",
		"bin/ping", "bin/ping4", "bin/ping6"}
}

// baseFiles are the files both images make: tini where FRR's image has
// it, /tmp and root's home.
func baseFiles() []File {
	return []File{
		{Path: "sbin/tini", Link: "/usr/bin/tini"},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "root", Dir: true, Mode: 0o700},
	}
}
