package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Verdict is what an Issuer tells of a token before any review.
type Verdict int

const (
	// Unknown: not a token of the cluster's issuer, or its key is not
	// known yet; only a TokenReview can tell.
	Unknown Verdict = iota
	// Signed: a JWT the cluster's issuer signed, unexpired. A TokenReview
	// still decides (the token may be bound to a deleted object).
	Signed
	// Forged: it names the cluster's issuer, but its signature or its
	// times do not hold: refused without a review.
	Forged
	// OtherAudience: the cluster's issuer signed it for others than
	// Audience: refused without a review.
	OtherAudience
)

// Issuer checks tokens against the cluster's service-account issuer, with
// the keys the API server publishes (OIDC discovery, /openid/v1/jwks), so
// that a made-up token costs no TokenReview and a real one never waits
// behind made-up ones. It never blocks its caller: keys are fetched in
// the background, at first use and when a token names a key it does not
// hold, at most once per refresh interval.
type Issuer struct {
	get     func(ctx context.Context, path string) ([]byte, error)
	refresh time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	issuer   string
	keys     jose.JSONWebKeySet
	fetching bool
	fetched  time.Time
}

// NewIssuer returns an Issuer reading the API server's paths with get
// (a rest client's GET of an absolute path).
func NewIssuer(get func(ctx context.Context, path string) ([]byte, error), log *slog.Logger) *Issuer {
	return &Issuer{get: get, refresh: 30 * time.Second, log: log}
}

// algorithms are those the API server signs service-account tokens with.
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512}

// Check tells what token is, as far as the published keys tell.
func (i *Issuer) Check(token string) Verdict {
	if i == nil {
		return Unknown
	}
	tok, err := jwt.ParseSigned(token, algorithms)
	if err != nil || len(tok.Headers) != 1 {
		return Unknown
	}
	var claims jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil {
		return Unknown
	}
	i.mu.Lock()
	issuer, keys := i.issuer, i.keys.Key(tok.Headers[0].KeyID)
	i.mu.Unlock()
	if issuer == "" || claims.Issuer != issuer {
		i.fetch(issuer == "")
		return Unknown
	}
	if len(keys) == 0 {
		i.fetch(true) // a key published since the last fetch
		return Unknown
	}
	for _, k := range keys {
		var verified jwt.Claims
		if tok.Claims(k.Key, &verified) == nil {
			if verified.ValidateWithLeeway(jwt.Expected{Issuer: issuer, Time: time.Now()}, time.Minute) != nil {
				return Forged // expired, or not valid yet
			}
			if !verified.Audience.Contains(Audience) {
				return OtherAudience
			}
			return Signed
		}
	}
	return Forged
}

// fetch reads the issuer and its keys in the background, when asked and
// not fetched within the refresh interval.
func (i *Issuer) fetch(want bool) {
	if !want {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.fetching || time.Since(i.fetched) < i.refresh {
		return
	}
	i.fetching = true
	go func() {
		issuer, keys, err := i.read()
		i.mu.Lock()
		defer i.mu.Unlock()
		i.fetching, i.fetched = false, time.Now()
		if err != nil {
			i.log.Warn("service-account issuer's keys not read: every new token is paced as unknown", "error", err)
			return
		}
		i.issuer, i.keys = issuer, keys
	}()
}

func (i *Issuer) read() (string, jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), reviewTimeout)
	defer cancel()
	var keys jose.JSONWebKeySet
	data, err := i.get(ctx, "/.well-known/openid-configuration")
	if err != nil {
		return "", keys, fmt.Errorf("read the API server's OIDC discovery: %w", err)
	}
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(data, &discovery); err != nil || discovery.Issuer == "" {
		return "", keys, fmt.Errorf("OIDC discovery document without an issuer: %v", err)
	}
	if data, err = i.get(ctx, "/openid/v1/jwks"); err != nil {
		return "", keys, fmt.Errorf("read the service-account issuer's keys: %w", err)
	}
	if err := json.Unmarshal(data, &keys); err != nil {
		return "", keys, fmt.Errorf("decode the service-account issuer's keys: %w", err)
	}
	return discovery.Issuer, keys, nil
}
