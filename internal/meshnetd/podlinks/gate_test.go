package podlinks

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// entered runs g.enter for k in the background and reports its result.
func entered(ctx context.Context, g *gate, k podstore.Key) <-chan error {
	ch := make(chan error, 1)
	go func() {
		leave, err := g.enter(ctx, k)
		if err == nil {
			defer leave()
		}
		ch <- err
	}()
	return ch
}

// mustEnter waits up to 5 s for a background enter to succeed; what
// names the call in the failure.
func mustEnter(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still waiting after 5s", what)
	}
}

// TestGateRetryWaitsForTheCallItRetries: a second ApplyPod of a pod (the
// controller's retry after a deadline) does not start while the first
// works; it starts when the first leaves. Another pod is not held up.
func TestGateRetryWaitsForTheCallItRetries(t *testing.T) {
	var g gate
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	leave, err := g.enter(context.Background(), r1)
	if err != nil {
		t.Fatal(err)
	}
	retry := entered(context.Background(), &g, r1)
	mustEnter(t, entered(context.Background(), &g, podstore.Key{Namespace: "lab", Name: "r2"}), "another pod's call, beside r1's")
	select {
	case err := <-retry:
		t.Fatalf("the retry ran beside the call it retries (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	leave()
	mustEnter(t, retry, "the retry, after the first call left")
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.held) != 0 {
		t.Errorf("gate holds %d pods after every call left", len(g.held))
	}
}

// TestGateWaiterGivesUp: a waiter whose context ends returns the gRPC code
// of that end and does not take the turn from the next caller.
func TestGateWaiterGivesUp(t *testing.T) {
	var g gate
	k := podstore.Key{Namespace: "lab", Name: "r1"}
	leave, err := g.enter(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	waiter := entered(cancelled, &g, k)
	timedOut, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	late := entered(timedOut, &g, k)
	cancel()
	for _, c := range []struct {
		ch   <-chan error
		want codes.Code
	}{{waiter, codes.Canceled}, {late, codes.DeadlineExceeded}} {
		select {
		case err := <-c.ch:
			if status.Code(err) != c.want {
				t.Errorf("waiter: %v, want code %v", err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a waiter whose context ended (%v) still waits", c.want)
		}
	}
	leave()
	mustEnter(t, entered(context.Background(), &g, k), "the next caller, after the waiters gave up")
	if _, err := g.enter(cancelled, k); status.Code(err) != codes.Canceled {
		t.Errorf("enter with an ended context: %v, want Canceled", err)
	}
}
