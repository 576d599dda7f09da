// Package auth guards meshnetd's gRPC API with Kubernetes identities: a caller
// presents a bearer token minted for Audience (`kubectl create token NAME
// --audience meshnetd`, or meshnet's own projected tokens), which is checked
// with TokenReview for that audience and authorised with SubjectAccessReview against the Topology
// of the pod the call changes. Whoever may edit a pod's Topology may change
// its running links; nobody else may.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// Audience is the audience of the tokens meshnetd accepts. Bound to it, a
// token sent to meshnetd is refused by the API server, and a token of the
// API server's (which a node's root could replay there) is refused by
// meshnetd.
const Audience = "meshnetd"

// TokenRequest asks for a service account's token for Audience, valid for
// expiration (0: the API server's default).
func TokenRequest(expiration time.Duration) *authnv1.TokenRequest {
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{Audience}}}
	if expiration > 0 {
		seconds := int64(expiration.Seconds())
		req.Spec.ExpirationSeconds = &seconds
	}
	return req
}

// Access is what a method needs. The zero value means open to anyone.
type Access struct {
	// Verb, Group, Resource and Subresource form the SubjectAccessReview;
	// an empty Verb only requires a valid token.
	Verb, Group, Resource, Subresource string
	// Namespace returns the namespace the call acts in, from its request.
	Namespace func(req any) string
	// Authenticated requires a valid token even when Verb is empty.
	Authenticated bool
	// Path, when set, makes the review one of a non-resource URL (Verb on
	// Path, as the API server's own /metrics is authorized), not of a
	// resource.
	Path string
}

// Topologies is what meshnet's calls on a namespace's pods need: verb on
// topologies.networkop.co.uk in the namespace the request names (its
// GetNamespace(); none asks for every namespace). Whoever may patch a pod's
// Topology may change its running links; whoever may list a namespace's
// Topologies may read them.
func Topologies(verb string) Access {
	return Access{Verb: verb, Group: v1beta1.GroupVersion.Group, Resource: "topologies", Namespace: requestNamespace}
}

func requestNamespace(req any) string {
	if r, ok := req.(interface{ GetNamespace() string }); ok {
		return r.GetNamespace()
	}
	return ""
}

// Policy maps full gRPC method names (/meshnet.v1.LinkService/SetNetem) to
// what they need. A method missing from the policy is refused, so a new
// method is never open by accident.
type Policy map[string]Access

// Checker checks tokens and permissions against the API server, remembering
// answers for TTL so that a burst of calls costs one review of each kind,
// as the API server's own webhook authenticator and authorizer caches do:
// calls that miss the cache together share one review (a batch of edits
// reaches every node's meshnetd at once, when the cache has expired).
//
// Anyone who reaches the port can present tokens, so a token the API server
// never accepted costs a review only within NewTokenReviews a second: a
// flood of made-up tokens is refused (ResourceExhausted) without a review,
// and neither delays nor evicts the tokens already known to be valid, whose
// reviews take their own lane.
type Checker struct {
	client kubernetes.Interface
	ttl    time.Duration
	flight singleflight.Group
	// newTokens paces reviews of tokens not known to be valid; unverified
	// bounds the calls with such a token whose requests are being read.
	newTokens  *rate.Limiter
	unverified *semaphore.Weighted
	// unverifiedFor is how long an unverified call may hold its place
	// (UnverifiedDeadline).
	unverifiedFor time.Duration
	// issuer tells the cluster's own tokens from made-up ones before any
	// review; nil tells nothing.
	issuer *Issuer

	mu sync.Mutex
	// valid holds tokens the API server accepted, also once expired: their
	// next review is not paced. rejected holds refused ones. Each is bounded
	// on its own, so that refused tokens never push out valid ones.
	valid, rejected map[[32]byte]cached
	decisions       map[[32]byte]decision
}

// NewTokenReviews and NewTokenReviewBurst pace the TokenReviews of tokens
// not known to be valid: far more than a cluster's callers bring new tokens
// (each token is reviewed once per TTL), far less than a flood.
const (
	NewTokenReviews     rate.Limit = 10
	NewTokenReviewBurst            = 20
)

// MaxUnverifiedCalls bounds the calls with a token not known to be valid
// that TapHandle lets the transport read at once: each may carry a message
// of up to meshnetv1.MaxMessageBytes before its token is reviewed.
const MaxUnverifiedCalls = 8

