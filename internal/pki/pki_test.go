package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/pki/pkitest"
)

// testCA makes a CA and a serving certificate it signs for ip.
func testCA(t *testing.T, ip string) (*CA, tls.Certificate) {
	t.Helper()
	now := time.Now()
	certPEM, keyPEM, err := NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCA(certPEM, keyPEM, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _, key := pkitest.Request(t, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: CommonName("n1")}, IPAddresses: []net.IP{net.ParseIP(ip)},
	})
	leafPEM, _, err := ca.Sign(req, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(leafPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.IsCA || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("signed certificate: CA %v, usages %v; want a server certificate only", leaf.IsCA, leaf.ExtKeyUsage)
	}
	return ca, tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key, Leaf: leaf}
}

func TestParseCARefusesWhatCannotSign(t *testing.T) {
	now := time.Now()
	certPEM, keyPEM, err := NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := NewCA("other", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(certPEM, otherKey, now, 0); err == nil {
		t.Error("a CA with another CA's key was accepted")
	}
	if _, err := ParseCA(certPEM, keyPEM, now, 20*365*24*time.Hour); err == nil || !strings.Contains(err.Error(), "expires") {
		t.Errorf("a CA ending within the renewal window: %v, want it refused as expiring", err)
	}
}

// TestClientTrustsOnlyAfterSetRoots: a handshake before the CA is known
// fails saying so; after SetRoots, a clone made before it verifies the
// server, and a certificate for another address is refused.
func TestClientTrustsOnlyAfterSetRoots(t *testing.T) {
	ca, cert := testCA(t, "127.0.0.1")
	addr := pkitest.Serve(t, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	handshake := func(c *Client) error {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err = c.ClientHandshake(ctx, addr, conn)
		return err
	}
	c := NewClient("")
	clone := c.Clone().(*Client)
	if err := handshake(c); err == nil || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("before SetRoots: %v, want the CA named as not known yet", err)
	}
	c.SetRoots(ca.Pool())
	if err := handshake(clone); err != nil {
		t.Fatalf("after SetRoots, through a clone made before it: %v", err)
	}
	other := NewClient("10.9.0.2")
	other.SetRoots(ca.Pool())
	if err := handshake(other); err == nil {
		t.Error("a certificate for 127.0.0.1 passed for 10.9.0.2")
	}
	stranger, _ := testCA(t, "127.0.0.1")
	wrong := NewClient("")
	wrong.SetRoots(stranger.Pool())
	if err := handshake(wrong); err == nil {
		t.Error("a client trusting another CA accepted the server")
	}
}
