#!/bin/sh
# PID 1 of the vm test tier's VM. Prepares what network tests need, loads the
# kernel modules in dependency order, runs every test binary under /tests and
# reports on /dev/ttyS1 (the host reads it; the kernel console is ttyS0):
#   <marker> boot <uptime> | fatal <reason> | start <n> | exit <n> <status> | done
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
out=/dev/ttyS1
marker=$(cat /tests/marker)

say() { echo "$marker $*" >"$out"; }
fatal() {
	say fatal "$*"
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs run /run
mount -t tmpfs tmp /tmp
mount -t bpf bpf /sys/fs/bpf
# /var/run is a link to /run: netns bind mounts (ip netns, CNI's testutils)
# go to /var/run/netns on tmpfs.
mkdir -p /run/netns
stty -F "$out" raw -echo || fatal "stty $out failed"

release=$(uname -r)
while read -r m; do
	err=$(insmod "/lib/modules/$release/$m" 2>&1) || fatal "insmod $m: $err"
done <"/lib/modules/$release/modules.load"
# A kernel without netem proves nothing.
[ -d /sys/module/sch_netem ] || fatal "sch_netem is not loaded"
ip link set lo up || fatal "ip link set lo up failed"
# The VM has no NIC; kube-apiserver wants a host address to advertise (that
# of the interface holding the default route), so a dummy one stands in.
ip link add host0 type dummy && ip addr add 10.0.2.15/24 dev host0 &&
	ip link set host0 up && ip route add default dev host0 || fatal "host0 setup failed"
echo "127.0.0.1 localhost" >/etc/hosts

# The disk (hack/vmtest/disk.go): the control plane for envtest, kubectl
# and grpcurl, and the FRR image's tree.
if [ -f /tests/disk ]; then
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	mkdir -p /opt/disk
	err=$(mount -t ext4 -o ro /dev/vda /opt/disk 2>&1) || fatal "mount /dev/vda: $err"
	if [ -d /opt/disk/kube ]; then
		export KUBEBUILDER_ASSETS=/opt/disk/kube
		# kube-apiserver takes from half a minute (idle host) to over two
		# minutes (busy host) to start on emulated CPUs; envtest waits 20s.
		export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=3m
	fi
	export PATH="$PATH:/opt/disk/bin"
	# The FRR image's Debian tree, which the FRR image's vm test builds it from.
	[ -d /opt/disk/frr ] && export MESHNET_FRR_TREE=/opt/disk/frr
fi
# The lab's programs (internal/meshnet-lab/lab/labnet), prebuilt: the VM has no Go.
[ -d /lab ] && export MESHNET_LAB_BIN=/lab

# vmtest -lab: the lab of /tests/lab.yml instead of tests, and a shell on
# the terminal.
if [ -f /tests/lab.yml ]; then
	stty -F "$out" sane
	echo "vmtest: starting the lab; kube-apiserver takes a minute or two on emulated CPUs" >"$out"
	/lab/meshnet-lab up -bin /lab /tests/lab.yml >"$out" 2>&1
	echo "vmtest: a shell in the VM, whose kernel has sch_netem; poweroff -f ends the VM and the lab" >"$out"
	setsid -c -w sh -i <"$out" >"$out" 2>&1
	poweroff -f
fi

say boot "$(cut -d' ' -f1 /proc/uptime)"
for dir in /tests/[0-9]*; do
	n=${dir#/tests/}
	set --
	while IFS= read -r arg; do set -- "$@" "$arg"; done </tests/args
	say start "$n"
	(cd "$dir" && exec ./test "$@") >"$out" 2>&1 </dev/null
	say exit "$n" "$?"
done
say done
poweroff -f
