#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy at the versions pinned
# in tools/*/go.mod, cached by version outside the repo. Prints the directory
# holding both binaries (the envtest BinaryAssetsDirectory).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MESHNET_CACHE:-/var/cache/meshnet}

version_of() { # module go.mod -> version
	awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print $NF; exit }' "$2"
}
kube=$(version_of k8s.io/kubernetes "$root/tools/kube-apiserver/go.mod")
etcd=$(version_of go.etcd.io/etcd/server/v3 "$root/tools/etcd/go.mod")
dir="$cache/controlplane/kube-$kube-etcd-$etcd"
mkdir -p "$dir"

build() { # name
	local name=$1
	if [ -x "$dir/$name" ]; then return; fi
	echo "building $name into $dir (cold build: kube-apiserver takes about 10 minutes)" >&2
	(cd "$root/tools/$name" && CGO_ENABLED=0 go build -trimpath -o "$dir/$name.tmp" .)
	mv "$dir/$name.tmp" "$dir/$name"
}
build etcd
build kube-apiserver
echo "$dir"
