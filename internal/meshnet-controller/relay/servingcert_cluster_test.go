//go:build cluster

package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/pki"
	"github.com/meshnet/meshnet/internal/pki/pkitest"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// TestClusterServingCert keeps the relay's certificate in the Secret
// deploy/ makes empty: filled at the first start, the same one for every
// later start (every replica), replaced when it is not for the Service's
// name or is broken, and never made without the Secret.
func TestClusterServingCert(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshnet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	serve := func(service string) ([]byte, []byte) {
		t.Helper()
		cert, ca, err := ServingCert(ctx, kube, log, "meshnet", "meshnet-relay-tls", service)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: service + ".meshnet.svc", Roots: roots}); err != nil {
			t.Fatalf("the certificate for %s: %v", service, err)
		}
		return cert.Certificate[0], ca
	}

	if _, _, err := ServingCert(ctx, kube, log, "meshnet", "meshnet-relay-tls", "meshnet-controller"); err == nil ||
		!strings.Contains(err.Error(), "Secret meshnet/meshnet-relay-tls is missing") {
		t.Fatalf("without the Secret: %v, want it named as missing", err)
	}
	secrets := kube.CoreV1().Secrets("meshnet")
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "meshnet-relay-tls"}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, ca := serve("meshnet-controller")
	if again, againCA := serve("meshnet-controller"); !bytes.Equal(again, first) || !bytes.Equal(againCA, ca) {
		t.Error("a second start made another certificate, want the Secret's")
	}
	if logs.Len() != 0 {
		t.Errorf("filling the empty Secret logged a replacement:\n%s", logs.String())
	}
	if other, _ := serve("meshnet-relay"); bytes.Equal(other, first) {
		t.Error("a start for another Service kept the certificate of meshnet-controller")
	}
	if !strings.Contains(logs.String(), "relay certificate replaced") || !strings.Contains(logs.String(), "meshnet-relay.meshnet.svc") {
		t.Errorf("the replacement for another Service's name was not logged with its reason:\n%s", logs.String())
	}
	sec, err := secrets.Get(ctx, "meshnet-relay-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data[corev1.TLSPrivateKeyKey] = []byte("not a key")
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve("meshnet-relay") // a broken Secret is replaced
}

// TestClusterKeeperRenews: a running replica whose certificate comes due
// (here: the Secret holds one that ends within renewBefore) gets a new one
// at its next check without a restart, serves it, and the APIService then
// trusts the new CA and the old one, so that replicas not yet renewed are
// still trusted.
func TestClusterKeeperRenews(t *testing.T) {
	env := clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshnet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secrets := kube.CoreV1().Secrets("meshnet")
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "meshnet-relay-tls"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": relayapi.APIService},
		"spec": map[string]any{"group": "meshnet.networkop.co.uk", "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"name": "meshnet-controller", "namespace": "meshnet", "port": int64(443)}},
	}}
	if _, err := dyn.Resource(apiServices).Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	k, err := NewKeeper(ctx, kube, dyn, slog.New(slog.NewTextHandler(&logs, nil)), "meshnet", "meshnet-relay-tls", "meshnet-controller")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := k.GetCertificate(nil)
	firstCA := caBundle(t, ctx, dyn)

	// Time passes: the Secret's certificate ends in 10 days.
	host := "meshnet-controller.meshnet.svc"
	caPEM, caKey, err := pki.NewCA("old", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(caPEM, caKey, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	req, _, key := pkitest.Request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: host}, DNSNames: []string{host}})
	leaf, _, err := ca.Sign(req, time.Now(), 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	sec, err := secrets.Get(ctx, "meshnet-relay-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{corev1.TLSCertKey: leaf, corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), pki.CACertKey: caPEM}
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	k.Interval = 100 * time.Millisecond
	go k.Start(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		now, _ := k.GetCertificate(nil)
		if !bytes.Equal(now.Certificate[0], first.Certificate[0]) {
			if bytes.Equal(now.Certificate[0], pemDER(t, leaf)) {
				t.Fatal("the keeper serves the certificate that ends in 10 days")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal within 10s; logs:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the APIService's patch follows the swap
	sec, err = secrets.Get(ctx, "meshnet-relay-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle := caBundle(t, ctx, dyn)
	if !bytes.Contains(bundle, sec.Data[pki.CACertKey]) || !bytes.Contains(bundle, firstCA) {
		t.Errorf("APIService caBundle (%d bytes) lacks the new CA or the one before it", len(bundle))
	}
	if !strings.Contains(logs.String(), "relay certificate renewed") {
		t.Errorf("the renewal was not logged:\n%s", logs.String())
	}
}

func caBundle(t *testing.T, ctx context.Context, dyn dynamic.Interface) []byte {
	t.Helper()
	api, err := dyn.Resource(apiServices).Get(ctx, relayapi.APIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b64, _, _ := unstructured.NestedString(api.Object, "spec", "caBundle")
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func pemDER(t *testing.T, p []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM")
	}
	return b.Bytes
}
