package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
)

// CommonName is the subject of node's meshnetd certificate.
func CommonName(node string) string { return "meshnetd:" + node }

// Serving is meshnetd's serving certificate, asked for through the
// CertificateSigningRequest API (client-go's certificate manager, as the
// kubelet's serving certificate), kept in a directory so that a restart
// reuses it, and renewed before it expires.
type Serving struct {
	ctx  context.Context
	kube kubernetes.Interface
	opts ServingOptions

	mu      sync.RWMutex
	m       certificate.Manager
	stopped bool
}

// ServingOptions says what to ask for.
type ServingOptions struct {
	Node string
	IP   netip.Addr
	// Dir keeps the key and certificate (meshnetd-current.pem).
	Dir string
	Log *slog.Logger
}

// storeName names the files of the certificate store in Dir.
const storeName = "meshnetd"

// NewServing starts the certificate manager. It serves the certificate
// kept in opts.Dir at once while that one has not expired (and asks for a
// new one at once when it no longer names opts.IP and opts.Node);
// otherwise it asks meshnet-controller for one, and until it is signed
// GetCertificate fails (so do handshakes, and the readiness probe).
func NewServing(ctx context.Context, kube kubernetes.Interface, opts ServingOptions) (*Serving, error) {
	s := &Serving{ctx: ctx, kube: kube, opts: opts}
	m, err := s.start()
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

func (s *Serving) start() (certificate.Manager, error) {
	if err := os.MkdirAll(s.opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	store, err := certificate.NewFileStore(storeName, s.opts.Dir, s.opts.Dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("certificate store %s: %w", s.opts.Dir, err)
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return s.kube, nil },
		Template: &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: CommonName(s.opts.Node)},
			DNSNames:    []string{s.opts.Node},
			IPAddresses: []net.IP{s.opts.IP.AsSlice()},
		},
		SignerName:       SignerName,
		Usages:           []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
		CertificateStore: store,
		Name:             "meshnetd-serving",
		Ctx:              &s.ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("certificate manager: %w", err)
	}
	m.Start()
	return m, nil
}

func (s *Serving) current() *tls.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m.Current()
}

// Trusted makes sure the certificate is one that roots verify. One kept
// from before meshnet-controller replaced its CA is not, though it is
// still valid for this node: it is discarded and a new one asked for at
// once, rather than at its renewal weeks later. It reports whether it did.
func (s *Serving) Trusted(roots *x509.CertPool) (bool, error) {
	c := s.current()
	if c == nil || c.Leaf == nil {
		return false, nil
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false, nil
	}
	// The old manager stops first, so that it writes no file meanwhile;
	// if the new one cannot start, the old certificate is still served.
	s.m.Stop()
	old, _ := filepath.Glob(filepath.Join(s.opts.Dir, storeName+"-*.pem"))
	for _, f := range old {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("discard certificate of the old CA: %w", err)
		}
	}
	m, err := s.start()
	if err != nil {
		return false, err
	}
	s.m = m
	return true, nil
}

// Wait waits until there is a certificate, logging every 15 s, and fails
// after wait saying where to look.
func (s *Serving) Wait(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	logged := time.Now()
	for s.current() == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("no serving certificate after %v: is meshnet-controller running with --daemon-plaintext=false? (kubectl get csr lists meshnetd's requests; a denied one says why)", wait)
		}
		if time.Since(logged) > 15*time.Second {
			s.opts.Log.Info("waiting for meshnet-controller to sign meshnetd's serving certificate", "signer", SignerName)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// GetCertificate is tls.Config.GetCertificate: the current certificate,
// renewed ones included, at every handshake.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.current(); c != nil {
		return c, nil
	}
	return nil, errors.New("meshnetd has no valid serving certificate (expired, and none signed since)")
}

// Stop stops renewing, for good.
func (s *Serving) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.m.Stop()
}

// ServerTLS is the TLS configuration of meshnetd's ports.
func (s *Serving) ServerTLS() *tls.Config {
	return &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS12}
}

// ClientTLS is the TLS configuration of a client of meshnetd: it trusts
// roots, and serverName when set overrides the dialled address as the
// name checked (meshnetd's gateway dials loopback and checks the node IP).
func ClientTLS(roots *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// Client is gRPC transport credentials for clients of meshnetd that learn
// the CA after they are made: meshnetd starts its peer connections and its
// gateway before meshnet-controller has published the CA (Trust). Until
// SetRoots, every handshake fails saying so; after it, they are TLS
// verified against the CA. Clones share the CA.
type Client struct {
	serverName string
	roots      *atomic.Pointer[x509.CertPool]
}

// NewClient returns credentials that check serverName, or the dialled host
// when it is empty, and trust nothing until SetRoots.
func NewClient(serverName string) *Client {
	return &Client{serverName: serverName, roots: new(atomic.Pointer[x509.CertPool])}
}

// SetRoots sets the CA the credentials, and their clones, trust.
func (c *Client) SetRoots(roots *x509.CertPool) { c.roots.Store(roots) }

// ClientHandshake implements credentials.TransportCredentials.
func (c *Client) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	roots := c.roots.Load()
	if roots == nil {
		return nil, nil, errors.New("meshnetd's CA is not known yet: meshnet-controller has not published it")
	}
	if c.serverName != "" {
		// gRPC's TLS checks the authority, whatever the config's
		// ServerName says.
		authority = c.serverName
	}
	return credentials.NewTLS(ClientTLS(roots, c.serverName)).ClientHandshake(ctx, authority, conn)
}

// ServerHandshake implements credentials.TransportCredentials; these
// credentials are for clients only.
func (c *Client) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("pki.Client is for clients")
}

// Info implements credentials.TransportCredentials.
func (c *Client) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", ServerName: c.serverName}
}

// Clone implements credentials.TransportCredentials.
func (c *Client) Clone() credentials.TransportCredentials {
	return &Client{serverName: c.serverName, roots: c.roots}
}

// OverrideServerName implements credentials.TransportCredentials
// (deprecated in gRPC, kept for the interface).
func (c *Client) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
