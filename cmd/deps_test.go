// Package cmd_test checks that the tree says who owns what: a package in
// internal/<binary>/ is linked by that binary alone; a package directly in
// internal/ is a leaf (types, clients, rules, conversions) that two or more
// binaries share; and the code that changes a node's kernel belongs to
// meshnetd (and to the lab, which runs meshnetds), never to the controller,
// the kubectl plugin or the CNI plugin.
package cmd_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/meshnet/meshnet/"

// binaries are the programs in cmd/, each with the internal/ packages it
// links.
func binaries(t *testing.T) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string][]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		out, err := exec.Command("go", "list", "-deps", "./"+e.Name()).Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", e.Name(), err)
		}
		for _, p := range strings.Fields(string(out)) {
			if rel, ok := strings.CutPrefix(p, module+"internal/"); ok {
				bins[e.Name()] = append(bins[e.Name()], rel)
			}
		}
	}
	return bins
}

// TestTreeShowsOwners: internal/<binary>/... is linked by that binary
// only, and a package directly in internal/ by at least two (one binary's
// code goes in its folder), so that what a binary carries is its own
// folder and the shared leaves, and the tree says which is which.
func TestTreeShowsOwners(t *testing.T) {
	bins := binaries(t)
	linkers := map[string][]string{} // internal/ package -> the binaries linking it
	for bin, pkgs := range bins {
		for _, p := range pkgs {
			linkers[p] = append(linkers[p], bin)
		}
	}
	out, err := exec.Command("go", "list", "../internal/...").Output()
	if err != nil {
		t.Fatalf("go list ./internal/...: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, module+"internal/")
		by := linkers[rel]
		slices.Sort(by)
		owner, _, _ := strings.Cut(rel, "/")
		if _, ok := bins[owner]; ok {
			for _, bin := range by {
				if bin != owner {
					t.Errorf("%s links internal/%s, which belongs to %s: move what both need into a leaf in internal/ (go list -deps ./cmd/%s)", bin, rel, owner, bin)
				}
			}
			continue
		}
		if len(by) == 1 {
			t.Errorf("internal/%s is linked by %s alone: it belongs in internal/%s/", rel, by[0], by[0])
		}
	}
}

// kernel are the packages, meshnet's and the libraries', that change or
// read a node's kernel, besides those in internal/meshnetd/.
var kernel = []string{
	module + "internal/netem",
	"github.com/vishvananda/netlink",
	"github.com/florianl/go-tc",
}

func TestBinariesLinkNoKernelCode(t *testing.T) {
	for _, bin := range []string{"meshnet-controller", "kubectl-meshnet", "meshnet-cni"} {
		out, err := exec.Command("go", "list", "-deps", "./"+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", bin, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if slices.Contains(kernel, dep) || strings.HasPrefix(dep, module+"internal/meshnetd/") {
				t.Errorf("%s links %s, kernel code of meshnetd's; share a leaf instead (go list -deps ./cmd/%s)", bin, dep, bin)
			}
		}
	}
}
