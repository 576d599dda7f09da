//go:build kernel

package podlinks_test

import (
	"context"
	"testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/shaping"
)

// TestKernelWiredKeepsEachEndsLastError: why CNI ADD could not make an
// end is that end's last error in the pod's record, the one record of it:
// a watch is told (the record's write tells the link watcher), GetLink
// reports it, a restarted meshnetd reads it back, an ApplyPod that
// converges the link clears it, and so does the end made later.
func TestKernelWiredKeepsEachEndsLastError(t *testing.T) {
	lab, _, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := podstore.Key{Namespace: ns, Name: "r1"}
	lastError := func(c meshnetv1.LinkServiceClient) string {
		t.Helper()
		resp, err := c.GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLink().GetLastError()
	}

	events, errs := watchLinks(t, ctx, c, &meshnetv1.WatchLinksRequest{Namespace: ns, Pod: "r1"})
	for ev := nextEvent(t, events, errs); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED; ev = nextEvent(t, events, errs) {
	}

	const why = "vni 4242 is in use on this node by another link"
	if failed := st.Links.Wired(k, nil, map[string]string{"eth1": why}); len(failed) != 0 {
		t.Fatalf("Wired with an end's error: %v", failed)
	}
	for ev := nextEvent(t, events, errs); ev.GetLink().GetLastError() != why; ev = nextEvent(t, events, errs) {
	}
	if got := lastError(c); got != why {
		t.Fatalf("GetLink last error %q, want %q", got, why)
	}

	restarted := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Reopen()})
	rc := restarted.Client(t, "")
	if got := lastError(rc); got != why {
		t.Fatalf("after a restart: last error %q, want %q", got, why)
	}
	if _, err := rc.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 1,
		Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &up}}}); err != nil {
		t.Fatal(err)
	}
	if got := lastError(rc); got != "" {
		t.Fatalf("after an ApplyPod that converged the link: last error %q", got)
	}

	if failed := restarted.Links.Wired(k, nil, map[string]string{"eth1": why}); len(failed) != 0 {
		t.Fatalf("Wired with an end's error: %v", failed)
	}
	if failed := restarted.Links.Wired(k, map[string]*shaping.Spec{"eth1": nil}, nil); len(failed) != 0 {
		t.Fatalf("Wired with the end made: %v", failed)
	}
	if got := lastError(rc); got != "" {
		t.Fatalf("after the end was made: last error %q", got)
	}
}
