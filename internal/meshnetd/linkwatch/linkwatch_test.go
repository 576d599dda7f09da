package linkwatch

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// fakeKernel is a pod's kernel state for the watcher's reader: pure logic,
// the kernel side (netlink events) is tested in internal/meshnetd/linkserver.
type fakeKernel struct {
	mu   sync.Mutex
	pods map[podstore.Key]Snapshot
}

func (f *fakeKernel) set(k podstore.Key, ls ...*meshnetv1.LinkStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[k] = Snapshot{Links: ls}
}

func (f *fakeKernel) read(p podstore.Pod) (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[p.Key()], nil
}

func link(intf string, up bool, rx uint64) *meshnetv1.LinkStatus {
	state := meshnetv1.LinkState_LINK_STATE_DOWN
	if up {
		state = meshnetv1.LinkState_LINK_STATE_UP
	}
	return &meshnetv1.LinkStatus{Interface: intf, AdminState: state, Counters: &meshnetv1.LinkCounters{RxBytes: rx}}
}

func newWatcher(t *testing.T, buffer int) (*Watcher, *podstore.Store, *fakeKernel) {
	t.Helper()
	store, err := podstore.Open(filepath.Join(t.TempDir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKernel{pods: map[podstore.Key]Snapshot{}}
	return New(Config{Pods: store, Read: k.read, Buffer: buffer}), store, k
}

func next(t *testing.T, w *Watch) *meshnetv1.WatchLinksResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return ev
}

func TestWatchSendsListingThenChangesInOrder(t *testing.T) {
	w, store, k := newWatcher(t, 0)
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	k.set(r1, link("eth1", true, 0), link("eth2", true, 0))
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", Netns: "/nonexistent"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Refresh(r1); err != nil {
		t.Fatal(err)
	}
	watch := w.Watch("lab", "")
	defer watch.Stop()
	other := w.Watch("other", "")
	defer other.Stop()
	for _, want := range []string{"eth1", "eth2"} {
		if ev := next(t, watch); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED || ev.GetLink().GetInterface() != want {
			t.Fatalf("listing: %v, want ADDED %s", ev, want)
		}
	}
	if ev := next(t, watch); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED {
		t.Fatalf("after the listing: %v, want SYNCED", ev)
	}
	if ev := next(t, other); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED {
		t.Fatalf("watch of another namespace: %v, want SYNCED alone", ev)
	}

	// Counters alone are no change; eth1 down is; eth2 gone is a removal.
	k.set(r1, link("eth1", true, 100), link("eth2", true, 100))
	if _, _, err := w.Refresh(r1); err != nil {
		t.Fatal(err)
	}
	k.set(r1, link("eth1", false, 100))
	_, rev, err := w.Refresh(r1)
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, watch)
	if ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED || ev.GetLink().GetAdminState() != meshnetv1.LinkState_LINK_STATE_DOWN {
		t.Fatalf("after eth1 down: %v, want MODIFIED eth1 down", ev)
	}
	del := next(t, watch)
	if del.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED || del.GetLink().GetInterface() != "eth2" || del.GetRevision() != ev.GetRevision()+1 {
		t.Fatalf("after eth2 gone: %v, want DELETED eth2 at revision %d", del, ev.GetRevision()+1)
	}
	if rev != del.GetRevision() {
		t.Errorf("Refresh returned revision %d, want %d (its last event)", rev, del.GetRevision())
	}

	// The pod's record gone: every link it had is removed.
	if err := store.Delete(r1, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Refresh(r1); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, watch); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED || !proto.Equal(ev.GetLink(), link("eth1", false, 100)) {
		t.Fatalf("after the pod's DEL: %v, want DELETED eth1 with its last state", ev)
	}
}

func TestWatchTooSlowEnds(t *testing.T) {
	w, store, k := newWatcher(t, 2)
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", Netns: "/nonexistent"}); err != nil {
		t.Fatal(err)
	}
	watch := w.Watch("", "")
	for i := range 4 {
		k.set(r1, link("eth1", i%2 == 0, 0))
		if _, _, err := w.Refresh(r1); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for err == nil {
		_, err = watch.Next(context.Background())
	}
	if !errors.Is(err, ErrTooSlow) {
		t.Fatalf("a watch that fell behind ended with %v, want ErrTooSlow", err)
	}
}

