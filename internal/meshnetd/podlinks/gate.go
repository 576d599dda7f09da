package podlinks

import (
	"context"
	"sync"

	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// gate lets one ApplyPod at a time work on a pod, across its far ends too:
// a retry after a deadline waits for the call it retries, which stops at
// its next step once cancelled, rather than running beside it. A waiter
// whose own context ends gives up.
type gate struct {
	mu   sync.Mutex
	held map[podstore.Key]*turn
}

type turn struct {
	ch      chan struct{} // holds a token while free
	waiting int           // callers holding or waiting for the turn
}

// enter waits for the pod's turn; leave hands it on.
func (g *gate) enter(ctx context.Context, k podstore.Key) (leave func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	g.mu.Lock()
	if g.held == nil {
		g.held = map[podstore.Key]*turn{}
	}
	t := g.held[k]
	if t == nil {
		t = &turn{ch: make(chan struct{}, 1)}
		t.ch <- struct{}{}
		g.held[k] = t
	}
	t.waiting++
	g.mu.Unlock()
	done := func() {
		g.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(g.held, k)
		}
		g.mu.Unlock()
	}
	select {
	case <-t.ch:
		return func() { t.ch <- struct{}{}; done() }, nil
	case <-ctx.Done():
		done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
