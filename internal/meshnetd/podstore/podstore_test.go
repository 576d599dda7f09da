package podstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func TestStoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r1 := Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/var/run/netns/cni-1", Network: "lab",
		Links: []Link{{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r2", PeerIntf: "eth1", PeerNodeIP: "192.0.2.2", VNI: 4242}}}
	r2 := Pod{Namespace: "lab", Name: "r2", ContainerID: "c2", Netns: "/var/run/netns/cni-2"}
	for _, p := range []Pod{r2, r1} {
		if err := s.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := reopened.List(); !reflect.DeepEqual(got, []Pod{r1, r2}) {
		t.Errorf("after reopen List() = %+v, want r1, r2", got)
	}
}

func TestDeleteKeepsANewerSandbox(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"lab", "r1"}
	if err := s.Put(Pod{Namespace: "lab", Name: "r1", ContainerID: "new", Netns: "/var/run/netns/cni-2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k, "old"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(k); !ok {
		t.Fatal("DEL of the old sandbox removed the new one's record")
	}
	if err := s.Delete(k, "new"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(k); ok {
		t.Fatal("record still there after DEL of its sandbox")
	}
	if err := s.Delete(k, "new"); err != nil {
		t.Errorf("second DEL: %v", err)
	}
}

func TestPutRejectsIncompleteRecords(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Pod{Namespace: "lab", Name: "r1"}); err == nil {
		t.Error("a record without netns was stored")
	}
}

// TestRuntimeHasOneWriter: Put keeps the runtime part whatever it is given,
// SetRuntime writes only the sandbox it read, and the pod's DEL takes both
// parts: a runtime call that read the pod before its DEL writes nothing
// back.
func TestRuntimeHasOneWriter(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"lab", "r1"}
	p := Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/var/run/netns/cni-1"}
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.SetRuntime(k, "c1", json.RawMessage(`{"generation":3}`)); err != nil || !wrote {
		t.Fatalf("SetRuntime of the recorded sandbox: wrote %v, %v", wrote, err)
	}
	p.Links = []Link{{UID: 1, LocalIntf: "eth1"}}
	p.Runtime = json.RawMessage(`{"generation":1}`)
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	p.ContainerID = "c2" // a new sandbox's ADD
	if err := s.Put(p); err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.SetRuntime(k, "c1", json.RawMessage(`{"generation":9}`)); err != nil || wrote {
		t.Fatalf("SetRuntime of the sandbox before: wrote %v, %v", wrote, err)
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := reopened.Get(k)
	if string(got.Runtime) != `{"generation":3}` || got.ContainerID != "c2" || len(got.Links) != 1 {
		t.Fatalf("after reopen: %+v, want c2's links and the runtime set for c1", got)
	}
	if err := s.Delete(k, "c2"); err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.SetRuntime(k, "c2", json.RawMessage(`{}`)); err != nil || wrote {
		t.Fatalf("SetRuntime after DEL: wrote %v, %v", wrote, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("files after DEL: %v", left)
	}
}

// TestWritersMeetOnOneRecord: the wiring's Puts and the runtime's
// SetRuntimes of one pod at once lose neither part, and the file says what
// the store does.
func TestWritersMeetOnOneRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"lab", "r1"}
	if err := s.Put(Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/n"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := s.Put(Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/n", Links: []Link{{UID: i}}}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.SetRuntime(k, "c1", json.RawMessage(fmt.Sprintf(`{"generation":%d}`, i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, _ := s.Get(k)
	if len(got.Runtime) == 0 || len(got.Links) != 1 {
		t.Fatalf("record after the writes: %+v, want one Put's links and one SetRuntime's runtime", got)
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk, _ := reopened.Get(k); !reflect.DeepEqual(onDisk, got) {
		t.Fatalf("file has %+v, the store %+v", onDisk, got)
	}
}

// TestAdoptRuntimes: the runtime records an older meshnetd kept in a
// directory of their own move into the pods' records; one of a pod no
// longer wired here (a DEL killed half way) is removed, and so is the
// directory.
func TestAdoptRuntimes(t *testing.T) {
	base := t.TempDir()
	s, err := Open(filepath.Join(base, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Pod{Namespace: "lab", Name: "r2", ContainerID: "c2", Netns: "/n"}); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(base, "links")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"lab_r2.json": `{"container_id":"c2","generation":4}`, "chaos-9_r1.json": `{"container_id":"c"}`} {
		if err := os.WriteFile(filepath.Join(old, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	adopted, dropped, err := s.AdoptRuntimes(old)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(adopted, []Key{{"lab", "r2"}}) || !reflect.DeepEqual(dropped, []Key{{"chaos-9", "r1"}}) {
		t.Errorf("adopted %v, dropped %v; want lab/r2, chaos-9/r1", adopted, dropped)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old directory after: %v", err)
	}
	reopened, err := Open(filepath.Join(base, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := reopened.Get(Key{"lab", "r2"}); string(p.Runtime) != `{"container_id":"c2","generation":4}` {
		t.Errorf("r2's runtime after reopen: %s", p.Runtime)
	}
	if adopted, dropped, err := s.AdoptRuntimes(old); err != nil || len(adopted)+len(dropped) != 0 {
		t.Errorf("second adoption: %v %v %v", adopted, dropped, err)
	}
}
