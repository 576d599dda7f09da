package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testIssuer publishes one ECDSA key as the API server does (discovery and
// JWKS) and signs tokens with it or with a key it does not publish.
type testIssuer struct {
	t          *testing.T
	url        string
	key, other *ecdsa.PrivateKey
	reads      atomic.Int32
}

func newTestIssuer(t *testing.T) *testIssuer {
	ti := &testIssuer{t: t, url: "https://kubernetes.default.svc.cluster.local"}
	for _, k := range []**ecdsa.PrivateKey{&ti.key, &ti.other} {
		var err error
		if *k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	return ti
}

func (ti *testIssuer) get(_ context.Context, path string) ([]byte, error) {
	ti.reads.Add(1)
	switch path {
	case "/.well-known/openid-configuration":
		return json.Marshal(map[string]string{"issuer": ti.url, "jwks_uri": ti.url + "/openid/v1/jwks"})
	case "/openid/v1/jwks":
		return json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: ti.key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	}
	return nil, fmt.Errorf("no %s", path)
}

// token signs claims for Audience with key under key id kid.
func (ti *testIssuer) token(key *ecdsa.PrivateKey, kid, issuer string, expiry time.Time) string {
	return ti.tokenFor(Audience, key, kid, issuer, expiry)
}

// tokenFor signs claims for audience aud with key under key id kid.
func (ti *testIssuer) tokenFor(aud string, key *ecdsa.PrivateKey, kid, issuer string, expiry time.Time) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		ti.t.Fatal(err)
	}
	s, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: issuer, Audience: jwt.Audience{aud}, Subject: "system:serviceaccount:lab:operator", Expiry: jwt.NewNumericDate(expiry)}).Serialize()
	if err != nil {
		ti.t.Fatal(err)
	}
	return s
}

// TestIssuerTellsSignedFromForged: the cluster's tokens are Signed once
// its keys are read (in the background, never blocking a check); a token
// naming the issuer with another key's signature, or expired, is Forged;
// one it signed for the API server is OtherAudience;
// another issuer's token or no JWT at all is Unknown. A key id not held
// reads the keys again, at most once per refresh interval.
func TestIssuerTellsSignedFromForged(t *testing.T) {
	ti := newTestIssuer(t)
	i := NewIssuer(ti.get, slog.Default())
	hour := time.Now().Add(time.Hour)
	good := ti.token(ti.key, "k1", ti.url, hour)
	if v := i.Check(good); v != Unknown {
		t.Fatalf("before the keys are read: %v, want Unknown", v)
	}
	waitFor(t, func() bool { return i.Check(good) == Signed })
	for name, tc := range map[string]struct {
		token string
		want  Verdict
	}{
		"another key, same id":   {ti.token(ti.other, "k1", ti.url, hour), Forged},
		"expired":                {ti.token(ti.key, "k1", ti.url, time.Now().Add(-time.Hour)), Forged},
		"for the API server":     {ti.tokenFor(ti.url, ti.key, "k1", ti.url, hour), OtherAudience},
		"another issuer":         {ti.token(ti.other, "k1", "https://dex.example", hour), Unknown},
		"not a JWT":              {"garbage-1234", Unknown},
		"a key id not published": {ti.token(ti.other, "k9", ti.url, hour), Unknown},
	} {
		if v := i.Check(tc.token); v != tc.want {
			t.Errorf("%s: %v, want %v", name, v, tc.want)
		}
	}
	reads := ti.reads.Load()
	for range 100 {
		i.Check(ti.token(ti.other, "k9", ti.url, hour))
	}
	time.Sleep(50 * time.Millisecond)
	if n := ti.reads.Load() - reads; n != 0 {
		t.Errorf("100 tokens with an unknown key id within the refresh interval read the keys %d more times, want none", n)
	}
}

// TestSignedTokensAreNotPaced: with the issuer's keys, a flood of made-up
// tokens neither delays the cluster's own new token nor costs reviews for
// forged ones.
func TestSignedTokensAreNotPaced(t *testing.T) {
	ti := newTestIssuer(t)
	good := ti.token(ti.key, "k1", ti.url, time.Now().Add(time.Hour))
	var reviews atomic.Int32
	c := NewChecker(reviewer(good, &reviews), time.Minute).WithIssuer(NewIssuer(ti.get, slog.Default()))
	waitFor(t, func() bool { return c.issuer.Check(good) == Signed })
	ctx := context.Background()
	for i := range 200 {
		c.Authenticate(ctx, fmt.Sprintf("garbage-%d", i))
	}
	before := reviews.Load()
	if _, err := c.Authenticate(ctx, ti.token(ti.other, "k1", ti.url, time.Now().Add(time.Hour))); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a forged token: %v, want Unauthenticated", err)
	}
	_, err := c.Authenticate(ctx, ti.tokenFor(ti.url, ti.key, "k1", ti.url, time.Now().Add(time.Hour)))
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "audience meshnetd") {
		t.Errorf("the cluster's token for the API server: %v, want Unauthenticated naming audience meshnetd", err)
	}
	if _, err := c.Authenticate(ctx, good); err != nil {
		t.Errorf("the cluster's new token after a flood: %v, want accepted", err)
	}
	if reviews.Load() != before+1 {
		t.Errorf("the cluster's new token cost %d reviews, want 1 (the forged one and the API server's none)", reviews.Load()-before)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not within 5s")
		}
	}
}