// UnverifiedDeadline is how long a call with a new token may hold its
// place among the unverified, from its headers until its request is read
// and its token reviewed: a call that sends headers and no message is
// ended then (Canceled), so that callers without a valid token hold the
// places for seconds, not for as long as they keep a connection. The
// largest message (meshnetv1.MaxMessageBytes, 12 MiB) arrives within it
// at 10 Mbit/s.
const UnverifiedDeadline = 10 * time.Second

// errNoRequest ends a call that held its unverified place too long.
var errNoRequest = status.Errorf(codes.DeadlineExceeded,
	"no request within %v of the call's headers, and its token is not known valid", UnverifiedDeadline)

// decision is a cached SubjectAccessReview answer: nil when allowed.
type decision struct {
	err     error
	expires time.Time
}

type cached struct {
	user    authnv1.UserInfo
	err     error
	expires time.Time
}

// maxCached bounds each cache (valid tokens, refused tokens, decisions);
// past it that cache starts over.
const maxCached = 4096

// NewChecker returns a Checker using client for reviews.
func NewChecker(client kubernetes.Interface, ttl time.Duration) *Checker {
	return &Checker{
		client:        client,
		ttl:           ttl,
		newTokens:     rate.NewLimiter(NewTokenReviews, NewTokenReviewBurst),
		unverified:    semaphore.NewWeighted(MaxUnverifiedCalls),
		unverifiedFor: UnverifiedDeadline,
		valid:         map[[32]byte]cached{},
		rejected:      map[[32]byte]cached{},
		decisions:     map[[32]byte]decision{},
	}
}

// WithIssuer has c check tokens against the cluster's service-account
// issuer before reviewing them: a token it signed is reviewed without
// waiting for the pace of new tokens, a forged one is refused without a
// review. For use before c serves.
func (c *Checker) WithIssuer(i *Issuer) *Checker {
	c.issuer = i
	return c
}

// errForged refuses a token that names the cluster's issuer without its
// signature, or out of its time.
var errForged = status.Error(codes.Unauthenticated, "token rejected: not signed by the cluster's service-account issuer, or expired")

// errNotForMeshnetd refuses a token minted for another audience (the API
// server's, typically).
var errNotForMeshnetd = status.Error(codes.Unauthenticated, "token rejected: not minted for audience "+Audience+" (kubectl create token NAME --audience "+Audience+")")

// refusal is the answer to a token the issuer's verdict refuses without a
// review; nil when a review decides.
func refusal(v Verdict) error {
	switch v {
	case Forged:
		return errForged
	case OtherAudience:
		return errNotForMeshnetd
	}
	return nil
}

// errTooManyNewTokens refuses a token past the pace of new tokens' reviews.
var errTooManyNewTokens = status.Error(codes.ResourceExhausted, "too many calls with tokens meshnet has not seen yet; retry in a second")

// lookup tells what the cache knows of a token: its answer while fresh,
// and whether it was ever found valid.
func (c *Checker) lookup(key [32]byte, now time.Time) (e cached, fresh, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.valid[key]; ok {
		return e, now.Before(e.expires), true
	}
	if e, ok := c.rejected[key]; ok && now.Before(e.expires) {
		return e, true, false
	}
	return cached{}, false, false
}

// paced marks a context whose call took its turn among new tokens' reviews
// before its request was read (TapHandle): Authenticate does not pace it
// again, and calls done once the review is over.
type paced struct{ done func() }

type pacedKey struct{}

// admit refuses, without a review and without waiting, a call whose token
// is known to be refused, or is new and past the pace of reviews or the
// bound of unverified calls; for the transport to call before it reads a
// request. A new token's call holds its place among the unverified until
// its token is reviewed or the call ends.
func (c *Checker) admit(ctx context.Context, token string) (context.Context, error) {
	e, fresh, known := c.lookup(sha256.Sum256([]byte(token)), time.Now())
	if fresh {
		return ctx, e.err
	}
	if known {
		return ctx, nil
	}
	verdict := c.issuer.Check(token)
	switch {
	case refusal(verdict) != nil:
		return ctx, refusal(verdict)
	case !c.unverified.TryAcquire(1):
		return ctx, errTooManyNewTokens
	case verdict != Signed && !c.newTokens.Allow():
		c.unverified.Release(1)
		return ctx, errTooManyNewTokens
	}
	// The place is given back once, when the token is reviewed, the call
	// ends, or the deadline passes first, which also ends the call.
	var state atomic.Int32 // 0 pending, 1 reviewed or ended, 2 expired
	release := func(to int32) bool {
		if !state.CompareAndSwap(0, to) {
			return false
		}
		c.unverified.Release(1)
		return true
	}
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(c.unverifiedFor, func() {
		if release(2) {
			cancel(errNoRequest)
		}
	})
	done := func() {
		if release(1) {
			timer.Stop()
		}
	}
	context.AfterFunc(ctx, done)
	return context.WithValue(ctx, pacedKey{}, paced{done: done}), nil
}

