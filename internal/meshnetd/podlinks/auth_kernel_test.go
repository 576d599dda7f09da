//go:build kernel

package podlinks_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// TestKernelAuthRefusedChangesNothing calls every mutating method without a
// token, with a forged one, with a token not allowed to patch topologies,
// and with one allowed in another namespace: each is refused and nothing
// changes. Reads are open, or need a token allowed to list the namespace's
// Topologies, as configured.
func TestKernelAuthRefusedChangesNothing(t *testing.T) {
	tok := podlinkstest.Cluster(t, ns)
	lab, r1, r2 := twoPods(t)
	closed := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store, Checker: tok.Checker})
	open := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store, Checker: tok.Checker, ReadOpen: true})
	ctx := context.Background()
	before := snapshot(t, lab.Dir, r1, r2)

	mtu := uint32(1400)
	mutations := []struct {
		name string
		call func(meshnetv1.LinkServiceClient, string) error
	}{
		{"SetLinkState", func(c meshnetv1.LinkServiceClient, namespace string) error {
			_, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: namespace, Pod: "r1", Interface: "eth1", State: down})
			return err
		}},
		{"SetNetem", func(c meshnetv1.LinkServiceClient, namespace string) error {
			_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: namespace, Pod: "r1", Interface: "eth1", Netem: &meshnetv1.NetemSpec{Delay: durationpb.New(1e7)}})
			return err
		}},
		{"ClearNetem", func(c meshnetv1.LinkServiceClient, namespace string) error {
			_, err := c.ClearNetem(ctx, &meshnetv1.ClearNetemRequest{Namespace: namespace, Pod: "r1", Interface: "eth1"})
			return err
		}},
		{"SetRoutes", func(c meshnetv1.LinkServiceClient, namespace string) error {
			_, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: namespace, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}}})
			return err
		}},
		{"ApplyPod", func(c meshnetv1.LinkServiceClient, namespace string) error {
			_, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: namespace, Pod: "r1", Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down, Mtu: &mtu}}})
			return err
		}},
	}
	for _, caller := range []struct {
		name, token, namespace string
		want                   codes.Code
	}{
		{"no token", "", ns, codes.Unauthenticated},
		{"forged token", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", ns, codes.Unauthenticated},
		{"token without patch on topologies", tok.Viewer, ns, codes.PermissionDenied},
		{"editor of another namespace", tok.Editor, "other", codes.PermissionDenied},
	} {
		for _, st := range []*podlinkstest.Stack{closed, open} {
			c := st.Client(t, caller.token)
			for _, m := range mutations {
				mustCode(t, caller.name+" "+m.name, m.call(c, caller.namespace), caller.want)
				if after := snapshot(t, lab.Dir, r1, r2); after != before {
					t.Fatalf("%s %s refused but changed:\nbefore %s\nafter  %s", caller.name, m.name, before, after)
				}
			}
		}
	}

	get := func(st *podlinkstest.Stack, token string) error {
		_, err := st.Client(t, token).GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
		return err
	}
	list := func(st *podlinkstest.Stack, token string) error {
		_, err := st.Client(t, token).ListLinks(ctx, &meshnetv1.ListLinksRequest{Namespace: ns})
		return err
	}
	mustCode(t, "GetLink without a token, reads closed", get(closed, ""), codes.Unauthenticated)
	mustCode(t, "ListLinks without a token, reads closed", list(closed, ""), codes.Unauthenticated)
	mustCode(t, "GetLink as viewer, reads closed", get(closed, tok.Viewer), codes.OK)
	_, err := closed.Client(t, tok.Viewer).GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: "other", Pod: "r1", Interface: "eth1"})
	mustCode(t, "GetLink of another namespace as viewer, reads closed", err, codes.PermissionDenied)
	_, err = closed.Client(t, tok.Viewer).ListLinks(ctx, &meshnetv1.ListLinksRequest{})
	mustCode(t, "ListLinks of every namespace as a namespace's viewer, reads closed", err, codes.PermissionDenied)
	mustCode(t, "GetLink without a token, reads open", get(open, ""), codes.OK)
	mustCode(t, "ListLinks without a token, reads open", list(open, ""), codes.OK)

	// The editor may.
	mustCode(t, "editor SetLinkState", mutations[0].call(closed.Client(t, tok.Editor), ns), codes.OK)
	waitCarrier(t, r2, "eth1", false)
}
