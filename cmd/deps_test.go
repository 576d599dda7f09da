// Package cmd_test checks what each binary links: the code that changes a
// node's kernel belongs to meshnetd (and to the lab, which runs meshnetds),
// never to the controller, the kubectl plugin or the CNI plugin, which
// share with meshnetd only leaves (types, clients, the access table,
// shaping).
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
