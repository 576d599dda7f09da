package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/meshnet/meshnet/internal/pki"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// The relay's Secret and APIService, by name. The Secret is made by
// deploy/, empty: a right to create Secrets would let the controller make
// a service-account token Secret of another account and read it.
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=secrets,verbs=get;update,resourceNames=meshnet-relay-tls
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;patch,resourceNames=v1alpha1.meshnet.networkop.co.uk

// renewBefore is how long before its expiry a serving certificate is
// replaced, at the controller's start.
const renewBefore = 30 * 24 * time.Hour

// ServingCert returns the relay's serving certificate and the CA that signed
// it (PEM). They are kept in Secret namespace/name, which deploy/ makes
// empty, so that every controller replica serves the same certificate and
// the APIService trusts one CA. The first replica to start fills it (a
// certificate for service.namespace.svc); a start that finds it unusable,
// or within renewBefore of its expiry, replaces it and logs why.
func ServingCert(ctx context.Context, kube kubernetes.Interface, log *slog.Logger, namespace, name, service string) (tls.Certificate, []byte, error) {
	host := service + "." + namespace + ".svc"
	type served struct {
		cert tls.Certificate
		ca   []byte
	}
	s, err := pki.FillSecret(ctx, kube, log, pki.SecretOptions[served]{
		Namespace: namespace, Name: name, What: "relay certificate",
		Parse: func(data map[string][]byte) (served, error) {
			cert, ca, err := fromSecret(data, host)
			return served{cert, ca}, err
		},
		Make: func() (map[string][]byte, error) { return newServingCert(service, namespace) },
	})
	return s.cert, s.ca, err
}

// fromSecret reads a serving certificate for host, signed by the Secret's
// CA and valid for longer than renewBefore, or says why it cannot.
func fromSecret(data map[string][]byte, host string) (tls.Certificate, []byte, error) {
	cert, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca := data[pki.CACertKey]
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return tls.Certificate{}, nil, fmt.Errorf("no CA in %s", pki.CACertKey)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: time.Now().Add(renewBefore)}); err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("not valid for %s for %v more: %w", host, renewBefore, err)
	}
	return cert, ca, nil
}

// newServingCert makes a CA and a certificate it signs for the Service's
// names (client-go's self-signed pair: the chain is the certificate, then
// the CA), as a Secret's data.
func newServingCert(service, namespace string) (map[string][]byte, error) {
	host := service + "." + namespace + ".svc"
	chain, key, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{service + "." + namespace, host + ".cluster.local"})
	if err != nil {
		return nil, fmt.Errorf("make relay certificate: %w", err)
	}
	first, rest := pem.Decode(chain)
	if first == nil || len(rest) == 0 {
		return nil, errors.New("make relay certificate: no CA in the chain")
	}
	return map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, pki.CACertKey: rest}, nil
}

// Keeper serves the relay's certificate and renews it while the controller
// runs: every interval it reads the Secret again (ServingCert), which
// replaces the certificate within renewBefore of its end. A certificate of
// a new CA is served at once, and the APIService then trusts the new CA and
// the one before, so that replicas still serving the old certificate until
// their own next check are trusted meanwhile.
type Keeper struct {
	kube                       kubernetes.Interface
	dyn                        dynamic.Interface
	log                        *slog.Logger
	namespace, secret, service string

	// Interval is how often Start checks the certificate.
	Interval time.Duration

	mu   sync.RWMutex
	cert *tls.Certificate // replaced, never changed: handshakes hold it
	ca   []byte
}

// DefaultRenewCheck is how often a replica checks whether its serving
// certificate is due for renewal (renewBefore, 30 days, ahead of its end).
const DefaultRenewCheck = time.Hour

// NewKeeper reads (or fills) the Secret and has the APIService trust its
// CA. An APIService that cannot be patched (not deployed) is logged and
// left: the relay then serves no one, and the controller goes on.
func NewKeeper(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, log *slog.Logger, namespace, secret, service string) (*Keeper, error) {
	k := &Keeper{kube: kube, dyn: dyn, log: log, namespace: namespace, secret: secret, service: service, Interval: DefaultRenewCheck}
	cert, ca, err := ServingCert(ctx, kube, log, namespace, secret, service)
	if err != nil {
		return nil, err
	}
	k.cert, k.ca = &cert, ca
	if err := TrustCA(ctx, dyn, ca); err != nil {
		log.Warn("aggregated API not registered", "error", err)
	}
	return k, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.cert, nil
}

// NeedLeaderElection is false: every replica serves the relay, with a
// certificate of its own to keep.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start checks the certificate every Interval until ctx ends (a manager's
// Runnable).
func (k *Keeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := k.renew(ctx); err != nil {
			k.log.Error("relay certificate not renewed; trying again later", "secret", k.namespace+"/"+k.secret, "error", err)
		}
	}
}

func (k *Keeper) renew(ctx context.Context) error {
	cert, ca, err := ServingCert(ctx, k.kube, k.log, k.namespace, k.secret, k.service)
	if err != nil {
		return err
	}
	k.mu.Lock()
	old := k.ca
	changed := !bytes.Equal(ca, old)
	k.cert, k.ca = &cert, ca
	k.mu.Unlock()
	if !changed {
		return nil
	}
	k.log.Info("relay certificate renewed", "secret", k.namespace+"/"+k.secret)
	return TrustCA(ctx, k.dyn, append(append([]byte(nil), ca...), old...))
}

// apiServices is the APIService resource.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// TrustCA sets the CAs (PEM, one or more) the API server verifies the
// relay with on meshnet's APIService.
func TrustCA(ctx context.Context, dyn dynamic.Interface, ca []byte) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": ca, "insecureSkipTLSVerify": false}})
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(apiServices).Patch(ctx, relayapi.APIService, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set the CA of APIService %s: %w", relayapi.APIService, err)
	}
	return nil
}
