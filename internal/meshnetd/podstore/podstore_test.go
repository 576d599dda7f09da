package podstore

import (
	"reflect"
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
