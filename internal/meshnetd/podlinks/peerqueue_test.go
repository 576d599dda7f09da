package podlinks

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPeerQueuesBoundEachNode: however many callers, at most size calls
// run at once towards one node, while another node's calls go on; a caller
// that gives up while queued returns at once, without running its call.
func TestPeerQueuesBoundEachNode(t *testing.T) {
	p := &peerQueues{size: 4}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	call := func() error {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	for range 3 { // three pods, 8 calls each, to node a
		for range 8 {
			wg.Go(func() {
				if err := p.do(context.Background(), a, call); err != nil {
					t.Error(err)
				}
			})
		}
	}
	for inFlight.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	// Node b is not held up by node a's queue.
	if err := p.do(context.Background(), b, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A caller that gives up while queued for node a leaves at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("the plugin's deadline")
	time.AfterFunc(10*time.Millisecond, func() { cancel(gone) })
	ran := false
	err := p.do(ctx, a, func() error { ran = true; return nil })
	if !errors.Is(err, gone) || ran {
		t.Errorf("a caller that gave up while queued: err %v, ran %v; want its cause and not run", err, ran)
	}
	close(release)
	wg.Wait()
	if got := most.Load(); got != 4 {
		t.Errorf("at most %d calls in flight to one node, want 4", got)
	}
}
