package signer

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"strings"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCheck is the rule alone: what a meshnetd on n1 may be certified for,
// and the field each refusal names.
func TestCheck(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.9.0.1"},
		{Type: corev1.NodeExternalIP, Address: "2001:db8::1"},
		{Type: corev1.NodeHostName, Address: "10.9.0.9"}, // not an address meshnetd is reached at
	}}}
	serving := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}
	ok := func() *x509.CertificateRequest {
		return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "meshnetd:n1"}, DNSNames: []string{"n1"},
			IPAddresses: []net.IP{net.ParseIP("10.9.0.1"), net.ParseIP("2001:db8::1")}}
	}
	for _, c := range []struct {
		name   string
		edit   func(*x509.CertificateRequest)
		usages []certv1.KeyUsage
		want   string // "" for allowed
	}{
		{"TheNodesOwn", func(*x509.CertificateRequest) {}, serving, ""},
		{"KeyEnciphermentToo", func(*x509.CertificateRequest) {}, append(serving, certv1.UsageKeyEncipherment), ""},
		{"AnotherCommonName", func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:n1" }, serving, `subject.commonName "system:node:n1": want "meshnetd:n1"`},
		{"AnotherNodesDNSName", func(r *x509.CertificateRequest) { r.DNSNames = []string{"n1", "n2"} }, serving, `dnsNames: "n2" is not node n1's name`},
		{"AnotherIP", func(r *x509.CertificateRequest) { r.IPAddresses = append(r.IPAddresses, net.ParseIP("10.9.0.2")) }, serving, "ipAddresses: 10.9.0.2 is not an address of node n1"},
		{"AHostnameAddress", func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.ParseIP("10.9.0.9")} }, serving, "ipAddresses: 10.9.0.9 is not an address of node n1"},
		{"NoIP", func(r *x509.CertificateRequest) { r.IPAddresses = nil }, serving, "ipAddresses: empty"},
		{"AnEmail", func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"a@b"} }, serving, "emailAddresses, uris"},
		{"AURI", func(r *x509.CertificateRequest) { r.URIs = []*url.URL{{Scheme: "spiffe", Host: "x"}} }, serving, "emailAddresses, uris"},
		{"ClientAuth", func(*x509.CertificateRequest) {}, append(serving, certv1.UsageClientAuth), `usages: "client auth" is not for a server`},
		{"NoServerAuth", func(*x509.CertificateRequest) {}, []certv1.KeyUsage{certv1.UsageDigitalSignature}, `usages: "server auth" is missing`},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := ok()
			c.edit(req)
			err := Check(req, c.usages, node)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want it refused naming %q", err, c.want)
			}
		})
	}
}
