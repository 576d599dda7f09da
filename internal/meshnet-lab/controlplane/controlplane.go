// Package controlplane starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) with meshnet's CRDs installed: the API
// server of the lab and of the cluster test tier.
package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/deploy/crd"
)

// StopTimeout is how long a real-node cluster's API server is given to stop.
// At teardown the nodes go first, and the API server may still be proxying
// to aggregated APIs on their pods: it drains such requests for up to its
// request timeout (60s).
const StopTimeout = 90 * time.Second

// ControlPlane is a running kube-apiserver and etcd with meshnet's CRDs.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.WithWatch
	Kube   kubernetes.Interface
	Scheme *runtime.Scheme
	// Took is how long the control plane took to start.
	Took time.Duration

	cleanup func() // removes what StartWith made for it
}

// Options change how kube-apiserver serves, for clusters of real nodes.
// The zero value is envtest's: loopback only, no ServiceAccount admission.
type Options struct {
	// Address is the API server's bind and advertised address, in the
	// serving certificate too; loopback when invalid. Port is its secure
	// port, a free one when zero.
	Address netip.Addr
	Port    int
	// ServiceCIDR is the range of Service ClusterIPs (10.0.0.0/24 when
	// empty); the kubernetes Service takes its first address.
	ServiceCIDR string
	// ServiceAccounts turns ServiceAccount admission on, so that pods get
	// their token volumes as on any cluster (envtest turns it off).
	ServiceAccounts bool
	// Args are further kube-apiserver flags, name to value.
	Args map[string]string
	// Log receives kube-apiserver's output; discarded when nil.
	Log io.Writer
}

// Start starts kube-apiserver and etcd from the binaries in
// assets (hack/controlplane.sh builds them) and installs the CRDs.
func Start(assets string) (*ControlPlane, error) { return StartWith(assets, Options{}) }

// StartWith is Start with the API server configured by opts.
func StartWith(assets string, opts Options) (_ *ControlPlane, err error) {
	var cleanup func() // removes the certificate directory made here, on error
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
	api := env.ControlPlane.GetAPIServer()
	if opts.Address.IsValid() {
		// Pods reach the API server at the kubernetes Service's ClusterIP:
		// its certificate must name that address (envtest's names only the
		// listening ones), so the certificates are made here.
		dir, err := os.MkdirTemp("", "meshnet-apiserver-")
		if err != nil {
			return nil, err
		}
		defer func() {
			if cleanup != nil {
				cleanup()
			}
		}()
		cleanup = func() { os.RemoveAll(dir) }
		if api.SecureServing.CA, err = servingCerts(dir, opts.Address, opts.ServiceCIDR); err != nil {
			return nil, err
		}
		api.CertDir = dir
		// A cluster of real nodes serves aggregated APIs, as kubeadm's
		// and kind's do: the front proxy's client certificate and the
		// request-header settings it publishes to the API servers it
		// proxies to (kube-system/extension-apiserver-authentication).
		proxy, err := frontProxy(dir)
		if err != nil {
			return nil, err
		}
		for k, v := range proxy {
			api.Configure().Set(k, v)
		}
		// At teardown the nodes go first, and the API server may still be
		// proxying to aggregated APIs on their pods: it drains such
		// requests for up to its request timeout (60s), past envtest's
		// default of 20s to stop. (The Environment's timeout, which its
		// Start sets on the API server, over any set there.)
		env.ControlPlaneStopTimeout = StopTimeout
		api.SecureServing.ListenAddr = envtest.ListenAddr{Address: opts.Address.String()}
		if opts.Port != 0 {
			api.SecureServing.ListenAddr.Port = strconv.Itoa(opts.Port)
		}
		api.Configure().Set("advertise-address", opts.Address.String())
	}
	if opts.ServiceCIDR != "" {
		api.Configure().Set("service-cluster-ip-range", opts.ServiceCIDR)
	}
	if opts.ServiceAccounts {
		api.Configure().Set("disable-admission-plugins", "")
	}
	for k, v := range opts.Args {
		api.Configure().Set(k, v)
	}
	if opts.Log != nil {
		api.Out, api.Err = opts.Log, opts.Log
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves what it started running when a later step (the
		// CRDs' install) fails.
		return nil, errors.Join(fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err), env.Stop())
	}
	cp := &ControlPlane{Env: env, Config: cfg, Scheme: scheme, Took: time.Since(start), cleanup: cleanup}
	cleanup = nil // Stop's now
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
	if cp.cleanup != nil {
		defer cp.cleanup()
	}
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

// servingCerts writes the API server's serving certificate and key, for
// loopback, addr, the first address of serviceCIDR and the kubernetes
// Service's names, and a service-account signing key pair into dir, as
// envtest names them, and returns the CA that signed the certificate.
func servingCerts(dir string, addr netip.Addr, serviceCIDR string) ([]byte, error) {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IP(addr.AsSlice())}
	if serviceCIDR == "" {
		serviceCIDR = "10.0.0.0/24"
	}
	svc, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", serviceCIDR, err)
	}
	ips = append(ips, net.IP(svc.Addr().Next().AsSlice()))
	chain, key, err := certutil.GenerateSelfSignedCertKey("kube-apiserver", ips,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, fmt.Errorf("API server certificate: %w", err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	first, rest := pem.Decode(chain)
	if first == nil {
		return nil, errors.New("API server certificate: no PEM block")
	}
	ca := rest
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"apiserver.crt": chain,
		"apiserver.key": key,
		"sa-signer.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}),
		"sa-signer.crt": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// frontProxyName is the front proxy's client certificate's name, the one
// the aggregated API servers allow.
const frontProxyName = "front-proxy-client"

// frontProxy writes a front-proxy CA and a client certificate it signs into
// dir, and returns the kube-apiserver flags that proxy to aggregated APIs
// with them, routed to the endpoints of their Services (there is no
// ClusterIP routing on the host).
func frontProxy(dir string) (map[string]string, error) {
	ca, err := NewFrontProxyCA()
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.ClientCert(frontProxyName)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"front-proxy-ca.crt": ca.PEM, "front-proxy-client.crt": cert, "front-proxy-client.key": key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return map[string]string{
		"requestheader-client-ca-file":       filepath.Join(dir, "front-proxy-ca.crt"),
		"requestheader-allowed-names":        frontProxyName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             filepath.Join(dir, "front-proxy-client.crt"),
		"proxy-client-key-file":              filepath.Join(dir, "front-proxy-client.key"),
		"enable-aggregator-routing":          "true",
	}, nil
}

// FrontProxyCA is the CA of an API server's front proxy: it signs the
// client certificate the API server presents to aggregated API servers.
type FrontProxyCA struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	// PEM is the CA's certificate.
	PEM []byte
}

// NewFrontProxyCA makes a front-proxy CA.
func NewFrontProxyCA() (*FrontProxyCA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "front-proxy-ca"}, key)
	if err != nil {
		return nil, fmt.Errorf("front proxy CA: %w", err)
	}
	return &FrontProxyCA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// ClientCert signs a client certificate for common name cn, and returns it
// and its key, PEM-encoded.
func (ca *FrontProxyCA) ClientCert(cn string) (cert, key []byte, err error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("client certificate for %s: %w", cn, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
}
