package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/meshnet/meshnet/internal/relay/relayapi"
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
	secrets := kube.CoreV1().Secrets(namespace)
	host := service + "." + namespace + ".svc"
	for range 3 {
		sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return tls.Certificate{}, nil, fmt.Errorf("relay certificate: Secret %s/%s is missing (deploy/ makes it, empty, for the controller to fill)", namespace, name)
		}
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("read relay certificate %s/%s: %w", namespace, name, err)
		}
		cert, ca, why := fromSecret(sec, host)
		if why == nil {
			return cert, ca, nil
		}
		if len(sec.Data) > 0 {
			log.Info("relay certificate replaced", "secret", namespace+"/"+name, "reason", why.Error())
		}
		if sec.Data, err = newServingCert(service, namespace); err != nil {
			return tls.Certificate{}, nil, err
		}
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica filled it: read that
		}
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("write relay certificate %s/%s: %w", namespace, name, err)
		}
		cert, ca, err = fromSecret(sec, host)
		return cert, ca, err
	}
	return tls.Certificate{}, nil, fmt.Errorf("relay certificate %s/%s: replaced by others three times in a row", namespace, name)
}

// fromSecret reads a serving certificate for host, signed by the Secret's
// CA and valid for longer than renewBefore, or says why it cannot.
func fromSecret(s *corev1.Secret, host string) (tls.Certificate, []byte, error) {
	if len(s.Data) == 0 {
		return tls.Certificate{}, nil, errors.New("empty")
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca := s.Data["ca.crt"]
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return tls.Certificate{}, nil, errors.New("no CA in ca.crt")
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
	return map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, "ca.crt": rest}, nil
}

// apiServices is the APIService resource.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// TrustCA sets the CA the API server verifies the relay with on meshnet's
// APIService.
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
