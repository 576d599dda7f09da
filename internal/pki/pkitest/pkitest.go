// Package pkitest serves TLS handshakes for tests of certificates and of
// the clients that verify them, as net/http/httptest serves HTTP, and makes
// the certificate requests they sign.
package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

// Request is a certificate request for tmpl's subject and names, with a
// new ECDSA P-256 key: parsed, as PEM (a CertificateSigningRequest's
// request), and its key.
func Request(t testing.TB, tmpl *x509.CertificateRequest) (*x509.CertificateRequest, []byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return req, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

// Serve accepts TLS connections on a loopback port with cfg, completes
// each handshake and closes the connection, until the test ends. It
// returns the address. cfg should offer "h2" (NextProtos) when gRPC
// clients dial it: they require ALPN.
func Serve(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	return lis.Addr().String()
}
