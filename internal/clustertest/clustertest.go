// Package clustertest starts a real kube-apiserver and etcd for the cluster
// test tier, with meshnet's CRDs installed.
package clustertest

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	meshnetv1beta1 "github.com/meshnet/meshnet/api/v1beta1"
)

// Env is a running control plane.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Client      client.Client
	Scheme      *runtime.Scheme
}

// Start starts a control plane with the Topology CRD installed and stops it
// when the test ends. It fails the test, saying why, when the binaries are
// missing: the tier must never pass by not running.
func Start(t testing.TB) *Env {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("cluster tier: KUBEBUILDER_ASSETS is not set; run through `make test-cluster`, which builds kube-apiserver and etcd (hack/controlplane.sh)")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := meshnetv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{CRDDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start control plane from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Environment: env, Config: cfg, Client: c, Scheme: scheme}
}

// CRDDir is the directory of the generated CRDs in this repository.
func CRDDir() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "crd")
}

// Kubeconfig writes a kubeconfig for a cluster admin, for tests that run
// kubectl or the project's binaries as a user would.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	user, err := e.Environment.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("add admin user: %v", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
