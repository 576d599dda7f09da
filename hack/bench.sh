#!/usr/bin/env bash
# Runs every benchmark: plain ones, kernel-tier ones (root, network
# namespaces), and vm-tier ones inside the qemu VM. `make bench` calls it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash hack/deps.sh
KUBEBUILDER_ASSETS=$(bash hack/controlplane.sh)
export KUBEBUILDER_ASSETS

echo "=== unit benchmarks"
go test -run '^$' -bench . -benchmem ./...
echo "=== cluster benchmarks"
go test -tags cluster -run '^$' -bench '^BenchmarkCluster' -benchtime 6x ./...
echo "=== kernel benchmarks"
kbench() { go test -tags kernel -run '^$' -bench "$1" -benchtime "$2" "${@:3}"; }
# Each iteration of these is already many operations: they report p50/p99.
kbench '^BenchmarkKernelAdd$' 100x ./internal/meshnetd/podlinks
kbench '^BenchmarkKernelWire100Pods$' 3x ./internal/meshnetd/podlinks
kbench '^BenchmarkKernelEditToKernel$' 1x ./internal/meshnet-controller/controller
kbench '^BenchmarkKernelRuntimeChangeToStatus$' 1x ./internal/meshnet-controller/controller
kbench '^BenchmarkKernelBatch1000Links$' 4x -timeout 30m ./internal/meshnet-controller/controller
kbench '^BenchmarkKernelEditLinks$' 4x -timeout 60m ./internal/meshnet-controller/controller
kbench '^BenchmarkKernel(ListLinks|Scrape)1000' 1s -p 1 ./internal/meshnetd/podlinks ./internal/meshnetd/metrics
kbench '^BenchmarkKernelReadLinkWideNetns$' 200x ./internal/meshnetd/links
kbench '^BenchmarkKernelReadAllWideNetns$' 20x ./internal/meshnetd/links
kbench '^BenchmarkKernelCaptureVXLAN$' 3x ./internal/meshnetd/capture
echo "=== vm benchmarks"
go tool -modfile=tools/go.mod gotestsum --format standard-verbose --raw-command -- \
	go run ./hack/vmtest -tags vm ./... -test.run='^$' -test.bench=BenchmarkVM -test.benchmem
