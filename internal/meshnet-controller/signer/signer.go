// Package signer approves and signs meshnetd's serving certificates: the
// CertificateSigningRequests of pki.SignerName. A request is signed only
// when it comes from meshnetd's service account with a token bound to a
// pod on a node (the API server records that node in the request), and
// asks for that node's names and addresses alone; anything else is denied
// with the reason. So a meshnetd, or anyone holding its token, can get a
// certificate for its own node and no other.
package signer

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/meshnet/meshnet/internal/pki"
)

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval;certificatesigningrequests/status,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,verbs=approve;sign,resourceNames=meshnet.networkop.co.uk/meshnetd
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// DefaultValidity is how long a signed certificate is valid when the
// request asks for no shorter; meshnetd renews at 70 to 90% of it.
const DefaultValidity = 30 * 24 * time.Hour

// Signer is the reconciler of meshnetd's CertificateSigningRequests.
type Signer struct {
	// Reader reads the requests (the manager's cache).
	Reader client.Reader
	// Kube reads the requester's node, approves, denies and writes the
	// certificate (the approval and status subresources).
	Kube kubernetes.Interface
	CA   *pki.CA
	// Requester is meshnetd's user name,
	// system:serviceaccount:NAMESPACE:meshnetd.
	Requester string
	// Validity caps the certificates' lifetime; DefaultValidity when 0.
	Validity time.Duration
	Log      *slog.Logger
}

// SetupWithManager runs the signer on the leader only, like every
// reconciler of the manager.
func (s *Signer) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		csr, ok := o.(*certv1.CertificateSigningRequest)
		return ok && csr.Spec.SignerName == pki.SignerName
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("meshnetd-signer").
		For(&certv1.CertificateSigningRequest{}, builder.WithPredicates(ours)).
		Complete(s)
}

// Reconcile decides a pending request: denied with the reason, or
// approved and signed. A decided one is left alone.
func (s *Signer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var csr certv1.CertificateSigningRequest
	if err := s.Reader.Get(ctx, req.NamespacedName, &csr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if csr.Spec.SignerName != pki.SignerName || len(csr.Status.Certificate) > 0 ||
		has(&csr, certv1.CertificateDenied) || has(&csr, certv1.CertificateFailed) {
		return ctrl.Result{}, nil
	}
	log := s.Log.With("csr", csr.Name, "node", first(csr.Spec.Extra[serviceaccount.NodeNameKey]))
	x509req, err := s.check(ctx, &csr)
	var refused refusal
	switch {
	case errors.As(err, &refused) && has(&csr, certv1.CertificateApproved):
		// Approved by someone else, or the node changed since our own
		// approval: an approved request cannot be denied, only failed.
		log.Info("meshnetd certificate request failed", "reason", err.Error())
		return ctrl.Result{}, s.fail(ctx, &csr, err.Error())
	case errors.As(err, &refused):
		log.Info("meshnetd certificate request denied", "reason", err.Error())
		return ctrl.Result{}, s.decide(ctx, &csr, certv1.CertificateDenied, "MeshnetdRequestInvalid", err.Error())
	case err != nil:
		return ctrl.Result{}, err // the API server's, not the request's: retried
	}
	if !has(&csr, certv1.CertificateApproved) {
		if err := s.decide(ctx, &csr, certv1.CertificateApproved, "MeshnetdNodeServing", "meshnet-controller approved meshnetd's serving certificate for its node"); err != nil {
			return ctrl.Result{}, err
		}
	}
	validity := s.Validity
	if validity == 0 {
		validity = DefaultValidity
	}
	if e := csr.Spec.ExpirationSeconds; e != nil && time.Duration(*e)*time.Second < validity {
		validity = time.Duration(*e) * time.Second
	}
	cert, notAfter, err := s.CA.Sign(x509req, time.Now(), validity)
	if err != nil {
		return ctrl.Result{}, err
	}
	csr.Status.Certificate = cert
	if _, err := s.Kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, &csr, metav1.UpdateOptions{}); err != nil {
		return ctrl.Result{}, fmt.Errorf("write certificate of %s: %w", csr.Name, err)
	}
	log.Info("meshnetd certificate signed", "valid_until", notAfter.UTC().Format(time.RFC3339))
	return ctrl.Result{}, nil
}

