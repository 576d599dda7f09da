// Package cmd_test checks that the tree says who owns what: a package in
// internal/<binary>/ is linked by that binary alone; a package directly in
// internal/ is a leaf (types, clients, rules, conversions) that two or more
// binaries share; and the code that changes a node's kernel belongs to
// meshnetd (and to the lab, which runs meshnetds), never to the controller,
// the kubectl plugin or the CNI plugin; and docs/architecture.md's package
// map is the tree.
package cmd_test

import (
	"os"
	"os/exec"
	"path"
	"regexp"
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

// architectureRow is a row of docs/architecture.md's package map: a folder
// of internal/ and, in backquotes, the packages it holds.
var architectureRow = regexp.MustCompile("(?m)^\\| `internal/([a-z-]*)/?` \\| (.*) \\|$")

// TestArchitectureMapIsTheTree: docs/architecture.md's package map names
// each package of internal/ in the row of its folder (a binary's, or the
// shared leaves'), and no package that is not there, so that the map a
// reader starts from is the tree.
func TestArchitectureMapIsTheTree(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{} // folder ("" for internal/ itself) -> packages
	for _, m := range architectureRow.FindAllStringSubmatch(string(doc), -1) {
		for _, name := range regexp.MustCompile("`([a-z][a-z0-9]*)`").FindAllStringSubmatch(m[2], -1) {
			documented[m[1]] = append(documented[m[1]], name[1])
		}
	}
	if len(documented) == 0 {
		t.Fatal("docs/architecture.md has no package map (rows | `internal/<folder>/` | `pkg` ... |)")
	}
	out, err := exec.Command("go", "list", "../internal/...").Output()
	if err != nil {
		t.Fatalf("go list ./internal/...: %v", err)
	}
	bins := binaries(t)
	inTree := map[string][]string{}
	for _, p := range strings.Fields(string(out)) {
		parts := strings.Split(strings.TrimPrefix(p, module+"internal/"), "/")
		folder, pkg := "", parts[0]
		if _, ok := bins[parts[0]]; ok {
			if len(parts) < 2 {
				continue
			}
			folder, pkg = parts[0], parts[1]
		}
		if !slices.Contains(inTree[folder], pkg) {
			inTree[folder] = append(inTree[folder], pkg)
		}
	}
	for folder, pkgs := range inTree {
		for _, p := range pkgs {
			if !slices.Contains(documented[folder], p) {
				t.Errorf("internal/%s is not in docs/architecture.md's package map, row internal/%s", path.Join(folder, p), folder)
			}
		}
	}
	for folder, pkgs := range documented {
		for _, p := range pkgs {
			if !slices.Contains(inTree[folder], p) {
				t.Errorf("docs/architecture.md's package map names internal/%s, which is not in the tree", path.Join(folder, p))
			}
		}
	}
}
