//go:build cluster

package signer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate/csr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/pki"
	"github.com/meshnet/meshnet/internal/pki/pkitest"
)

// fixture is a real API server with meshnetd's service account, its
// rights, nodes n1 (10.9.0.1) and n2 (10.9.0.2), a meshnetd pod on n1, the
// CA's empty Secret and ConfigMap as deploy/ makes them, and the signer
// running with validity (DefaultValidity when 0).
type fixture struct {
	ctx   context.Context
	admin kubernetes.Interface
	ca    *pki.CA
	logs  *bytes.Buffer // EnsureCA's
	log   *slog.Logger
	// token is a client with a meshnetd token, bound to the pod on n1 or
	// to nothing.
	token func(bound bool) kubernetes.Interface
}

func startSigner(t *testing.T, validity time.Duration) *fixture {
	t.Helper()
	env := clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshnet"}}, metav1.CreateOptions{}))
	must(admin.CoreV1().ServiceAccounts("meshnet").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "meshnetd"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "meshnetd-csr"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "list", "watch"}}},
	}, metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "meshnetd-csr"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "meshnetd-csr"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "meshnetd", Namespace: "meshnet"}},
	}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles("meshnet").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "meshnetd-ca"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"meshnet-ca"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("meshnet").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "meshnetd-ca"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "meshnetd-ca"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "meshnetd", Namespace: "meshnet"}},
	}, metav1.CreateOptions{}))
	for name, ip := range map[string]string{"n1": "10.9.0.1", "n2": "10.9.0.2"} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		must(admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}))
	}
	pod, err := admin.CoreV1().Pods("meshnet").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "meshnetd-n1"},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "meshnetd", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "meshnetd", Image: "meshnetd"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{"meshnet-ca"} {
		must(admin.CoreV1().Secrets("meshnet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj}}, metav1.CreateOptions{}))
		must(admin.CoreV1().ConfigMaps("meshnet").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: obj}}, metav1.CreateOptions{}))
	}

	// The signer's and the certificate manager's lines go to stderr (they
	// log on after the test, which t.Output does not allow); EnsureCA's to
	// logs, which the test reads.
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	logs := &bytes.Buffer{}
	ca, err := pki.EnsureCA(ctx, admin, slog.New(slog.NewTextHandler(logs, nil)), pki.Names{Namespace: "meshnet", Secret: "meshnet-ca", ConfigMap: "meshnet-ca"})
	if err != nil {
		t.Fatal(err)
	}
	// Each test of the package starts a manager with the signer in it.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Signer{Reader: mgr.GetCache(), Kube: admin, CA: ca, Requester: "system:serviceaccount:meshnet:meshnetd", Validity: validity, Log: log}
	if err := s.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Error(err)
		}
	}()

	token := func(bound bool) kubernetes.Interface {
		t.Helper()
		req := &authnv1.TokenRequest{}
		if bound {
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
		}
		tr, err := admin.CoreV1().ServiceAccounts("meshnet").CreateToken(ctx, "meshnetd", req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = tr.Status.Token
		return kubernetes.NewForConfigOrDie(cfg)
	}
	return &fixture{ctx: ctx, admin: admin, ca: ca, logs: logs, log: log, token: token}
}

