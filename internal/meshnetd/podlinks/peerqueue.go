package podlinks

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sync/semaphore"
)

// peerQueues bounds the calls this meshnetd has in flight to each other
// node's meshnetd, whichever pods they are for. Each pod's ADD, DEL or sync
// sends at most remoteCallsInFlight at a time, but several pods wired at
// once towards one node multiplied them, and the peer's memory and kernel
// work with them. The queue of a node is served in order, so a small pod's
// calls wait behind at most the calls already queued, never behind all of
// a big pod's; and a caller that gives up leaves the queue at once.
type peerQueues struct {
	size int64

	mu sync.Mutex
	q  map[netip.Addr]*semaphore.Weighted
}

// do runs call once the node at ip has a free place among its calls in
// flight, or returns ctx's cause if that comes first.
func (p *peerQueues) do(ctx context.Context, ip netip.Addr, call func() error) error {
	s := p.of(ip)
	if err := s.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("queued for meshnetd at %s: %w", ip, context.Cause(ctx))
	}
	defer s.Release(1)
	return call()
}

func (p *peerQueues) of(ip netip.Addr) *semaphore.Weighted {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.q == nil {
		p.q = map[netip.Addr]*semaphore.Weighted{}
	}
	s, ok := p.q[ip]
	if !ok {
		s = semaphore.NewWeighted(p.size)
		p.q[ip] = s
	}
	return s
}
