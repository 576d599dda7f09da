#!/usr/bin/env bash
# Fetches the kernel that the vm test tier boots: the current Debian
# linux-image-cloud-amd64 (a stock distro kernel, which has sch_netem as a
# module, unlike the host's), unpacked without installing it, cached by
# package version under $MESHNET_CACHE/vm/kernel/. Keeps vmlinuz and the
# modules the tests need, in load order, and prints the cache directory
# (keyed by the package version and the module list):
#
#   <dir>/vmlinuz
#   <dir>/release         kernel release (uname -r inside the VM)
#   <dir>/modules/*.ko    the needed modules and their dependencies
#   <dir>/modules.load    module file names, dependencies first
set -euo pipefail

cache=${MESHNET_CACHE:-/var/cache/meshnet}
meta=linux-image-cloud-amd64

# Modules the tiers need; their dependencies (udp_tunnel, ip6_udp_tunnel,
# stp, llc, ...) are added from modinfo. Built-in ones are skipped. The
# disk (kube-apiserver, etcd, kubectl: too big for the initramfs) needs
# virtio_pci, the transport that modinfo does not list as virtio_blk's
# dependency, and ext4 (built into Debian's cloud kernels).
wanted=(
	sch_netem veth vxlan macvlan ifb dummy bridge
	sch_tbf sch_htb sch_fq sch_prio sch_ingress
	cls_u32 cls_bpf cls_matchall cls_flower act_mirred act_gact
	nf_tables nft_fib_inet # meshnetd's underlay guard (internal/meshnetd/underlay)
	virtio_pci virtio_blk ext4
)

# The meta-package depends on the versioned image package at an exact
# version; resolve it now rather than hard-coding one the mirror may drop.
resolve() { # prints "<package> <version>"
	apt-cache show --no-all-versions "$meta" 2>/dev/null |
		sed -n 's/^Depends:.*\(linux-image-[^ ,]*\) (= \([^)]*\)).*/\1 \2/p' | head -n1
}
resolved=$(resolve)
if [ -z "$resolved" ]; then
	apt-get update -qq >/dev/null
	resolved=$(resolve)
fi
if [ -z "$resolved" ]; then
	echo "kernel.sh: cannot resolve $meta to a linux-image package (apt-cache show $meta)" >&2
	exit 1
fi
read -r pkg version <<<"$resolved"
# The module list is part of the key: a cached kernel lacking a module
# added to wanted is fetched again.
dir="$cache/vm/kernel/${pkg}_${version}_$(printf '%s\n' "${wanted[@]}" | sha256sum | cut -c1-8)"
if [ -f "$dir/modules.load" ]; then
	echo "$dir"
	exit 0
fi

echo "kernel.sh: fetching $pkg $version into $dir" >&2
mkdir -p "$cache/vm/kernel"
work=$(mktemp -d "$cache/vm/kernel/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt's sandbox user cannot write to a root-only cache directory.
chmod 755 "$work"
(cd "$work" && apt-get download -q=2 -o APT::Sandbox::User=root "$pkg=$version")
dpkg -x "$work"/*.deb "$work/root"

release=${pkg#linux-image-}
tree="$work/root/lib/modules/$release"
if [ ! -d "$tree" ]; then
	echo "kernel.sh: $pkg has no lib/modules/$release" >&2
	exit 1
fi
out="$work/out"
mkdir -p "$out/modules"
cp "$work/root/boot/vmlinuz-$release" "$out/vmlinuz"
echo "$release" >"$out/release"

# module name -> path relative to $tree, or "builtin", or nothing.
locate() {
	local name=${1//-/_} path
	path=$(awk -v n="$name" '{ f = $0; sub(/.*\//, "", f); sub(/\.ko.*$/, "", f); gsub(/-/, "_", f); if (f == n) { print; exit } }' "$tree/modules.order")
	if [ -n "$path" ]; then
		echo "$path"
	elif awk -v n="$name" '{ f = $0; sub(/.*\//, "", f); sub(/\.ko$/, "", f); gsub(/-/, "_", f); if (f == n) found = 1 } END { exit !found }' "$tree/modules.builtin"; then
		echo builtin
	fi
}

declare -A seen=()
order=()
visit() { # name: dependencies first, then the module itself
	local name=${1//-/_} path dep
	[ -n "${seen[$name]:-}" ] && return
	seen[$name]=1
	path=$(locate "$name")
	case "$path" in
	"") echo "kernel.sh: module $name is neither in $pkg nor built in" >&2; exit 1 ;;
	builtin) return ;;
	esac
	for dep in $(modinfo -F depends "$tree/$path" | tr ',' ' '); do
		visit "$dep"
	done
	case "$path" in
	*.ko) cp "$tree/$path" "$out/modules/$name.ko" ;;
	*.ko.xz) xz -dc "$tree/$path" >"$out/modules/$name.ko" ;;
	*.ko.zst) zstd -qdc "$tree/$path" >"$out/modules/$name.ko" ;;
	*) echo "kernel.sh: unknown module format $path" >&2; exit 1 ;;
	esac
	order+=("$name.ko")
}
for m in "${wanted[@]}"; do visit "$m"; done
if [ ! -f "$out/modules/sch_netem.ko" ]; then
	echo "kernel.sh: $pkg has no sch_netem module; the vm tier would prove nothing" >&2
	exit 1
fi
printf '%s\n' "${order[@]}" >"$out/modules.load"

# Another run may have won the race; its directory is as good as ours.
mv -T "$out" "$dir" 2>/dev/null || [ -f "$dir/modules.load" ]
echo "$dir"
