#!/usr/bin/env bash
# Installs what the test tiers need on a fresh Debian 12 machine (run as root).
# Idempotent and cheap when everything is present: it asks dpkg first and only
# runs apt-get (update once, then install) for what is missing. Quiet on success.
set -euo pipefail

# vm tier: qemu boots a stock Debian kernel (hack/vm/kernel.sh fetches it with
# apt-get download and unpacks it with dpkg -x) from an initramfs made of
# busybox, the host's iproute2 and ping, and the test binaries.
packages=(
	qemu-system-x86 # qemu-system-x86_64
	busybox-static  # the VM's /bin
	cpio            # packs the initramfs
	kmod            # modinfo, to order kernel modules
	e2fsprogs       # mke2fs -d, for disk images too big for an initramfs
	iproute2        # ip, tc (host and VM)
	iputils-ping    # ping (host and VM)
	gzip
	curl           # REST calls in kernel-tier tests
	util-linux     # nsenter
	prometheus     # real PromQL checks of examples/grafana's dashboard (binary only, no service)
	chromium       # the topology page's test in a real browser (headless; internal/meshnet-lab/labctl)
	tshark         # decodes link captures in kernel-tier tests (internal/meshnetd/capture, internal/meshnetd/gateway)
	iperf3         # load for the capture benchmark (make bench)
	# node tier and make lab: real nodes (internal/meshnet-lab/kubecluster)
	containerd # each node's container runtime (1.6, CRI v1), with containerd-shim-runc-v2
	runc       # its OCI runtime
	iptables   # the bridge CNI's masquerade and kube-proxy's Services, inside each node
	nftables   # nft, to show meshnetd's underlay table (internal/meshnetd/underlay's kernel tier lists it)
)

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$status" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	# Without package lists (a fresh image) apt-get install finds nothing.
	if ! apt-get install -qq -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
		apt-get update -qq >/dev/null
		apt-get install -qq -y --no-install-recommends "${missing[@]}" >/dev/null
	fi
fi

# The lab's FRR router and Linux host images (node tier, make lab, and their
# kernel-tier tests in internal/meshnet-lab/images) are cut from Debian packages that
# internal/meshnet-lab/images/debian fetches when it needs them: apt-get download at a
# pinned or current version, dpkg -x, never installed; cached by version in
# $MESHNET_CACHE/debian (apt-get update first on a machine without package
# lists). Nothing to install for them here.

# The cluster tier's kube-apiserver and etcd are built by hack/controlplane.sh,
# which prints their directory for KUBEBUILDER_ASSETS.
