//go:build kernel

package controller_test

import (
	"context"
	"testing"
	"time"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

// linkClient calls node n's meshnetd as an operator's grpcurl does, from the
// node network, with a token that may patch Topologies.
func linkClient(t testing.TB, p *pair, n *labnet.Node) meshnetv1.LinkServiceClient {
	t.Helper()
	return p.lab.LinkClient(n)
}

func linkIs(intf string, ok func(*v1beta1.LinkStatus) bool) func(*v1beta1.Topology) bool {
	return func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, intf)
		return l != nil && ok(l)
	}
}

// TestKernelStatusFollowsRuntimeChanges changes r1's links behind the
// Topology's back: down through meshnetd's API (as grpcurl does), up with
// `ip link set` inside the pod, an MTU and an address changed there too.
// Each shows in r1's status well before the controller's resync (10s
// here), because meshnetd's link watch tells the controller; no Topology
// edit is made.
func TestKernelStatusFollowsRuntimeChanges(t *testing.T) {
	p := newPair(t)
	c := linkClient(t, p, p.a)
	const within = 5 * time.Second // the resync is 10s: only an event is this fast
	gen := get(t, p.lab, "r1").Generation

	start := time.Now()
	if _, err := c.SetLinkState(context.Background(), &meshnetv1.SetLinkStateRequest{
		Namespace: "lab", Pod: "r1", Interface: "eth1", State: meshnetv1.LinkState_LINK_STATE_DOWN}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p.lab, "r1", within, linkIs("eth1", func(l *v1beta1.LinkStatus) bool { return l.State == v1beta1.LinkDown && !l.Carrier }))
	waitStatus(t, p.lab, "r2", within, linkIs("eth1", func(l *v1beta1.LinkStatus) bool { return !l.Carrier }))
	t.Logf("down through the API: in both statuses after %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if out, err := p.r1.Run("ip", "link", "set", "eth1", "up"); err != nil {
		t.Fatalf("ip link set eth1 up in r1: %v: %s", err, out)
	}
	waitStatus(t, p.lab, "r1", within, linkIs("eth1", func(l *v1beta1.LinkStatus) bool { return l.State == v1beta1.LinkUp && l.Carrier }))
	t.Logf("up inside the pod: in the status after %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if out, err := p.r1.Run("ip", "link", "set", "eth2", "mtu", "1400"); err != nil {
		t.Fatalf("ip link set eth2 mtu 1400 in r1: %v: %s", err, out)
	}
	waitStatus(t, p.lab, "r1", within, linkIs("eth2", func(l *v1beta1.LinkStatus) bool { return l.MTU == 1400 }))
	t.Logf("MTU inside the pod: in the status after %v", time.Since(start).Round(time.Millisecond))

	if g := get(t, p.lab, "r1").Generation; g != gen {
		t.Errorf("r1's generation went from %d to %d: a runtime change edited the spec", gen, g)
	}
}

// BenchmarkKernelRuntimeChangeToStatus times a link state change made with
// meshnetd's API (as grpcurl makes it) until r1's Topology status shows
// it, alternating down and up.
func BenchmarkKernelRuntimeChangeToStatus(b *testing.B) {
	p := newPair(b)
	c := linkClient(b, p, p.a)
	const changes = 100
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range changes {
			want, state := v1beta1.LinkDown, meshnetv1.LinkState_LINK_STATE_DOWN
			if i%2 == 1 {
				want, state = v1beta1.LinkUp, meshnetv1.LinkState_LINK_STATE_UP
			}
			start := time.Now()
			if _, err := c.SetLinkState(context.Background(), &meshnetv1.SetLinkStateRequest{
				Namespace: "lab", Pod: "r1", Interface: "eth1", State: state}); err != nil {
				b.Fatal(err)
			}
			for {
				if l := linkStatus(get(b, p.lab, "r1"), "eth1"); l != nil && l.State == want {
					break
				}
				if time.Since(start) > 10*time.Second {
					b.Fatalf("change %d: eth1 %s never in the status", i, want)
				}
				time.Sleep(2 * time.Millisecond)
			}
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	reportLatencies(b, "runtime changes", lat)
}
