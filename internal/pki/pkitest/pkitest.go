// Package pkitest serves TLS handshakes for tests of certificates and of
// the clients that verify them, as net/http/httptest serves HTTP.
package pkitest

import (
	"crypto/tls"
	"testing"
)

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
