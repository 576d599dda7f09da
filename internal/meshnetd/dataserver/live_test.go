package dataserver

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/topograph"
)

// nodeLinks answers ListLinks per node from a table; a node missing from it
// blocks until the call's deadline, as a daemon that does not answer.
type nodeLinks struct {
	mu    sync.Mutex
	ends  map[string][]*meshnetv1.LinkStatus
	calls map[string]int
}

func (n *nodeLinks) NodeLinks(ctx context.Context, node, namespace string) ([]*meshnetv1.LinkStatus, error) {
	n.mu.Lock()
	n.calls[node]++
	ends, ok := n.ends[node]
	n.mu.Unlock()
	if !ok {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return ends, nil
}

func (n *nodeLinks) set(node string, ends ...*meshnetv1.LinkStatus) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ends[node] = ends
}

func (n *nodeLinks) count(node string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[node]
}

func reading(pod, intf string, bytes uint64, at time.Time) *meshnetv1.LinkStatus {
	return &meshnetv1.LinkStatus{
		Pod: &meshnetv1.PodRef{Namespace: "lab", Name: pod}, Interface: intf,
		Counters: &meshnetv1.LinkCounters{TxBytes: bytes}, ReadTime: timestamppb.New(at),
	}
}

func TestLiveAnswersFromSlowAndFastNodes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	nl := &nodeLinks{ends: map[string][]*meshnetv1.LinkStatus{"node-a": {reading("r1", "eth1", 10, t0)}}, calls: map[string]int{}}
	l := newLive(nl, 100*time.Millisecond, time.Second)
	start := time.Now()
	ends, unavailable := l.read(context.Background(), "lab", []string{"node-a", "node-b"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("read took %v: a silent node must only cost the timeout", took)
	}
	if _, ok := ends[topograph.End{Pod: "r1", Interface: "eth1"}]; !ok || len(ends) != 1 {
		t.Errorf("ends = %v, want r1/eth1 from node-a", ends)
	}
	if msg := unavailable["node-b"]; !strings.Contains(msg, "node-b did not answer within 100ms") {
		t.Errorf("unavailable = %v, want node-b reported", unavailable)
	}
	if _, ok := unavailable["node-a"]; ok {
		t.Errorf("node-a answered but is reported unavailable: %v", unavailable)
	}
}

func TestLiveSharesAnswersWithinTTL(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	nl := &nodeLinks{ends: map[string][]*meshnetv1.LinkStatus{"node-a": {reading("r1", "eth1", 1000, t0)}}, calls: map[string]int{}}
	l := newLive(nl, time.Second, time.Second)
	l.now = func() time.Time { return now }

	ends, _ := l.read(context.Background(), "lab", []string{"node-a"})
	if got := ends[topograph.End{Pod: "r1", Interface: "eth1"}].BytesPerSecond; got >= 0 {
		t.Errorf("rate after one reading = %v, want unknown (negative)", got)
	}
	now = t0.Add(500 * time.Millisecond)
	l.read(context.Background(), "lab", []string{"node-a"})
	if c := nl.count("node-a"); c != 1 {
		t.Errorf("%d calls within the TTL, want 1", c)
	}

	now = t0.Add(2 * time.Second)
	nl.set("node-a", reading("r1", "eth1", 5000, t0.Add(2*time.Second)))
	ends, _ = l.read(context.Background(), "lab", []string{"node-a"})
	if c := nl.count("node-a"); c != 2 {
		t.Errorf("%d calls after the TTL, want 2", c)
	}
	if got := ends[topograph.End{Pod: "r1", Interface: "eth1"}].BytesPerSecond; got != 2000 {
		t.Errorf("rate = %v B/s, want 2000 (4000 bytes in 2 s)", got)
	}

	// A new interface starts its counters again: no rate, not a negative one.
	now = t0.Add(4 * time.Second)
	nl.set("node-a", reading("r1", "eth1", 10, t0.Add(4*time.Second)))
	ends, _ = l.read(context.Background(), "lab", []string{"node-a"})
	if got := ends[topograph.End{Pod: "r1", Interface: "eth1"}].BytesPerSecond; got >= 0 {
		t.Errorf("rate after a counter reset = %v, want unknown", got)
	}
}

func TestLiveCallerGivingUp(t *testing.T) {
	nl := &nodeLinks{ends: map[string][]*meshnetv1.LinkStatus{}, calls: map[string]int{}}
	l := newLive(nl, time.Minute, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, unavailable := l.read(ctx, "lab", []string{"node-b"})
	if !strings.Contains(unavailable["node-b"], context.DeadlineExceeded.Error()) {
		t.Errorf("unavailable = %v, want the caller's deadline", unavailable)
	}
}

func TestLiveNodeError(t *testing.T) {
	l := newLive(failing{}, time.Second, time.Second)
	_, unavailable := l.read(context.Background(), "lab", []string{"node-c"})
	if !strings.Contains(unavailable["node-c"], "no ready meshnetd") {
		t.Errorf("unavailable = %v", unavailable)
	}
}

type failing struct{}

func (failing) NodeLinks(context.Context, string, string) ([]*meshnetv1.LinkStatus, error) {
	return nil, errors.New("no ready meshnetd on node node-c")
}
