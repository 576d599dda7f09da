package podlinks

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestUpdateRecordWritesWaitingChangesTogether: the changes that arrive
// while a pod's record is being written are written in one Put, each
// caller returns once its change is on disk, and none is lost.
func TestUpdateRecordWritesWaitingChangesTogether(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	store, err := podstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	k := podstore.Key{Namespace: "lab", Name: "r1"}
	rec := podstore.Pod{Namespace: k.Namespace, Name: k.Name, Netns: "/nonexistent"}
	for uid := 1; uid <= n; uid++ {
		rec.Links = append(rec.Links, podstore.Link{UID: uid})
	}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	var puts atomic.Int32
	store.Notify(func(podstore.Key) { puts.Add(1) })
	w := &Reconciler{cfg: Config{Store: store}}

	// The record is being written (its lock held) while n changes arrive.
	unlock := w.recMu.Lock(linklock.Key{Namespace: k.Namespace, Pod: k.Name})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for uid := 1; uid <= n; uid++ {
		wg.Go(func() {
			errs <- w.updateRecord(k, func(p *podstore.Pod) { p.Links[uid-1].VNI = uint32(1000 + uid) })
		})
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		w.records.mu.Lock()
		waiting := 0
		if b := w.records.pending[k]; b != nil {
			waiting = len(b.changes)
		}
		w.records.mu.Unlock()
		if waiting == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d changes waiting", waiting, n)
		}
	}
	unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := puts.Load(); got != 1 {
		t.Errorf("%d writes of the record for %d waiting changes, want 1", got, n)
	}
	reopened, err := podstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := reopened.Get(k)
	for i, l := range got.Links {
		if want := uint32(1000 + i + 1); l.VNI != want {
			t.Errorf("link %d on disk: vni %d, want %d", l.UID, l.VNI, want)
		}
	}
	// A change alone is written at once.
	if err := w.updateRecord(k, func(p *podstore.Pod) { p.Links[0].VNI = 7 }); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Get(k); got.Links[0].VNI != 7 || puts.Load() != 2 {
		t.Errorf("after a lone change: vni %d, %d writes; want 7, 2", got.Links[0].VNI, puts.Load())
	}
}
