//go:build cluster

package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshnet/meshnet/internal/controlplane/clustertest"
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