// Authenticate returns the user a bearer token belongs to.
func (c *Checker) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	e, fresh, known := c.lookup(key, now)
	if fresh {
		return e.user, e.err
	}

	p, tapped := ctx.Value(pacedKey{}).(paced)
	if tapped {
		defer p.done()
	}
	verdict := Unknown
	if !known {
		verdict = c.issuer.Check(token)
	}
	if err := refusal(verdict); err != nil {
		c.remember(key, cached{err: err, expires: now.Add(c.ttl)})
		return authnv1.UserInfo{}, err
	}
	v, err, _ := c.flight.Do("token:"+string(key[:]), func() (any, error) {
		if !known && !tapped && verdict != Signed && !c.newTokens.Allow() {
			return nil, errTooManyNewTokens
		}
		ctx, cancel := sharedContext(ctx)
		defer cancel()
		review, err := c.client.AuthenticationV1().TokenReviews().Create(ctx,
			&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{Audience}}}, metav1.CreateOptions{})
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "token review: %v", err)
		}
		e := cached{expires: now.Add(c.ttl)}
		switch {
		case !review.Status.Authenticated:
			e.err = status.Error(codes.Unauthenticated, "token rejected by the API server for audience "+Audience+
				" (kubectl create token NAME --audience "+Audience+")")
		case !slices.Contains(review.Status.Audiences, Audience):
			// An authenticator that ignores audiences answered.
			e.err = errNotForMeshnetd
		default:
			e.user = review.Status.User
		}
		c.remember(key, e)
		return e, nil
	})
	if err != nil {
		return authnv1.UserInfo{}, err
	}
	e = v.(cached)
	return e.user, e.err
}

// remember caches a token's answer: in valid when it was accepted, else in
// rejected (and no longer in valid).
func (c *Checker) remember(key [32]byte, e cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cache := &c.valid
	if e.err != nil {
		cache = &c.rejected
		delete(c.valid, key)
	}
	if len(*cache) >= maxCached {
		*cache = map[[32]byte]cached{}
	}
	(*cache)[key] = e
}

// reviewTimeout bounds a review that several calls share: it runs on after
// the call that started it is cancelled, for the others.
const reviewTimeout = 10 * time.Second

func sharedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
}

// Authorize asks the API server whether user may do what access describes in
// namespace.
func (c *Checker) Authorize(ctx context.Context, user authnv1.UserInfo, access Access, namespace string) error {
	key, err := decisionKey(user, access, namespace)
	if err != nil {
		return status.Errorf(codes.Internal, "subject access review: %v", err)
	}
	now := time.Now()
	c.mu.Lock()
	if d, ok := c.decisions[key]; ok && now.Before(d.expires) {
		c.mu.Unlock()
		return d.err
	}
	c.mu.Unlock()
	v, err, _ := c.flight.Do("decision:"+string(key[:]), func() (any, error) {
		ctx, cancel := sharedContext(ctx)
		defer cancel()
		err := c.review(ctx, user, access, namespace)
		if status.Code(err) == codes.Unavailable {
			return nil, err // the API server's trouble, not an answer
		}
		c.mu.Lock()
		if len(c.decisions) >= maxCached {
			c.decisions = map[[32]byte]decision{}
		}
		c.decisions[key] = decision{err: err, expires: now.Add(c.ttl)}
		c.mu.Unlock()
		return decision{err: err}, nil
	})
	if err != nil {
		return err
	}
	return v.(decision).err
}

// decisionKey names what a review decides: who, doing what, where.
func decisionKey(user authnv1.UserInfo, access Access, namespace string) ([32]byte, error) {
	data, err := json.Marshal(struct {
		User                               authnv1.UserInfo
		Verb, Group, Resource, Subresource string
		Namespace, Path                    string
	}{user, access.Verb, access.Group, access.Resource, access.Subresource, namespace, access.Path})
	return sha256.Sum256(data), err
}