// TestHoldReadsOnceAtRelease: notifications while a pod is held (a change
// in progress) are not read half way; the release reads the pod once, and
// its events but the last say that more follow.
func TestHoldReadsOnceAtRelease(t *testing.T) {
	w, store, k := newWatcher(t, 0)
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	k.set(r1, link("eth1", true, 0), link("eth2", true, 0))
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", Netns: "/nonexistent"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	watch := w.Watch("lab", "")
	defer watch.Stop()
	for ev := next(t, watch); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED; ev = next(t, watch) {
	}

	release := w.Hold(r1)
	k.set(r1, link("eth1", false, 0), link("eth2", true, 0))
	w.Touch(r1)
	k.set(r1, link("eth1", false, 0), link("eth2", false, 0))
	w.Touch(r1)
	time.Sleep(50 * time.Millisecond) // ten settles: long enough to have read, had it not been held
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer wcancel()
	if ev, err := watch.Next(wctx); err == nil {
		t.Fatalf("event while held: %v", ev)
	}
	release()
	first, second := next(t, watch), next(t, watch)
	if first.GetLink().GetInterface() != "eth1" || !first.GetMore() || second.GetLink().GetInterface() != "eth2" || second.GetMore() {
		t.Fatalf("after the release: %v then %v, want eth1 (more) then eth2 (last), both down", first, second)
	}
	for _, ev := range []*meshnetv1.WatchLinksResponse{first, second} {
		if ev.GetLink().GetAdminState() != meshnetv1.LinkState_LINK_STATE_DOWN {
			t.Fatalf("after the release: %v, want down", ev)
		}
	}
}

// TestReadSpacing: a pod whose read is costly is read again no sooner than
// readSpacing times that cost after a notification, so that a pod of
// thousands of links is not read back to back while its kernel settles.
func TestReadSpacing(t *testing.T) {
	store, err := podstore.Open(filepath.Join(t.TempDir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	const cost = 40 * time.Millisecond
	reads := make(chan time.Time, 10)
	w := New(Config{Pods: store, Read: func(podstore.Pod) (Snapshot, error) {
		time.Sleep(cost)
		reads <- time.Now()
		return Snapshot{Links: []*meshnetv1.LinkStatus{link("eth1", true, 0)}}, nil
	}})
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", Netns: "/nonexistent"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case <-reads: // the first read, which measures the cost
	case <-time.After(5 * time.Second):
		t.Fatal("the pod was never read")
	}
	// The store's notification of the Put may read the pod once more.
	for quiet := false; !quiet; {
		select {
		case <-reads:
		case <-time.After(readSpacing * cost * 2):
			quiet = true
		}
	}
	touched := time.Now()
	w.Touch(r1)
	select {
	case at := <-reads:
		// The read ends cost after it starts.
		if waited := at.Sub(touched) - cost; waited < readSpacing*cost {
			t.Errorf("read again %v after the notification, want at least %v (%d times its %v cost)", waited, readSpacing*cost, readSpacing, cost)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pod was not read again after the notification")
	}
}

// TestReadCoversEarlierNotifications: a read (an ApplyPod's Refresh) covers
// the notifications before it began, so the reads they queued are skipped;
// a notification after it still has the pod read.
func TestReadCoversEarlierNotifications(t *testing.T) {
	store, err := podstore.Open(filepath.Join(t.TempDir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	reads := make(chan time.Time, 10)
	const settle = 50 * time.Millisecond
	w := New(Config{Pods: store, Settle: settle, Read: func(podstore.Pod) (Snapshot, error) {
		reads <- time.Now()
		return Snapshot{Links: []*meshnetv1.LinkStatus{link("eth1", true, 0)}}, nil
	}})
	r1 := podstore.Key{Namespace: "lab", Name: "r1"}
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", Netns: "/nonexistent"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	quiet := func() int {
		n := 0
		for {
			select {
			case <-reads:
				n++
			case <-time.After(6 * settle):
				return n
			}
		}
	}
	if quiet() == 0 {
		t.Fatal("the pod was never read")
	}

	w.Touch(r1) // the kernel's notification of a change...
	w.Touch(r1)
	if _, _, err := w.Refresh(r1); err != nil { // ...which the change's own read covers
		t.Fatal(err)
	}
	if n := quiet(); n != 1 {
		t.Errorf("%d reads after two notifications and a read that began after them, want 1 (the read)", n)
	}
	w.Touch(r1)
	if n := quiet(); n != 1 {
		t.Errorf("%d reads after a notification that no read covered, want 1", n)
	}
}

// TestListingHasPodsNotReadYet: a watch that starts before the watcher's
// first read of a pod (meshnetd just started, Run not yet through the
// store) lists that pod before SYNCED, not after.
func TestListingHasPodsNotReadYet(t *testing.T) {
	w, store, k := newWatcher(t, 0)
	for _, name := range []string{"r1", "r2"} {
		key := podstore.Key{Namespace: "lab", Name: name}
		k.set(key, link("eth1", true, 0))
		if err := store.Put(podstore.Pod{Namespace: "lab", Name: name, Netns: "/nonexistent"}); err != nil {
			t.Fatal(err)
		}
	}
	watch := w.Watch("lab", "") // Run not started: nothing read
	defer watch.Stop()
	var listed []string
	for ev := next(t, watch); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED; ev = next(t, watch) {
		listed = append(listed, ev.GetType().String()+" "+ev.GetPod().GetName()+"/"+ev.GetLink().GetInterface())
	}
	if want := []string{"LINK_EVENT_TYPE_ADDED r1/eth1", "LINK_EVENT_TYPE_ADDED r2/eth1"}; !slices.Equal(listed, want) {
		t.Fatalf("listing before SYNCED: %q, want %q", listed, want)
	}
}
