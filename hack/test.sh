#!/usr/bin/env bash
# Runs every test tier (docs/testing.md) and sums them up; `make test` calls it.
# With tier names as arguments it runs only those: hack/test.sh unit cluster
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
results=${MESHNET_RESULTS:-$root/.cache/test-results}
rm -rf "$results" && mkdir -p "$results"
tiers=("$@")
[ ${#tiers[@]} -gt 0 ] || tiers=(unit kernel vm cluster node)

# The unit tier needs nothing but Go: make test-unit installs nothing (no
# qemu, no browser, no Kubernetes build).
if [ "${tiers[*]}" != unit ]; then
	bash hack/deps.sh || { echo "test: installing the test dependencies failed" >&2; exit 1; }
	KUBEBUILDER_ASSETS=$(bash hack/controlplane.sh) || { echo "test: building kube-apiserver and etcd failed" >&2; exit 1; }
	export KUBEBUILDER_ASSETS
fi

# The node tier's components (kubelet, kube-controller-manager, kube-scheduler,
# kube-proxy, meshnet's binaries) take 10 minutes or more to build on a cold
# cache. They build in the background at the lowest priority while the other
# tiers run, which leave a core idle much of the time waiting on the kernel,
# qemu or the API server; the node tier waits for them.
node_build=
case " ${tiers[*]} " in
*" node "*)
	if [ ${#tiers[@]} -gt 1 ] && [ "$(id -u)" = 0 ]; then
		mkdir -p "$results"
		(nice -n 19 bash hack/controlplane.sh --nodes && nice -n 19 make -s node-bin) >"$results/node-build.log" 2>&1 &
		node_build=$!
	fi
	;;
esac

gotestsum() { go tool -modfile=tools/go.mod gotestsum --format "${format:-testname}" --jsonfile "$results/$1.json" "${@:2}"; }

for tier in "${tiers[@]}"; do
	echo "=== tier $tier"
	case $tier in
	# Under the race detector: meshnetd and the controller are concurrent
	# throughout, and a race is a bug whether or not a test trips on it.
	unit) gotestsum unit -- -race -count=1 ./... ;;
	kernel)
		if [ "$(id -u)" != 0 ]; then
			echo "kernel: this tier needs root (it makes network namespaces)" >&2
			continue
		fi
		# -artifacts keeps what tests save (the topology page's screenshots).
		mkdir -p "$results/kernel-artifacts"
		gotestsum kernel -- -tags kernel -run '^TestKernel' -count=1 -p 1 -artifacts -outputdir "$results/kernel-artifacts" ./...
		;;
	# Verbose: TestVMScenario's log is the end-to-end demo.
	vm) format=standard-verbose gotestsum vm --raw-command -- go run ./hack/vmtest -tags vm ./... ;;
	cluster) gotestsum cluster -- -tags cluster -run '^TestCluster' -count=1 ./... ;;
	# Real nodes: kubelet, containerd and meshnet's own images and manifests.
	node)
		if [ "$(id -u)" != 0 ]; then
			echo "node: this tier needs root (namespaces, containerd)" >&2
			continue
		fi
		if [ -n "$node_build" ] && ! wait "$node_build"; then
			cat "$results/node-build.log" >&2
		fi
		assets=$(bash hack/controlplane.sh --nodes) && make -s node-bin >/dev/null || {
			echo "node: building kubelet, kube-controller-manager, kube-scheduler, kube-proxy or meshnet's binaries failed" >&2
			continue
		}
		KUBEBUILDER_ASSETS=$assets MESHNET_NODE_BIN=$root/bin gotestsum node -- -tags node -run '^TestNode' -count=1 -p 1 -timeout 40m ./...
		;;
	*) echo "test: unknown tier $tier (unit, kernel, vm, cluster, node)" >&2; exit 2 ;;
	esac
done

reports=()
for tier in "${tiers[@]}"; do reports+=("$tier=$results/$tier.json"); done
echo "=== summary"
go run ./hack/testreport "${reports[@]}"
