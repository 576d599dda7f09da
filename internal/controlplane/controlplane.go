// Package controlplane starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) with meshnet's CRDs installed: the API
// server of the lab and of the cluster test tier.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/deploy/crd"
)

// ControlPlane is a running kube-apiserver and etcd with meshnet's CRDs.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.WithWatch
	Kube   kubernetes.Interface
	Scheme *runtime.Scheme
	// Took is how long the control plane took to start.
	Took time.Duration
}

// Start starts kube-apiserver and etcd from the binaries in
// assets (hack/controlplane.sh builds them) and installs the CRDs.
func Start(assets string) (*ControlPlane, error) {
	if assets == "" {
		return nil, errors.New("no directory of kube-apiserver and etcd given (KUBEBUILDER_ASSETS; hack/controlplane.sh builds them and prints it)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("control plane binary %s (build it with hack/controlplane.sh): %w", bin, err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
		Scheme:                scheme,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	cp := &ControlPlane{Env: env, Config: cfg, Scheme: scheme, Took: time.Since(start)}
	if cp.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	if cp.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return cp, nil
}

// Stop stops kube-apiserver and etcd and removes etcd's data.
func (cp *ControlPlane) Stop() error {
	if err := cp.Env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

// AdminKubeconfig is a kubeconfig of a cluster admin (system:masters)
// reaching the API server at server, or where it listens when empty.
func (cp *ControlPlane) AdminKubeconfig(server string) ([]byte, error) {
	user, err := cp.Env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	if server == "" {
		return data, nil
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.Write(*cfg)
}
