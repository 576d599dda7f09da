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
echo "=== kernel benchmarks"
go test -tags kernel -run '^$' -bench '^BenchmarkKernel' -benchmem -p 1 ./...
echo "=== vm benchmarks"
go tool -modfile=tools/go.mod gotestsum --format standard-verbose --raw-command -- \
	go run ./hack/vmtest -tags vm ./... -test.run='^$' -test.bench=BenchmarkVM -test.benchmem
