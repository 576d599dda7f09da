//go:build kernel || vm

package podlinks_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netem"
)

const ns = "lab"

var (
	up   = meshnetv1.LinkState_LINK_STATE_UP
	down = meshnetv1.LinkState_LINK_STATE_DOWN
)

type end = podlinkstest.End

// lastApplied is the admin state of a pod's interface in the last apply of
// the pod's record, as a restarted meshnetd would read it from disk.
func lastApplied(t *testing.T, lab *podlinkstest.Lab, pod, intf string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(lab.Dir, ns+"_"+pod+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Runtime struct {
			Applied struct {
				Links []struct{ Interface, State string } `json:"links"`
			} `json:"applied"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	for _, l := range rec.Runtime.Applied.Links {
		if l.Interface == intf {
			return l.State
		}
	}
	return ""
}

// watchLinks starts a WatchLinks stream and returns its events and its end.
func watchLinks(t *testing.T, ctx context.Context, c meshnetv1.LinkServiceClient, req *meshnetv1.WatchLinksRequest) (<-chan *meshnetv1.WatchLinksResponse, <-chan error) {
	t.Helper()
	stream, err := c.WatchLinks(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	events, errs := make(chan *meshnetv1.WatchLinksResponse, 100), make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				errs <- err
				return
			}
			events <- ev
		}
	}()
	return events, errs
}

// twoPods is r1:eth1 10.0.0.1/30 <-veth-> r2:eth1 10.0.0.2/30.
func twoPods(t *testing.T) (*podlinkstest.Lab, *links.Netns, *links.Netns) {
	lab := podlinkstest.NewLab(t)
	lab.Veth(ns, 1, end{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, end{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	return lab, lab.Pod(ns, "r1"), lab.Pod(ns, "r2")
}

func mustState(t *testing.T, n *links.Netns, intf string) links.Reading {
	t.Helper()
	s, err := links.ReadLink(n, intf)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitCarrier polls: carrier follows an admin change through the kernel's
// link watch, not always within the call.
func waitCarrier(t *testing.T, n *links.Netns, intf string, want bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s := mustState(t, n, intf)
		if s.Carrier == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:%s carrier %v, want %v (admin up %v, oper %s)", n.Path(), intf, s.Carrier, want, s.AdminUp, s.OperState)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustPing(t *testing.T, n *links.Netns, dst string) {
	t.Helper()
	if ok, out := podlinkstest.Ping(n, dst, 1); !ok {
		t.Fatalf("ping %s from %s failed:\n%s", dst, n.Path(), out)
	}
}

func mustNotPing(t *testing.T, n *links.Netns, dst string) {
	t.Helper()
	if ok, out := podlinkstest.Ping(n, dst, 3); ok {
		t.Fatalf("ping %s from %s passed, want no traffic:\n%s", dst, n.Path(), out)
	}
}

func routes(t *testing.T, n *links.Netns, dev string) []string {
	t.Helper()
	rs, err := links.StaticRoutes(n, dev)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	slices.Sort(out)
	return out
}

func mustCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: %v, want code %v", what, err, want)
	}
}

func qdisc(t *testing.T, n *links.Netns, intf string) netem.State {
	t.Helper()
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	q, err := netem.Get(h, intf)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// directPeer stands for the peer node's meshnetd reached over PeerService:
// it calls the peer's Reconciler directly. The daemon reaches it through
// Config.Peers instead.
type directPeer struct{ peer *podlinks.Reconciler }

func (d directPeer) SetRemoteStates(ctx context.Context, pod podstore.Key, ends []podlinks.RemoteState) []podlinks.EndResult {
	out := make([]podlinks.EndResult, len(ends))
	for i, e := range ends {
		peer := podstore.Key{Namespace: pod.Namespace, Name: e.Link.PeerPod}
		out[i] = d.peer.SetEndStates(ctx, peer, map[string]bool{e.Link.PeerIntf: e.Up})[e.Link.PeerIntf]
	}
	return out
}
