package linkserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestRecordsOfPodsGoneAreSwept: a DEL killed between removing the pod from
// the pod store and removing its record (as a chaos benchmark's kill during
// teardown did) left the record for good; a new Server removes the records
// of pods the store no longer has, and a call that read a pod before its
// DEL does not write its record back.
func TestRecordsOfPodsGoneAreSwept(t *testing.T) {
	dir := t.TempDir()
	pods, err := podstore.Open(filepath.Join(dir, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	wired := podstore.Pod{Namespace: "lab", Name: "r2", ContainerID: "c2", Netns: "/run/netns/x"}
	if err := pods.Put(wired); err != nil {
		t.Fatal(err)
	}
	records, err := openRecordStore(filepath.Join(dir, "links"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []podstore.Key{{Namespace: "chaos-9", Name: "r1"}, wired.Key()} {
		if err := records.save(k, podRecord{ContainerID: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{Pods: pods, Locks: &linklock.Locks{}, StateDir: records.dir})
	if err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(records.dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "lab_r2.json" {
		t.Errorf("records after start: %v, want only lab_r2.json", left)
	}

	if err := pods.Delete(wired.Key(), wired.ContainerID); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(wired.Key()); err != nil {
		t.Fatal(err)
	}
	if err := s.saveRecord(wired, podRecord{ContainerID: wired.ContainerID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(records.path(wired.Key())); !os.IsNotExist(err) {
		t.Errorf("a call that read r2 before its DEL wrote its record back (%v)", err)
	}
}
