// Package netnstest makes network namespaces for kernel-tier tests and
// removes them when the test ends.
//
// It fails the test, never skips it, when the host cannot make namespaces:
// the kernel tier either runs or says why it cannot.
package netnstest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// New creates a named network namespace and returns its path. The namespace
// is removed by t.Cleanup, taking every interface inside it along.
func New(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("kernel tier needs root to create network namespaces (euid %d)", os.Geteuid())
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() { remove(t, n) })
	return n.Path()
}

func remove(t testing.TB, n ns.NetNS) {
	if err := n.Close(); err != nil {
		t.Errorf("close network namespace %s: %v", n.Path(), err)
	}
	if err := testutils.UnmountNS(n); err != nil {
		t.Errorf("remove network namespace %s: %v", n.Path(), err)
	}
}

// Run runs a command inside the namespace at path (through nsenter, so the
// test's own threads never change namespace) and returns its combined output.
func Run(path string, name string, args ...string) (string, error) {
	argv := append([]string{"--net=" + path, "--", name}, args...)
	out, err := exec.Command("nsenter", argv...).CombinedOutput()
	return string(out), err
}

// IP runs ip with args inside the namespace at path, failing the test with
// its output on error.
func IP(t testing.TB, path string, args ...string) {
	t.Helper()
	if out, err := Run(path, "ip", args...); err != nil {
		t.Fatalf("ip %v in %s: %v\n%s", args, path, err, out)
	}
}

// LinkConfig is dev's link and qdiscs in the namespace at path, as ip -d
// link and tc print them: what a test of something that must leave the
// link alone compares before and after.
func LinkConfig(t testing.TB, path, dev string) string {
	t.Helper()
	link, err := Run(path, "ip", "-d", "link", "show", dev)
	if err != nil {
		t.Fatalf("ip -d link show %s in %s: %v\n%s", dev, path, err, link)
	}
	qdisc, err := Run(path, "tc", "qdisc", "show", "dev", dev)
	if err != nil {
		t.Fatalf("tc qdisc show dev %s in %s: %v\n%s", dev, path, err, qdisc)
	}
	return link + qdisc
}
