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
