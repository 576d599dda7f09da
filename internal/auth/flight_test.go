package auth

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// TestBurstSharesOneReview: calls that miss the cache together (a batch of
// edits reaching a node when the cache has expired) cost the API server one
// TokenReview and one SubjectAccessReview, not one each. The reviews are
// answered by a fake: what is tested is the checker's own bookkeeping.
func TestBurstSharesOneReview(t *testing.T) {
	var tokenReviews, accessReviews atomic.Int32
	cs := reviewer("token", &tokenReviews)
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(100 * time.Millisecond) // the API server's round trip
		return false, nil, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		accessReviews.Add(1)
		time.Sleep(100 * time.Millisecond)
		return true, &authzv1.SubjectAccessReview{Status: authzv1.SubjectAccessReviewStatus{Allowed: true}}, nil
	})
	c := NewChecker(cs, time.Minute)
	patch := Access{Verb: "patch", Group: "networkop.co.uk", Resource: "topologies"}

	const calls = 50
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			user, err := c.Authenticate(context.Background(), "token")
			if err == nil {
				err = c.Authorize(context.Background(), user, patch, "lab")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, m := tokenReviews.Load(), accessReviews.Load(); n != 1 || m != 1 {
		t.Errorf("%d concurrent calls made %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", calls, n, m)
	}
}
