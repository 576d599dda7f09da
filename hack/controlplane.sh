#!/usr/bin/env bash
# Builds Kubernetes components and etcd from the Go module proxy at the versions
# pinned in tools/kubernetes/go.mod and tools/etcd/go.mod, cached by version
# outside the repo, and prints the directory holding them (the envtest
# BinaryAssetsDirectory, KUBEBUILDER_ASSETS).
#
#   hack/controlplane.sh                 kube-apiserver and etcd (cluster tier, lab)
#   hack/controlplane.sh --nodes         also kube-controller-manager, kube-scheduler,
#                                        kubelet and kube-proxy (real nodes)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MESHNET_CACHE:-/var/cache/meshnet}

version_of() { # module go.mod -> version
	awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print $NF; exit }' "$2"
}
kube=$(version_of k8s.io/kubernetes "$root/tools/kubernetes/go.mod")
etcd=$(version_of go.etcd.io/etcd/server/v3 "$root/tools/etcd/go.mod")
# The version stamped into the binaries, as Kubernetes' own build does
# (hack/lib/version.sh there): kubectl get nodes and kubectl version then
# say v1.37.2, not v0.0.0-master.
major=${kube%%.*}; major=${major#v}
minor=${kube#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# Cached by version and by the flags they were built with.
flags=$(printf '%s' "$ldflags" | sha256sum | cut -c1-8)
dir="$cache/controlplane/kube-$kube-etcd-$etcd-$flags"
mkdir -p "$dir"

components=(etcd kube-apiserver)
if [ "${1:-}" = --nodes ]; then
	components+=(kube-controller-manager kube-scheduler kubelet kube-proxy)
fi

build() { # name
	local name=$1 module=kubernetes pkg=./$1
	if [ -x "$dir/$name" ]; then return; fi
	[ "$name" = etcd ] && module=etcd pkg=.
	echo "building $name $([ "$name" = etcd ] && echo "$etcd" || echo "$kube") into $dir (cold: kube-apiserver about 10 minutes, each other component 1-3)" >&2
	local flags=$ldflags
	[ "$name" = etcd ] && flags='-s -w'
	(cd "$root/tools/$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$dir/$name.tmp" "$pkg")
	mv "$dir/$name.tmp" "$dir/$name"
}
for c in "${components[@]}"; do build "$c"; done
echo "$dir"
