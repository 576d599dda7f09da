//go:build kernel

package podlinks_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestKernelReapplyKeepsAPeersState: a pod's end set down by its peer's
// node (SetEndStates, as for the far end of a VXLAN whose near end a
// LinkFault holds) after the pod's own apply said up stays down when a
// restarted meshnetd re-applies the pod: the last apply takes the state.
// It came up for a second in the kernel tier's kill test.
func TestKernelReapplyKeepsAPeersState(t *testing.T) {
	lab, r1, r2 := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	ctx := context.Background()
	if _, err := st.Links.LinkServer().ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 1,
		Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &up}}}); err != nil {
		t.Fatal(err)
	}
	r1Key := podstore.Key{Namespace: ns, Name: "r1"}
	if r := st.Links.SetEndStates(ctx, r1Key, map[string]bool{"eth1": false})["eth1"]; r.Err != nil || !r.Changed {
		t.Fatalf("SetEndStates down: %+v", r)
	}
	waitCarrier(t, r2, "eth1", false)

	restarted := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Reopen()})
	if err := restarted.Links.Reapply(ctx, r1Key); err != nil {
		t.Fatal(err)
	}
	if s := mustState(t, r1, "eth1"); s.AdminUp {
		t.Fatalf("r1 eth1 after the restart's Reapply: %+v, want down as its peer set it last", s)
	}
	// Up the same way, and the restart keeps it up.
	if r := restarted.Links.SetEndStates(ctx, r1Key, map[string]bool{"eth1": true})["eth1"]; r.Err != nil || !r.Changed {
		t.Fatalf("SetEndStates up: %+v", r)
	}
	again := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Reopen()})
	if err := again.Links.Reapply(ctx, r1Key); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, r2, "eth1", true)
}

// TestKernelAdminStateRecordedBeforeTheKernel: the pod's last apply, which
// a restarted meshnetd re-applies, has a link's new admin state before the
// kernel does, for an ApplyPod and for a peer node's SetEndStates. Read at
// the moment the kernel reports the change, the record had the older
// state: a meshnetd killed in between brought a held link up at its
// restart (the kernel tier's kill test, once in a CI run).
func TestKernelAdminStateRecordedBeforeTheKernel(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	ctx := context.Background()
	apply := func(gen int64, state meshnetv1.LinkState) {
		if _, err := st.Links.LinkServer().ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: gen,
			Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &state}}}); err != nil {
			t.Errorf("ApplyPod generation %d: %v", gen, err)
		}
	}
	apply(1, up)

	// recordedAt returns, once r1's eth1 turns wantUp in the kernel, the
	// state the record's last apply had for it at that moment.
	recordedAt := func(wantUp bool, change func()) string {
		t.Helper()
		h, err := netns.GetFromPath(r1.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		updates, done := make(chan netlink.LinkUpdate, 64), make(chan struct{})
		defer close(done)
		if err := netlink.LinkSubscribeAt(h, updates, done); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(change)
		timeout := time.After(5 * time.Second)
		for {
			select {
			case u := <-updates:
				if u.Attrs().Name != "eth1" || (u.Attrs().Flags&net.FlagUp != 0) != wantUp {
					continue
				}
				return lastApplied(t, lab, "r1", "eth1")
			case <-timeout:
				t.Fatalf("r1 eth1 never turned up=%v", wantUp)
			}
		}
	}
	if got := recordedAt(false, func() { apply(2, down) }); got != "LINK_STATE_DOWN" {
		t.Errorf("ApplyPod down: the last apply said %q when the kernel took eth1 down, want LINK_STATE_DOWN", got)
	}
	r1Key := podstore.Key{Namespace: ns, Name: "r1"}
	setEnd := func(up bool) func() {
		return func() { st.Links.SetEndStates(ctx, r1Key, map[string]bool{"eth1": up}) }
	}
	if got := recordedAt(true, setEnd(true)); got != "LINK_STATE_UP" {
		t.Errorf("SetEndStates up: the last apply said %q when the kernel took eth1 up, want LINK_STATE_UP", got)
	}
	if got := recordedAt(false, setEnd(false)); got != "LINK_STATE_DOWN" {
		t.Errorf("SetEndStates down: the last apply said %q when the kernel took eth1 down, want LINK_STATE_DOWN", got)
	}
}

// TestKernelEdgeRecordedWhileItWaits: an ApplyPod sent ahead of its moment
// (a LinkFault's edge) has its admin state in the pod's last apply while
// it waits, the kernel unchanged until the moment, so that nothing is
// written at the moment itself; a call called off before its moment puts
// back what the kernel has, so a restart does not set an edge that never
// came.
func TestKernelEdgeRecordedWhileItWaits(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	ctx := context.Background()
	if _, err := st.Links.LinkServer().ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 1,
		Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &up}}}); err != nil {
		t.Fatal(err)
	}
	recorded := func() string { return lastApplied(t, lab, "r1", "eth1") }
	downAt := func(ctx context.Context, at time.Time) error {
		_, err := st.Links.LinkServer().ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 2,
			Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down}}, ApplyAt: timestamppb.New(at)})
		return err
	}

	// Called off 300 ms into a wait of 900 ms.
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- downAt(callCtx, time.Now().Add(900*time.Millisecond)) }()
	for deadline := time.Now().Add(250 * time.Millisecond); recorded() != "LINK_STATE_DOWN"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the last apply says %q while the call waits, want LINK_STATE_DOWN", recorded())
		}
	}
	if !mustState(t, r1, "eth1").AdminUp {
		t.Fatal("eth1 went down before the call's moment")
	}
	mustCode(t, "ApplyPod called off before its moment", <-done, codes.DeadlineExceeded)
	if got := recorded(); got != "LINK_STATE_UP" || !mustState(t, r1, "eth1").AdminUp {
		t.Fatalf("after the call was called off: the last apply says %q, eth1 up=%v; want both up", got, mustState(t, r1, "eth1").AdminUp)
	}

	// On time: down at its moment, and recorded.
	at := time.Now().Add(300 * time.Millisecond)
	if err := downAt(ctx, at); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(at) || mustState(t, r1, "eth1").AdminUp || recorded() != "LINK_STATE_DOWN" {
		t.Fatalf("after the call's moment: eth1 up=%v, the last apply says %q; want both down", mustState(t, r1, "eth1").AdminUp, recorded())
	}
}
