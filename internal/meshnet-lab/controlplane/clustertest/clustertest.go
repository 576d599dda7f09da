// Package clustertest starts a real kube-apiserver and etcd for the cluster
// test tier, with meshnet's CRDs installed.
package clustertest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
)

// Env is a running control plane.
type Env struct {
	ControlPlane *controlplane.ControlPlane
	Environment  *envtest.Environment
	Config       *rest.Config
	Client       client.Client
	Scheme       *runtime.Scheme
}

// Start starts a control plane with the Topology CRD installed and stops it
// when the test ends. It fails the test, saying why, when the binaries are
// missing: the tier must never pass by not running. The CRDs are embedded
// (package crd), so that it works where the source tree is not, as in the
// vm tier's VM.
func Start(t testing.TB) *Env {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("clustertest: KUBEBUILDER_ASSETS is not set: it must name the directory of kube-apiserver and etcd; " +
			"on the host run through `make test-cluster` or set it to the output of hack/controlplane.sh; " +
			"for the vm tier set it on the host before `go run ./hack/vmtest`, which copies the binaries onto the VM's disk")
	}
	cp, err := controlplane.Start(assets)
	if err != nil {
		t.Fatalf("clustertest: %v "+
			"(in the vm tier: the VM needs about 3 GiB (vmtest -m), a non-loopback address and minutes to start it "+
			"($KUBEBUILDER_CONTROLPLANE_START_TIMEOUT), which hack/vmtest/init.sh sets up)", err)
	}
	t.Logf("clustertest: kube-apiserver and etcd started in %v", cp.Took.Round(100*time.Millisecond))
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	return &Env{ControlPlane: cp, Environment: cp.Env, Config: cp.Config, Client: cp.Client, Scheme: cp.Scheme}
}

// Kubeconfig writes a kubeconfig for a cluster admin, for tests that run
// kubectl or the project's binaries as a user would.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	data, err := e.ControlPlane.AdminKubeconfig("")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
