// Package pki is meshnet's certificate authority for meshnetd's ports: a CA
// whose key only meshnet-controller reads (a Secret that deploy/ makes empty
// and the first controller replica fills), the CA certificate published in a
// ConfigMap for every client (meshnetd's peers, the controller, grpcurl and
// curl), and the signing of the serving certificates that meshnetd asks for
// through the CertificateSigningRequest API with SignerName.
package pki

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/keyutil"
)

// SignerName is the signer of meshnetd's serving certificates: meshnetd
// names it in its CertificateSigningRequests and meshnet-controller signs
// what it asks for.
const SignerName = "meshnet.networkop.co.uk/meshnetd"

// CACertKey is the data key of the CA certificate in the ConfigMap and the
// Secret, as in kube-root-ca.crt.
const CACertKey = "ca.crt"

// caValidity is the CA's lifetime; renewCABefore is how long before its
// end a controller start replaces it.
const (
	caValidity    = 10 * 365 * 24 * time.Hour
	renewCABefore = 365 * 24 * time.Hour
)

// CA signs meshnetd's serving certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA certificate, what clients trust.
	PEM []byte
}

// NewCA makes a self-signed CA (ECDSA P-256) named commonName and returns it
// with its key, both PEM.
func NewCA(commonName string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make CA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("make CA serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("make CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: keyDER}), nil
}

// ParseCA reads a CA certificate and its key (PEM) and checks that they
// belong together and that the certificate is a CA valid for longer than
// validFor.
func ParseCA(certPEM, keyPEM []byte, now time.Time, validFor time.Duration) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	if now.Add(validFor).After(cert.NotAfter) {
		return nil, fmt.Errorf("expires %s, within %v", cert.NotAfter.Format(time.RFC3339), validFor)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	return &CA{cert: cert, key: key, PEM: certPEM}, nil
}

// Pool is the CA as a trust pool.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Sign issues a serving certificate for req's public key, subject and
// addresses, valid from now until now+validity (never past the CA's own
// end), and returns it (PEM) with its end. The caller has checked req; Sign
// only copies what it names.
func (ca *CA) Sign(req *x509.CertificateRequest, now time.Time, validity time.Duration) ([]byte, time.Time, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("make serial: %w", err)
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	// Clocks of nodes differ a little: valid from a little before now, but
	// by no more than a tenth of the lifetime, which renewal counts from.
	backdate := min(5*time.Minute, validity/10)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Subject.CommonName},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPAddresses,
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sign certificate for %q: %w", req.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), notAfter, nil
}

// The CA's Secret and ConfigMap, by name, made empty by deploy/.
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=secrets,verbs=get;update,resourceNames=meshnet-ca
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=configmaps,verbs=get;update,resourceNames=meshnet-ca

// Names says where the CA lives: Secret (certificate and key, read by the
// controller only) and ConfigMap (certificate, read by every client), both
// in Namespace and both made empty by deploy/.
type Names struct {
	Namespace, Secret, ConfigMap string
}

// EnsureCA returns the CA kept in the Secret, filling the Secret first when
// it is empty, unusable or within a year of the CA's end (and logging why
// when it was not empty), and publishes the CA certificate in the
// ConfigMap. Every controller replica calls it at start; replicas racing
// to fill the Secret settle on the first write.
func EnsureCA(ctx context.Context, kube kubernetes.Interface, log *slog.Logger, n Names) (*CA, error) {
	now := time.Now()
	ca, err := FillSecret(ctx, kube, log, SecretOptions[*CA]{
		Namespace: n.Namespace, Name: n.Secret, What: "meshnetd CA",
		Parse: func(data map[string][]byte) (*CA, error) {
			return ParseCA(data[CACertKey], data[corev1.TLSPrivateKeyKey], now, renewCABefore)
		},
		Make: func() (map[string][]byte, error) {
			certPEM, keyPEM, err := NewCA("meshnetd-ca", now)
			return map[string][]byte{CACertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}, err
		},
	})
	if err != nil {
		return nil, err
	}
	return ca, publish(ctx, kube, n, ca.PEM)
}

// SecretOptions says which Secret FillSecret keeps, and how its data is
// read and made.
type SecretOptions[T any] struct {
	Namespace, Name string
	// What names the content in errors and logs ("meshnetd CA").
	What string
	// Parse reads the data, or says why it cannot be used.
	Parse func(map[string][]byte) (T, error)
	// Make makes new data, which Parse accepts.
	Make func() (map[string][]byte, error)
}

