# meshnet: `make lab` (the whole stack on real nodes on this machine), `make build`,
# `make test` (every tier), `make check` (format, vet, generated code).
SHELL := /usr/bin/env bash
GO ?= go
BIN ?= bin
CMDS := meshnetd meshnet-controller meshnet-cni kubectl-meshnet
# What every binary's --version and meshnet_build_info say: VERSION (make
# build VERSION=v0.2.0), the commit, and "-modified" for a checkout with
# changes.
VERSION ?= devel
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
VERSION_LDFLAGS := -X github.com/meshnet/meshnet/internal/version.Version=$(VERSION) -X github.com/meshnet/meshnet/internal/version.Commit=$(COMMIT)
CONTROLLER_GEN := $(GO) tool -modfile=tools/go.mod controller-gen

.PHONY: all build lab lab-emulated lab-bin lab-down lab-vm node-bin generate generate-crd generate-proto check test test-unit test-kernel test-vm test-cluster test-node bench clean

all: build

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# The lab runs the meshnet binaries with containernetworking's loopback
# plugin as every node's primary CNI, and grpcurl for the commands it prints.
# make lab's lab is a containerlab file (real routers, FRR); the emulated lab
# runs k8s-topo files only (its pods are network namespaces, no images).
LAB_TOPOLOGY ?= examples/frr-ospf/frr-ospf.clab.yml
LAB_EMULATED_TOPOLOGY ?= examples/line-3/topology.yml
LAB_FLAGS ?=

lab-bin: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/meshnet-lab github.com/containernetworking/plugins/plugins/main/loopback
	CGO_ENABLED=0 $(GO) build -modfile=tools/go.mod -trimpath -o $(BIN)/ github.com/fullstorydev/grpcurl/cmd/grpcurl

# A cluster of real nodes (kubelet, containerd) also needs the primary CNI's
# plugins and the pause image's entrypoint.
node-bin: lab-bin
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./hack/pause github.com/containernetworking/plugins/plugins/main/loopback
	CGO_ENABLED=0 $(GO) build -modfile=tools/go.mod -trimpath -o $(BIN)/ github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local

# The emulated lab: nodes are network namespaces running meshnetd by hand,
# pods are namespaces wired through libcni (fast; the kernel tier's).
lab-emulated: lab-bin
	@bash hack/deps.sh
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh) $(BIN)/meshnet-lab up $(LAB_FLAGS) $(LAB_EMULATED_TOPOLOGY)

# The main job: the lab on real nodes (kube-controller-manager,
# kube-scheduler, and per node containerd, kubelet and kube-proxy), meshnet
# installed with kubectl apply -k deploy/overlays/kind, the routers real pods.
lab: lab-bin node-bin
	@bash hack/deps.sh
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --nodes) $(BIN)/meshnet-lab up -real $(LAB_FLAGS) $(LAB_TOPOLOGY)

lab-down:
	$(GO) run ./cmd/meshnet-lab down

# The same lab inside a qemu VM with a stock Debian kernel (which has
# sch_netem), with a shell there; `poweroff -f` ends it.
lab-vm:
	@bash hack/deps.sh
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh) $(GO) run ./hack/vmtest -lab $(LAB_EMULATED_TOPOLOGY)

generate: generate-crd generate-proto

generate-crd:
	$(CONTROLLER_GEN) object paths=./api/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/crd
	$(CONTROLLER_GEN) rbac:roleName=meshnet-controller paths=./internal/meshnet-controller/controller/... paths=./internal/meshnet-controller/relay/... paths=./internal/meshnet-controller/signer/... paths=./internal/pki/... output:rbac:artifacts:config=deploy/rbac/controller

generate-proto:
	bash hack/gen-proto.sh

# check fails on unformatted code, vet findings, or generated code that is
# stale against its sources.
check: generate
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.' ) ); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags kernel ./...
	$(GO) vet -tags vm ./...
	$(GO) vet -tags cluster ./...
	$(GO) vet -tags node ./...
	@git add -N . && git diff --exit-code --stat -- api deploy || \
	  { echo "generated code is stale: run 'make generate' and commit"; exit 1; }

test: check
	bash hack/test.sh

test-unit test-kernel test-vm test-cluster test-node:
	bash hack/test.sh $(@:test-%=%)

bench:
	bash hack/bench.sh

clean:
	rm -rf $(BIN) .cache
