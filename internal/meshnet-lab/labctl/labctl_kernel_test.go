//go:build kernel

package labctl_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnet-lab/labctl"
)

// buildLab builds what `make lab-bin` builds into one directory.
func buildLab(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := labnet.Build(dir); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"go", "build", "-o", dir, "github.com/meshnet/meshnet/cmd/meshnet-lab"},
		{"go", "build", "-o", dir, "github.com/meshnet/meshnet/cmd/kubectl-meshnet"},
		{"go", "build", "-modfile=" + repoFile(t, "tools/go.mod"), "-o", dir, "github.com/fullstorydev/grpcurl/cmd/grpcurl"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return dir
}

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// labUp brings a lab up with bin's meshnet-lab, as `make lab` does, for the
// topology file at rel (from the repository's root), and returns its state
// directory and the guide it printed. The lab goes down at the test's end.
func labUp(t *testing.T, bin, rel string) (dir, guide string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set; run through `make test-kernel` (hack/controlplane.sh builds kube-apiserver and etcd)")
	}
	dir = filepath.Join(t.TempDir(), "lab")
	lab := filepath.Join(bin, "meshnet-lab")
	out, err := exec.Command(lab, "up", "-dir", dir, "-bin", bin, repoFile(t, rel)).CombinedOutput()
	t.Cleanup(func() { _ = exec.Command(lab, "down", "-dir", dir).Run() })
	if err != nil {
		t.Fatalf("meshnet-lab up: %v\n%s", err, out)
	}
	t.Logf("$ meshnet-lab up %s\n%s", rel, out)
	return dir, string(out)
}

// TestKernelLabUpRunsItsGuideAndDownLeavesNothing brings a lab up with the
// meshnet-lab binary as `make lab` does, runs every command the printed
// guide offers (but kubectl edit, which needs an editor) exactly as printed,
// and checks that down removes every namespace, interface, process and file.
func TestKernelLabUpRunsItsGuideAndDownLeavesNothing(t *testing.T) {
	bin := buildLab(t)
	lab := filepath.Join(bin, "meshnet-lab")
	// A containerlab file runs its nodes' images, which the emulated lab's
	// pods cannot: refused at once, saying where it runs.
	clab := exec.Command(lab, "up", "-dir", filepath.Join(t.TempDir(), "clab"), "-bin", bin, repoFile(t, "examples/frr-ospf/frr-ospf.clab.yml"))
	if out, err := clab.CombinedOutput(); err == nil || !strings.Contains(string(out), "meshnet-lab up -real (make lab)") {
		t.Errorf("meshnet-lab up (emulated) of a containerlab file: %v\n%s\nwant it refused, naming meshnet-lab up -real", err, out)
	}
	dir, guide := labUp(t, bin, "examples/physical-peer/topology.yml")

	// The page the guide prints draws the physical device as its own node.
	p := openPage(t, pageURL(t, guide))
	p.waitFor("r1, r2 and the physical device phy1 drawn, 2 links", `nodes().length === 3 && edges().length === 2`, 10*time.Second)
	if kind := eval[string](p, `document.querySelector('#graph g.node[data-id="physical:phy1"]')?.dataset.kind ?? ""`); kind != "physical" {
		t.Errorf("phy1 drawn as %q, want its own node of kind physical", kind)
	}
	// A click on its link shows r2's end from the kernel and the device as
	// the far end.
	p.clickEdge("r2:eth2--physical:phy1:eth1")
	p.waitFor("r2's end and the physical device in the link's detail",
		`['10.0.1.1/30', 'phy1 (physical device, VTEP 10.250.0.200)', 'eth1', '5001'].every(s => document.getElementById('detail').textContent.includes(s))`,
		5*time.Second)
	p.screenshot("physical-peer.png")
	p.close()

	var env []string
	ran := 0
	for _, line := range strings.Split(guide, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "  #")
		switch {
		case strings.HasPrefix(cmd, "export "):
			env = append(env, os.ExpandEnv(strings.TrimPrefix(cmd, "export ")))
			continue
		case strings.HasPrefix(cmd, "kubectl edit"), !strings.HasPrefix(line, "  "), !isCommand(cmd):
			continue
		}
		c := exec.Command("bash", "-o", "pipefail", "-c", cmd)
		c.Env = append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Errorf("guide command failed: %s: %v\n%s", cmd, err, out)
			continue
		}
		ran++
	}
	if ran < 10 {
		t.Errorf("ran %d commands of the guide, want at least 10 (kubectl, ping, grpcurl, curl)", ran)
	}

	down, err := exec.Command(lab, "down", "-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("meshnet-lab down: %v\n%s", err, down)
	}
	t.Logf("$ meshnet-lab down\n%s", down)
	if names, _ := filepath.Glob("/run/netns/" + labctl.NetnsPrefix + "*"); len(names) > 0 {
		t.Errorf("namespaces left after down: %v", names)
	}
	if _, err := os.Stat("/sys/class/net/meshnet-lab0"); err == nil {
		t.Error("the host's node-network interface meshnet-lab0 is left after down")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left after down (%v)", dir, err)
	}
	if out, err := exec.Command("pgrep", "-f", bin).CombinedOutput(); err == nil {
		t.Errorf("processes of the lab left after down:\n%s", out)
	}
}

// isCommand tells the guide's command lines from its descriptions.
func isCommand(s string) bool {
	for _, p := range []string{"kubectl ", "ip netns exec ", "curl ", "grpcurl ", "/"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
