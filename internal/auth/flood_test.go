package auth

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// reviewer answers TokenReviews as the API server would for one valid
// token, counting them: the checker's bookkeeping is what is tested.
func reviewer(valid string, reviews *atomic.Int32) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if tr.Spec.Token != valid {
			return true, &authnv1.TokenReview{}, nil
		}
		return true, &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences, User: authnv1.UserInfo{Username: "system:serviceaccount:meshnet:meshnet-controller"}}}, nil
	})
	return cs
}

// TestFloodOfNewTokensIsPaced: a thousand made-up tokens cost at most the
// burst of reviews plus the pace, the rest are refused at once with
// ResourceExhausted, and a token known to be valid is still reviewed (its
// entry expired meanwhile) and accepted in the middle of the flood.
func TestFloodOfNewTokensIsPaced(t *testing.T) {
	var reviews atomic.Int32
	c := NewChecker(reviewer("good", &reviews), 50*time.Millisecond)
	ctx := context.Background()
	if _, err := c.Authenticate(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var exhausted, rejected int
	for i := range 1000 {
		_, err := c.Authenticate(ctx, fmt.Sprintf("garbage-%d", i))
		switch status.Code(err) {
		case codes.ResourceExhausted:
			exhausted++
		case codes.Unauthenticated:
			rejected++
		default:
			t.Fatalf("garbage token %d: %v, want Unauthenticated or ResourceExhausted", i, err)
		}
	}
	elapsed := time.Since(start)
	limit := NewTokenReviewBurst + int(float64(NewTokenReviews)*elapsed.Seconds()) + 1
	if got := int(reviews.Load()) - 1; got > limit {
		t.Errorf("1000 made-up tokens in %v cost %d TokenReviews, want at most %d", elapsed, got, limit)
	}
	if exhausted == 0 || rejected == 0 {
		t.Errorf("%d refused unreviewed, %d reviewed and rejected: want both", exhausted, rejected)
	}
	time.Sleep(60 * time.Millisecond) // "good"'s entry expires
	before := reviews.Load()
	for range 50 {
		c.Authenticate(ctx, fmt.Sprintf("more-garbage-%d", reviews.Load()))
	}
	if _, err := c.Authenticate(ctx, "good"); err != nil {
		t.Errorf("the valid token during the flood: %v, want accepted", err)
	}
	if reviews.Load() == before {
		t.Error("the valid token was not reviewed again once its entry expired")
	}
}

// TestTapRefusesBeforeTheBody: the transport's check refuses a call with
// no token, a token known to be refused, or a new token past the pace,
// lets an open method and a known-valid token through, and costs no
// review itself.
func TestTapRefusesBeforeTheBody(t *testing.T) {
	var reviews atomic.Int32
	c := NewChecker(reviewer("good", &reviews), time.Minute)
	ctx := context.Background()
	c.Authenticate(ctx, "good")
	c.Authenticate(ctx, "bad")
	policy := Policy{
		"/x/Change": {Verb: "patch", Resource: "topologies"},
		"/x/Open":   {},
	}
	h := TapHandle(c, policy)
	call := func(method, token string) error {
		md := metadata.MD{}
		if token != "" {
			md.Set("authorization", "Bearer "+token)
		}
		_, err := h(ctx, &tap.Info{FullMethodName: method, Header: md})
		return err
	}
	before := reviews.Load()
	for _, tc := range []struct {
		method, token string
		want          codes.Code
	}{
		{"/x/Open", "", codes.OK},
		{"/x/Unknown", "", codes.OK}, // the interceptor refuses it, naming the method
		{"/x/Change", "", codes.Unauthenticated},
		{"/x/Change", "bad", codes.Unauthenticated},
		{"/x/Change", "good", codes.OK},
		{"/x/Change", "new", codes.OK},
	} {
		if got := status.Code(call(tc.method, tc.token)); got != tc.want {
			t.Errorf("%s with token %q: %v, want %v", tc.method, tc.token, got, tc.want)
		}
	}
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("the tap made %d reviews, want none", n)
	}
	for i := 0; c.newTokens.Tokens() >= 1; i++ {
		c.Authenticate(ctx, fmt.Sprintf("garbage-%d", i))
	}
	before = reviews.Load()
	if got := status.Code(call("/x/Change", "another-new")); got != codes.ResourceExhausted {
		t.Errorf("a new token past the pace: %v, want ResourceExhausted", got)
	}
	if got := status.Code(call("/x/Change", "good")); got != codes.OK {
		t.Errorf("the valid token past the pace: %v, want OK", got)
	}
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("the tap made %d reviews, want none", n)
	}
}

// TestTapBoundsUnverifiedCalls: at most MaxUnverifiedCalls calls with new
// tokens are read at once; a place frees when a call's token is reviewed
// or when the call ends, and a known-valid token never waits for one.
func TestTapBoundsUnverifiedCalls(t *testing.T) {
	var reviews atomic.Int32
	c := NewChecker(reviewer("good", &reviews), time.Minute)
	c.Authenticate(context.Background(), "good")
	h := TapHandle(c, Policy{"/x/Change": {Verb: "patch", Resource: "topologies"}})
	call := func(ctx context.Context, token string) (context.Context, error) {
		return h(ctx, &tap.Info{FullMethodName: "/x/Change", Header: metadata.Pairs("authorization", "Bearer "+token)})
	}
	var cancels []context.CancelFunc
	var admitted []context.Context
	for i := range MaxUnverifiedCalls {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx, err := call(ctx, fmt.Sprintf("new-%d", i))
		if err != nil {
			t.Fatalf("new token %d of %d: %v", i, MaxUnverifiedCalls, err)
		}
		cancels, admitted = append(cancels, cancel), append(admitted, ctx)
	}
	if _, err := call(context.Background(), "one-too-many"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("new token past %d unverified calls: %v, want ResourceExhausted", MaxUnverifiedCalls, err)
	}
	if _, err := call(context.Background(), "good"); err != nil {
		t.Fatalf("known-valid token while the unverified are full: %v", err)
	}
	cancels[0]() // the call ended before its review
	waitAdmitted(t, call, "after-cancel")
	// A review frees its place too, and the call is not paced twice.
	before := c.newTokens.Tokens()
	if _, err := c.Authenticate(admitted[1], "new-1"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("review of a made-up token: %v, want Unauthenticated", err)
	}
	if after := c.newTokens.Tokens(); after < before-0.5 {
		t.Errorf("a tapped call's review took another turn of the pace (%.1f -> %.1f)", before, after)
	}
	waitAdmitted(t, call, "after-review")
}

// waitAdmitted expects a new token to be admitted within a second (a
// place freed by context.AfterFunc frees in a goroutine of its own).
func waitAdmitted(t *testing.T, call func(context.Context, string) (context.Context, error), token string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		_, err := call(context.Background(), token)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("new token %q not admitted once a place freed: %v", token, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
