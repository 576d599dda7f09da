//go:build kernel

package podlinks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// TestKernelBadInputChangesNothing sends invalid requests, each with a valid
// part that would change something: every one is refused naming the field,
// and the kernel and the state files are as before.
func TestKernelBadInputChangesNothing(t *testing.T) {
	lab, r1, r2 := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	// Some state to keep: a managed route.
	if _, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.8.0.0/24", Gw: "10.0.0.2"}}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, lab.Dir, r1, r2)
	bad := uint32(10)
	good := uint32(1400)
	unspecified := meshnetv1.LinkState_LINK_STATE_UNSPECIFIED
	ms := func(n int64) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string // named in the message
	}{
		{"interface with a path", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "../eth1", State: down})
			return err
		}, codes.InvalidArgument, "interface"},
		{"interface too long", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1234567890123", State: down})
			return err
		}, codes.InvalidArgument, "interface"},
		{"netns path for a pod", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "/proc/1/ns/net", Interface: "eth1", State: down})
			return err
		}, codes.InvalidArgument, "pod"},
		{"bad namespace", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: "Lab_1", Pod: "r1", Interface: "eth1", State: down})
			return err
		}, codes.InvalidArgument, "namespace"},
		{"pod this node does not host", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "ghost", Interface: "eth1", State: down})
			return err
		}, codes.NotFound, "ghost"},
		{"pod of another namespace", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: "other", Pod: "r1", Interface: "eth1", State: down})
			return err
		}, codes.NotFound, "other/r1"},
		{"interface that is not a meshnet link", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "lo", State: down})
			return err
		}, codes.NotFound, "lo"},
		{"state unspecified", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
			return err
		}, codes.InvalidArgument, "state"},
		{"state out of the enum", func() error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: 7})
			return err
		}, codes.InvalidArgument, "state"},
		{"netem missing", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
			return err
		}, codes.InvalidArgument, "netem"},
		{"loss over 100 percent", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
				Netem: &meshnetv1.NetemSpec{Delay: ms(10), LossPercent: 150}})
			return err
		}, codes.InvalidArgument, "netem.loss_percent"},
		{"jitter without delay", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
				Netem: &meshnetv1.NetemSpec{Jitter: ms(5)}})
			return err
		}, codes.InvalidArgument, "netem.jitter: needs delay"},
		{"negative delay", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
				Netem: &meshnetv1.NetemSpec{Delay: ms(-10)}})
			return err
		}, codes.InvalidArgument, "netem.delay"},
		{"rate not a multiple of 8", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
				Netem: &meshnetv1.NetemSpec{RateBps: 1001}})
			return err
		}, codes.InvalidArgument, "netem.rate_bps"},
		{"unknown distribution", func() error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
				Netem: &meshnetv1.NetemSpec{Delay: ms(10), Jitter: ms(1), Distribution: 42}})
			return err
		}, codes.InvalidArgument, "netem.distribution"},
		{"route with a bad prefix beside a good one", func() error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{
				{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}, {Dst: "10.0.0.0/33", Gw: "10.0.0.2"}}})
			return err
		}, codes.InvalidArgument, "routes[1].dst"},
		{"route gateway of another family", func() error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24", Gw: "fd00::1"}}})
			return err
		}, codes.InvalidArgument, "routes[0].gw"},
		{"route through an interface the pod lacks", func() error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24", Dev: "eth9"}}})
			return err
		}, codes.InvalidArgument, "routes[0].dev"},
		{"route with neither gateway nor device", func() error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24"}}})
			return err
		}, codes.InvalidArgument, "routes[0]"},
		{"two routes to one destination", func() error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{
				{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}, {Dst: "10.9.0.1/24", Dev: "eth1"}}})
			return err
		}, codes.InvalidArgument, "routes[1].dst"},
		{"route through a gateway on no subnet of the pod", func() error {
			// The pod's route beside it stays: nothing changes.
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{
				{Dst: "10.8.0.0/24", Gw: "10.0.0.2"}, {Dst: "10.9.0.0/24", Gw: "192.0.2.1"}}})
			return err
		}, codes.FailedPrecondition, "192.0.2.1"},
		{"apply with a bad mtu beside a down", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{
				{Interface: "eth1", State: &down, Mtu: &good}, {Interface: "eth2", Mtu: &bad}}})
			return err
		}, codes.InvalidArgument, "links[1].mtu"},
		{"apply with a state unspecified", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{
				{Interface: "eth1", State: &unspecified, Mtu: &good}}})
			return err
		}, codes.InvalidArgument, "links[0].state"},
		{"apply naming a link twice", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{
				{Interface: "eth1", State: &down}, {Interface: "eth1", Mtu: &good}}})
			return err
		}, codes.InvalidArgument, "links[1].interface"},
		{"apply with bad netem and a good route", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1",
				Links:  []*meshnetv1.LinkSpec{{Interface: "eth1", Netem: &meshnetv1.NetemSpec{ReorderPercent: 10}}},
				Routes: &meshnetv1.RouteSet{Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}}}})
			return err
		}, codes.InvalidArgument, "links[0].netem.reorder_percent"},
		{"apply with a bad route and a good down", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1",
				Links:  []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down}},
				Routes: &meshnetv1.RouteSet{Routes: []*meshnetv1.Route{{Dst: "nowhere", Gw: "10.0.0.2"}}}})
			return err
		}, codes.InvalidArgument, "routes.routes[0].dst"},
		{"apply with a negative generation", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: -1,
				Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down}}})
			return err
		}, codes.InvalidArgument, "generation"},
		{"apply a minute ahead", func() error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1",
				Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down}}, ApplyAt: timestamppb.New(time.Now().Add(time.Minute))})
			return err
		}, codes.InvalidArgument, "apply_at"},
		{"list with a bad namespace", func() error {
			_, err := c.ListLinks(ctx, &meshnetv1.ListLinksRequest{Namespace: "-x"})
			return err
		}, codes.InvalidArgument, "namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			mustCode(t, tc.name, err, tc.code)
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %q", err, tc.field)
			}
			if after := snapshot(t, lab.Dir, r1, r2); after != before {
				t.Fatalf("refused call changed something:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