// review asks the API server with a SubjectAccessReview.
func (c *Checker) review(ctx context.Context, user authnv1.UserInfo, access Access, namespace string) error {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
	}}
	if access.Path != "" {
		sar.Spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Verb: access.Verb, Path: access.Path}
	} else {
		sar.Spec.ResourceAttributes = &authzv1.ResourceAttributes{
			Namespace: namespace, Verb: access.Verb, Group: access.Group,
			Resource: access.Resource, Subresource: access.Subresource,
		}
	}
	res, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Unavailable, "subject access review: %v", err)
	}
	switch {
	case res.Status.Allowed:
		return nil
	case access.Path != "":
		return status.Errorf(codes.PermissionDenied, "%s may not %s %s", user.Username, access.Verb, access.Path)
	}
	return status.Errorf(codes.PermissionDenied, "%s may not %s %s in namespace %q", user.Username, access.Verb, access.resourceName(), namespace)
}

// HTTP authenticates an HTTP request's bearer token and authorizes access
// for it: for the HTTP endpoints that are not gRPC calls (/metrics).
func (c *Checker) HTTP(r *http.Request, access Access) error {
	token, err := BearerToken(r.Header.Values("Authorization"))
	if err != nil {
		return err
	}
	user, err := c.Authenticate(r.Context(), token)
	if err != nil {
		return err
	}
	return c.Authorize(r.Context(), user, access, "")
}

func (a Access) resourceName() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	return r
}

// UnaryInterceptor enforces policy on every unary call.
func UnaryInterceptor(c *Checker, policy Policy) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := c.check(ctx, policy, info.FullMethod, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor enforces policy on every streaming call, such as server
// reflection. The request is not known when the stream opens: a
// server-streaming method whose Access needs a Namespace is checked when its
// one request arrives, before its handler sees it.
func StreamInterceptor(c *Checker, policy Policy) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if a, ok := policy[info.FullMethod]; ok && a.Verb != "" && a.Namespace != nil && !info.IsClientStream {
			return handler(srv, &checkedStream{ServerStream: ss, check: func(req any) error {
				return c.check(ss.Context(), policy, info.FullMethod, req)
			}})
		}
		if err := c.check(ss.Context(), policy, info.FullMethod, nil); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// checkedStream checks the first message it receives.
type checkedStream struct {
	grpc.ServerStream
	check   func(req any) error
	checked bool
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		return s.check(m)
	}
	return nil
}

func (c *Checker) check(ctx context.Context, policy Policy, method string, req any) error {
	access, ok := policy[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is not in meshnetd's access policy", method)
	}
	if access.Verb == "" && !access.Authenticated {
		return nil
	}
	token, err := bearerToken(ctx)
	if err != nil {
		return err
	}
	user, err := c.Authenticate(ctx, token)
	if err != nil {
		return err
	}
	if access.Verb == "" {
		return nil
	}
	namespace := ""
	if access.Namespace != nil && req != nil {
		namespace = access.Namespace(req)
	}
	return c.Authorize(ctx, user, access, namespace)
}

func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return BearerToken(md.Get("authorization"))
}

// errNoToken refuses a call that needs a token and has none.
var errNoToken = status.Error(codes.Unauthenticated, `this call needs "authorization: Bearer <token>" (a Kubernetes token for audience meshnetd, e.g. from kubectl create token NAME --audience meshnetd)`)

// BearerToken is the token of the first "Bearer" value among an
// Authorization header's values.
func BearerToken(values []string) (string, error) {
	for _, v := range values {
		if token, ok := strings.CutPrefix(v, "Bearer "); ok && token != "" {
			return token, nil
		}
	}
	return "", errNoToken
}

// TapHandle refuses a call before its request is read, when the policy
// needs a token and the call has none or one known to be refused; a call
// with a token not seen yet is read only within the pace of reviews and
// MaxUnverifiedCalls at once. So callers without a valid token make
// meshnetd hold at most MaxUnverifiedCalls requests, whatever they send.
// The interceptors still decide every call that passes.
func TapHandle(c *Checker, policy Policy) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if a, ok := policy[info.FullMethodName]; !ok || (a.Verb == "" && !a.Authenticated) {
			return ctx, nil // refused by the interceptors, or open
		}
		token, err := BearerToken(info.Header.Get("authorization"))
		if err != nil {
			return ctx, err
		}
		return c.admit(ctx, token)
	}
}

// TokenFile sends the token in a file with every call, re-reading it so that
// a rotated projected service-account token is picked up.
type TokenFile struct {
	Path string
	// Insecure allows sending the token over a connection without TLS.
	Insecure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (f TokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	token, err := readToken(f.Path)
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (f TokenFile) RequireTransportSecurity() bool { return !f.Insecure }

func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	return strings.TrimSpace(string(data)), nil
}
