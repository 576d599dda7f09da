// Package cmd_test checks what each binary links: the code that changes a
// node's kernel belongs to meshnetd (and to the lab, which runs meshnetds),
// never to the controller, the kubectl plugin or the CNI plugin, which
// share with meshnetd only leaves (types, clients, the access table,
// shaping); and each package that serves (an API, a reconciler, a CLI) is
// linked by the one binary that runs it.
package cmd_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// kernel are the packages, meshnet's and the libraries', that change or
// read a node's kernel.
var kernel = []string{
	"github.com/meshnet/meshnet/internal/capture",
	"github.com/meshnet/meshnet/internal/daemon",
	"github.com/meshnet/meshnet/internal/linklock",
	"github.com/meshnet/meshnet/internal/links",
	"github.com/meshnet/meshnet/internal/linkserver",
	"github.com/meshnet/meshnet/internal/linkwatch",
	"github.com/meshnet/meshnet/internal/netem",
	"github.com/meshnet/meshnet/internal/podstore",
	"github.com/meshnet/meshnet/internal/wiring",
	"github.com/vishvananda/netlink",
	"github.com/florianl/go-tc",
}

func TestBinariesLinkNoKernelCode(t *testing.T) {
	for _, bin := range []string{"meshnet-controller", "kubectl-meshnet", "meshnet-cni"} {
		out, err := exec.Command("go", "list", "-deps", "./"+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", bin, err)
		}
		deps := strings.Fields(string(out))
		for _, k := range kernel {
			if slices.Contains(deps, k) {
				t.Errorf("%s links %s, kernel code of meshnetd's; share a leaf instead (go list -deps ./cmd/%s)", bin, k, bin)
			}
		}
	}
}

// servers are the packages that serve, by the binary that runs them.
var servers = map[string][]string{
	"meshnetd":           {"daemon", "wiring", "linkserver", "linkwatch", "dataserver", "gateway", "metrics", "topoview"},
	"meshnet-controller": {"controller", "relay", "signer"},
	"kubectl-meshnet":    {"meshnetctl"},
	"meshnet-lab":        {"lab", "labctl", "kubecluster"},
}

// TestServersBelongToOneBinary: a package two binaries share is a leaf
// (types, clients, rules, conversions) with no server in it, so that what
// a binary carries is its own code and those leaves.
func TestServersBelongToOneBinary(t *testing.T) {
	for bin := range servers {
		out, err := exec.Command("go", "list", "-deps", "./"+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", bin, err)
		}
		deps := strings.Fields(string(out))
		for owner, pkgs := range servers {
			for _, p := range pkgs {
				if owner != bin && slices.Contains(deps, "github.com/meshnet/meshnet/internal/"+p) {
					t.Errorf("%s links internal/%s, which %s runs; share a leaf instead (go list -deps ./cmd/%s)", bin, p, owner, bin)
				}
			}
		}
	}
}