// FillSecret returns what o.Parse reads from the Secret. A Secret that
// o.Parse refuses (empty, as deploy/ makes it, broken, or about to expire)
// is first filled with o.Make's data, and the replacement of data that was
// there is logged with the reason. The Secret must exist: the caller may
// update it and create none, since a right to create Secrets would let it
// make a token Secret of another service account. Callers racing to fill it
// (every controller replica at start) settle on the first write.
func FillSecret[T any](ctx context.Context, kube kubernetes.Interface, log *slog.Logger, o SecretOptions[T]) (T, error) {
	var zero T
	secrets := kube.CoreV1().Secrets(o.Namespace)
	name := o.Namespace + "/" + o.Name
	for range 3 {
		sec, err := secrets.Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return zero, fmt.Errorf("%s: Secret %s is missing (deploy/ makes it, empty, for the controller to fill)", o.What, name)
		}
		if err != nil {
			return zero, fmt.Errorf("read %s %s: %w", o.What, name, err)
		}
		if len(sec.Data) > 0 {
			v, why := o.Parse(sec.Data)
			if why == nil {
				return v, nil
			}
			log.Info(o.What+" replaced", "secret", name, "reason", why.Error())
		}
		if sec.Data, err = o.Make(); err != nil {
			return zero, fmt.Errorf("make %s: %w", o.What, err)
		}
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica filled it: read that
		}
		if err != nil {
			return zero, fmt.Errorf("write %s %s: %w", o.What, name, err)
		}
		return o.Parse(sec.Data)
	}
	return zero, fmt.Errorf("%s %s: replaced by others three times in a row", o.What, name)
}

// publish writes the CA certificate into the ConfigMap, unless it is there.
func publish(ctx context.Context, kube kubernetes.Interface, n Names, caPEM []byte) error {
	maps := kube.CoreV1().ConfigMaps(n.Namespace)
	for range 3 {
		cm, err := maps.Get(ctx, n.ConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("meshnetd CA: ConfigMap %s/%s is missing (deploy/ makes it, empty, for the controller to fill)", n.Namespace, n.ConfigMap)
		}
		if err != nil {
			return fmt.Errorf("read ConfigMap %s/%s: %w", n.Namespace, n.ConfigMap, err)
		}
		if cm.Data[CACertKey] == string(caPEM) {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[CACertKey] = string(caPEM)
		_, err = maps.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("publish meshnetd CA in ConfigMap %s/%s: %w", n.Namespace, n.ConfigMap, err)
		}
		return nil
	}
	return fmt.Errorf("publish meshnetd CA in ConfigMap %s/%s: conflicts three times in a row", n.Namespace, n.ConfigMap)
}

// Trust reads the CA certificate that the controller published in
// namespace/configMap, waiting for it until ctx ends: meshnetd starts
// before or beside the controller. It asks again after poll, doubling the
// wait up to 30 s, so that a thousand nodes waiting do not load the API
// server; errors of the API server are logged and retried.
func Trust(ctx context.Context, kube kubernetes.Interface, log *slog.Logger, namespace, configMap string, poll time.Duration) (*x509.CertPool, error) {
	name := namespace + "/" + configMap
	var logged time.Time
	for {
		cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, configMap, metav1.GetOptions{})
		var why string
		switch {
		case err == nil && cm.Data[CACertKey] != "":
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(cm.Data[CACertKey])) {
				return nil, fmt.Errorf("ConfigMap %s: %s holds no PEM certificate", name, CACertKey)
			}
			return pool, nil
		case err == nil:
			why = "waiting for meshnet-controller (--daemon-plaintext=false) to publish meshnetd's CA"
		case apierrors.IsNotFound(err):
			why = "ConfigMap of meshnetd's CA is missing (deploy/ makes it, empty, for meshnet-controller to fill)"
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("read meshnetd's CA from ConfigMap %s: %w", name, err)
		default:
			why = "reading meshnetd's CA failed; retrying: " + err.Error()
		}
		if time.Since(logged) > 30*time.Second {
			log.Info(why, "configmap", name)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("meshnetd CA in ConfigMap %s: %w", name, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, 30*time.Second)
	}
}