// fail marks an approved request Failed, with why it is not signed.
func (s *Signer) fail(ctx context.Context, csr *certv1.CertificateSigningRequest, message string) error {
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "MeshnetdRequestInvalid", Message: message, LastUpdateTime: metav1.Now(),
	})
	if _, err := s.Kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mark %s Failed: %w", csr.Name, err)
	}
	return nil
}

// refusal is a reason of the request itself not to sign it; other errors
// of check are the API server's, and are retried.
type refusal struct{ error }

// decide adds the condition through the approval subresource; the updated
// object (new resourceVersion) is written back into csr.
func (s *Signer) decide(ctx context.Context, csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType, reason, message string) error {
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastUpdateTime: metav1.Now(),
	})
	updated, err := s.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("mark %s %s: %w", csr.Name, t, err)
	}
	*csr = *updated
	return nil
}

// check returns the parsed request when it may be signed, a refusal
// saying why not, or the API server's error.
func (s *Signer) check(ctx context.Context, csr *certv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	if csr.Spec.Username != s.Requester {
		return nil, refusal{fmt.Errorf("requested by %q; only %s may ask signer %s", csr.Spec.Username, s.Requester, pki.SignerName)}
	}
	nodes := csr.Spec.Extra[serviceaccount.NodeNameKey]
	if len(nodes) != 1 || nodes[0] == "" {
		return nil, refusal{fmt.Errorf("the requester's token is not bound to a pod on a node (no %s, which Kubernetes 1.30 and later give a pod's token); meshnetd's pod token is", serviceaccount.NodeNameKey)}
	}
	req, err := parse(csr.Spec.Request)
	if err != nil {
		return nil, refusal{err}
	}
	node, err := s.Kube.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, refusal{fmt.Errorf("node %s does not exist", nodes[0])}
	}
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", nodes[0], err)
	}
	if err := Check(req, csr.Spec.Usages, node); err != nil {
		return nil, refusal{err}
	}
	return req, nil
}

// Check is the rule for what a meshnetd on node may be certified for: its
// common name pki.CommonName(node), DNS names only the node's name, IP
// addresses only the node's own (at least one), nothing else, and server
// authentication as its purpose.
func Check(req *x509.CertificateRequest, usages []certv1.KeyUsage, node *corev1.Node) error {
	var errs []error
	if want := pki.CommonName(node.Name); req.Subject.CommonName != want {
		errs = append(errs, fmt.Errorf("subject.commonName %q: want %q", req.Subject.CommonName, want))
	}
	for _, d := range req.DNSNames {
		if d != node.Name {
			errs = append(errs, fmt.Errorf("dnsNames: %q is not node %s's name", d, node.Name))
		}
	}
	if len(req.IPAddresses) == 0 {
		errs = append(errs, errors.New("ipAddresses: empty; meshnetd is reached at its node's IP"))
	}
	for _, ip := range req.IPAddresses {
		if !nodeHas(node, ip) {
			errs = append(errs, fmt.Errorf("ipAddresses: %s is not an address of node %s", ip, node.Name))
		}
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		errs = append(errs, errors.New("emailAddresses, uris: meshnetd's certificate has none"))
	}
	allowed := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}
	for _, u := range usages {
		if !slices.Contains(allowed, u) {
			errs = append(errs, fmt.Errorf("usages: %q is not for a server", u))
		}
	}
	if !slices.Contains(usages, certv1.UsageServerAuth) {
		errs = append(errs, fmt.Errorf("usages: %q is missing", certv1.UsageServerAuth))
	}
	return errors.Join(errs...)
}

func nodeHas(node *corev1.Node, ip net.IP) bool {
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if n := net.ParseIP(a.Address); n != nil && n.Equal(ip) {
			return true
		}
	}
	return false
}

func parse(request []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("request: not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("request: signature: %w", err)
	}
	return req, nil
}

func has(csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