// TestClusterMeshnetdCertificates runs meshnetd's side (client-go's
// certificate manager, as pki.NewServing runs it) against the signer on a
// real API server: a meshnetd whose token is bound to a pod on node n1 gets
// a certificate for n1's IP that a client trusting the published CA
// accepts, a restart reuses it, and requests for another node's address,
// from a token bound to no pod, or from another user are denied with the
// reason and get no certificate.
func TestClusterMeshnetdCertificates(t *testing.T) {
	f := startSigner(t, 0)
	ctx, admin, ca, log, logs, token := f.ctx, f.admin, f.ca, f.log, f.logs, f.token
	meshnetd := token(true)

	dir := t.TempDir()
	opts := pki.ServingOptions{Node: "n1", IP: netip.MustParseAddr("10.9.0.1"), Dir: dir, Log: log}
	serving, err := pki.NewServing(ctx, meshnetd, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer serving.Stop()
	if err := serving.Wait(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("PeersTrustTheNodeIP", func(t *testing.T) {
		roots, err := pki.Trust(ctx, meshnetd, log, "meshnet", "meshnet-ca", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		addr := pkitest.Serve(t, serving.ServerTLS())
		conn, err := tls.Dial("tcp", addr, pki.ClientTLS(roots, "10.9.0.1"))
		if err != nil {
			t.Fatalf("a client trusting the published CA, checking 10.9.0.1: %v", err)
		}
		leaf := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		if leaf.Subject.CommonName != "meshnetd:n1" || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.9.0.1")) {
			t.Errorf("certificate for %q %v, want meshnetd:n1 [10.9.0.1]", leaf.Subject.CommonName, leaf.IPAddresses)
		}
		if life := leaf.NotAfter.Sub(leaf.NotBefore); life > DefaultValidity+10*time.Minute {
			t.Errorf("valid for %v, want at most %v", life, DefaultValidity)
		}
		if _, err := tls.Dial("tcp", addr, pki.ClientTLS(roots, "10.9.0.2")); err == nil {
			t.Error("the certificate of n1 passed for 10.9.0.2")
		}
		if _, err := tls.Dial("tcp", addr, pki.ClientTLS(x509.NewCertPool(), "10.9.0.1")); err == nil {
			t.Error("a client trusting no CA accepted meshnetd")
		}
	})

	t.Run("RestartKeepsTheCertificate", func(t *testing.T) {
		before := requestCount(t, admin)
		again, err := pki.NewServing(ctx, meshnetd, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Stop()
		if _, err := again.GetCertificate(nil); err != nil {
			t.Fatalf("a restart has no certificate at once: %v", err)
		}
		a, _ := serving.GetCertificate(nil)
		b, _ := again.GetCertificate(nil)
		if !bytes.Equal(a.Certificate[0], b.Certificate[0]) {
			t.Error("a restart got a new certificate, want the one kept in its directory")
		}
		if after := requestCount(t, admin); after != before {
			t.Errorf("a restart made %d requests, want none", after-before)
		}
		if _, err := os.Stat(filepath.Join(dir, "meshnetd-current.pem")); err != nil {
			t.Error(err)
		}
	})

	t.Run("CertificateOfAReplacedCAIsDiscarded", func(t *testing.T) {
		before, _ := serving.GetCertificate(nil)
		if renewed, err := serving.Trusted(ca.Pool()); err != nil || renewed {
			t.Fatalf("Trusted(the CA that signed it): renewed %v, %v; want it kept", renewed, err)
		}
		otherPEM, otherKey, err := pki.NewCA("another", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		other, err := pki.ParseCA(otherPEM, otherKey, time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if renewed, err := serving.Trusted(other.Pool()); err != nil || !renewed {
			t.Fatalf("Trusted(another CA): renewed %v, %v; want the certificate discarded", renewed, err)
		}
		if err := serving.Wait(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		after, _ := serving.GetCertificate(nil)
		if after.Leaf.SerialNumber.Cmp(before.Leaf.SerialNumber) == 0 {
			t.Error("the certificate of the replaced CA is still served")
		}
	})

	denied := func(t *testing.T, kube kubernetes.Interface, cn string, ip string, want string) {
		t.Helper()
		_, request, key := pkitest.Request(t, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: cn}, IPAddresses: []net.IP{net.ParseIP(ip)},
		})
		name, uid, err := csr.RequestCertificateWithContext(ctx, kube, request,
			"", pki.SignerName, nil, []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		_, err = csr.WaitForCertificate(wctx, admin, name, uid)
		if err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("request %s: %v, want it denied", name, err)
		}
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Certificate) > 0 {
			t.Error("a denied request has a certificate")
		}
		for _, c := range got.Status.Conditions {
			if c.Type == certv1.CertificateDenied {
				if !strings.Contains(c.Message, want) {
					t.Errorf("denied because %q, want it to say %q", c.Message, want)
				}
				return
			}
		}
		t.Errorf("no Denied condition: %+v", got.Status.Conditions)
	}
	t.Run("AnotherNodesAddressIsDenied", func(t *testing.T) {
		denied(t, meshnetd, "meshnetd:n1", "10.9.0.2", "ipAddresses: 10.9.0.2 is not an address of node n1")
	})
	t.Run("AnotherNodesNameIsDenied", func(t *testing.T) {
		denied(t, meshnetd, "meshnetd:n2", "10.9.0.1", `subject.commonName "meshnetd:n2": want "meshnetd:n1"`)
	})
	t.Run("TokenBoundToNoPodIsDenied", func(t *testing.T) {
		denied(t, token(false), "meshnetd:n1", "10.9.0.1", "not bound to a pod on a node")
	})
	t.Run("AnotherUserIsDenied", func(t *testing.T) {
		denied(t, admin, "meshnetd:n1", "10.9.0.1", "only system:serviceaccount:meshnet:meshnetd may ask")
	})
	t.Run("TheCAIsKept", func(t *testing.T) {
		again, err := pki.EnsureCA(ctx, admin, slog.New(slog.NewTextHandler(logs, nil)), pki.Names{Namespace: "meshnet", Secret: "meshnet-ca", ConfigMap: "meshnet-ca"})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.PEM, ca.PEM) {
			t.Error("a second controller start made another CA, want the Secret's")
		}
		if strings.Contains(logs.String(), "meshnetd CA replaced") {
			t.Errorf("filling the empty Secret logged a replacement:\n%s", logs.String())
		}
	})
}

// TestClusterMeshnetdCertificateRenewal: with certificates valid 30 s,
// meshnetd's certificate manager asks for a new one before the first
// expires, and GetCertificate serves the new one without a restart.
func TestClusterMeshnetdCertificateRenewal(t *testing.T) {
	f := startSigner(t, 30*time.Second)
	serving, err := pki.NewServing(f.ctx, f.token(true), pki.ServingOptions{Node: "n1", IP: netip.MustParseAddr("10.9.0.1"), Dir: t.TempDir(), Log: f.log})
	if err != nil {
		t.Fatal(err)
	}
	defer serving.Stop()
	if err := serving.Wait(f.ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	first, _ := serving.GetCertificate(nil)
	deadline := time.Now().Add(first.Leaf.NotAfter.Sub(time.Now()))
	for time.Now().Before(deadline) {
		c, err := serving.GetCertificate(nil)
		if err != nil {
			t.Fatalf("no certificate while the first was still valid: %v", err)
		}
		if c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
			t.Logf("renewed %v before the first's expiry; the new one is valid until %s",
				first.Leaf.NotAfter.Sub(time.Now()).Round(time.Second), c.Leaf.NotAfter.Format(time.RFC3339))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the certificate valid until %s was not renewed before it expired (requests: %d)", first.Leaf.NotAfter.Format(time.RFC3339), requestCount(t, f.admin))
}

// requestCount is how many requests of meshnet's signer exist.
func requestCount(t *testing.T, kube kubernetes.Interface) int {
	t.Helper()
	list, err := kube.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range list.Items {
		if c.Spec.SignerName == pki.SignerName {
			n++
		}
	}
	return n
}
