package dataserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/topograph"
)

// NodeLinks reads the link ends of one namespace's pods on one Kubernetes
// node, with their kernel counters: that node's LinkService.ListLinks.
type NodeLinks interface {
	NodeLinks(ctx context.Context, node, namespace string) ([]*meshnetv1.LinkStatus, error)
}

// live gathers the link ends of a namespace from the nodes that host them,
// in parallel, each node within timeout. A node's answer is reused for ttl,
// so that the nodes and edges queries of one dashboard refresh cost one
// round of calls. A node that does not answer is reported, never an error.
type live struct {
	links   NodeLinks
	timeout time.Duration
	ttl     time.Duration
	now     func() time.Time

	mu    sync.Mutex
	calls map[nodeNS]*call
	rates map[rateKey]sample
}

type nodeNS struct{ node, namespace string }

type rateKey struct {
	namespace string
	end       topograph.End
}

// call is one ListLinks of a node, shared by everyone asking within ttl.
type call struct {
	done chan struct{}
	at   time.Time
	ends map[topograph.End]topograph.Live
	err  error
}

// sample is an end's last reading, for its byte rate.
type sample struct {
	bytes uint64
	at    time.Time
	rate  float64
}

func newLive(links NodeLinks, timeout, ttl time.Duration) *live {
	return &live{links: links, timeout: timeout, ttl: ttl, now: time.Now,
		calls: map[nodeNS]*call{}, rates: map[rateKey]sample{}}
}

// read returns the live ends of namespace on nodes, and why the nodes that
// gave none did not.
func (l *live) read(ctx context.Context, namespace string, nodes []string) (map[topograph.End]topograph.Live, map[string]string) {
	calls := make(map[string]*call, len(nodes))
	l.mu.Lock()
	now := l.now()
	for _, n := range nodes {
		k := nodeNS{n, namespace}
		c, ok := l.calls[k]
		if !ok || (isDone(c) && now.Sub(c.at) >= l.ttl) {
			c = &call{done: make(chan struct{})}
			l.calls[k] = c
			go l.run(context.WithoutCancel(ctx), k, c)
		}
		calls[n] = c
	}
	l.mu.Unlock()

	ends := map[topograph.End]topograph.Live{}
	unavailable := map[string]string{}
	for n, c := range calls {
		select {
		case <-c.done:
		case <-ctx.Done():
			unavailable[n] = ctx.Err().Error()
			continue
		}
		if c.err != nil {
			unavailable[n] = c.err.Error()
			continue
		}
		for e, lv := range c.ends {
			ends[e] = lv
		}
	}
	return ends, unavailable
}

func isDone(c *call) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (l *live) run(ctx context.Context, k nodeNS, c *call) {
	defer close(c.done)
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	got, err := l.links.NodeLinks(ctx, k.node, k.namespace)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		err = fmt.Errorf("meshnetd of node %s did not answer within %v", k.node, l.timeout)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c.at = l.now()
	if err != nil {
		c.err = err
		return
	}
	c.ends = make(map[topograph.End]topograph.Live, len(got))
	for _, s := range got {
		e := topograph.End{Pod: s.GetPod().GetName(), Interface: s.GetInterface()}
		c.ends[e] = topograph.Live{Status: s, BytesPerSecond: l.rate(k.namespace, e, s, c.at)}
	}
	l.prune(c.at)
}

// rate updates the end's byte rate with a new reading; l.mu is held.
func (l *live) rate(namespace string, e topograph.End, s *meshnetv1.LinkStatus, fetched time.Time) float64 {
	at := fetched
	if s.GetReadTime() != nil {
		at = s.GetReadTime().AsTime()
	}
	bytes := s.GetCounters().GetRxBytes() + s.GetCounters().GetTxBytes()
	k := rateKey{namespace, e}
	prev, ok := l.rates[k]
	cur := sample{bytes: bytes, at: at, rate: -1}
	switch {
	case !ok:
	case !at.After(prev.at):
		cur.rate = prev.rate
	case bytes >= prev.bytes:
		cur.rate = float64(bytes-prev.bytes) / at.Sub(prev.at).Seconds()
	default:
		cur.rate = -1 // counters restarted: a new interface
	}
	l.rates[k] = cur
	return cur.rate
}

// rateIdle is how long an end's last reading is kept without a new one.
const rateIdle = 5 * time.Minute

func (l *live) prune(now time.Time) {
	for k, s := range l.rates {
		if now.Sub(s.at) > rateIdle {
			delete(l.rates, k)
		}
	}
	for k, c := range l.calls {
		if isDone(c) && now.Sub(c.at) > rateIdle {
			delete(l.calls, k)
		}
	}
}
