package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
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

// The relay's Secret and APIService, by name (a create cannot be limited
// to one).
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=secrets,verbs=get;update,resourceNames=meshnet-relay-tls
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;patch,resourceNames=v1alpha1.meshnet.networkop.co.uk

// renewBefore is how long before its expiry a serving certificate is
// replaced, at the controller's start.
const renewBefore = 30 * 24 * time.Hour

// ServingCert returns the relay's serving certificate and the CA that signed
// it (PEM). They are kept in Secret namespace/name, so that every controller
// replica serves the same certificate and the APIService trusts one CA; the
// first replica to start makes them (for service.namespace.svc), and a
// start within renewBefore of their expiry replaces them.
func ServingCert(ctx context.Context, kube kubernetes.Interface, namespace, name, service string) (tls.Certificate, []byte, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	for range 3 {
		sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			sec = nil
		case err != nil:
			return tls.Certificate{}, nil, fmt.Errorf("read relay certificate %s/%s: %w", namespace, name, err)
		}
		if sec != nil {
			if cert, ca, err := fromSecret(sec); err == nil {
				return cert, ca, nil
			}
		}
		made, err := newServingSecret(namespace, name, service)
		if err != nil {
			return tls.Certificate{}, nil, err
		}
		if sec == nil {
			_, err = secrets.Create(ctx, made, metav1.CreateOptions{})
		} else {
			made.ResourceVersion = sec.ResourceVersion
			_, err = secrets.Update(ctx, made, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica made one: read it
		}
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("write relay certificate %s/%s: %w", namespace, name, err)
		}
		return fromSecret(made)
	}
	return tls.Certificate{}, nil, fmt.Errorf("relay certificate %s/%s: replaced by others three times in a row", namespace, name)
}

// fromSecret reads a serving certificate still valid for longer than
// renewBefore.
func fromSecret(s *corev1.Secret) (tls.Certificate, []byte, error) {
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	if time.Until(leaf.NotAfter) < renewBefore {
		return tls.Certificate{}, nil, errors.New("expires soon")
	}
	ca := s.Data["ca.crt"]
	if len(ca) == 0 {
		return tls.Certificate{}, nil, errors.New("no ca.crt")
	}
	return cert, ca, nil
}

// newServingSecret makes a CA and a certificate it signs for the Service's
// names (client-go's self-signed pair: the chain is the certificate, then
// the CA).
func newServingSecret(namespace, name, service string) (*corev1.Secret, error) {
	host := service + "." + namespace + ".svc"
	chain, key, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{service + "." + namespace, host + ".cluster.local"})
	if err != nil {
		return nil, fmt.Errorf("make relay certificate: %w", err)
	}
	first, rest := pem.Decode(chain)
	if first == nil || len(rest) == 0 {
		return nil, errors.New("make relay certificate: no CA in the chain")
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "meshnet-controller"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, "ca.crt": rest},
	}, nil
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
