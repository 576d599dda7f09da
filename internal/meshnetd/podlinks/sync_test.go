package podlinks

import (
	"slices"
	"testing"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestLinkChanges: a pod's record against its Topology and its namespace's
// interfaces. A link wired once and gone from the namespace is wired
// again; one waiting for its peer (no kind) has no interface to lose; one
// whose far end is owed is not wired again, only its far end asked for.
func TestLinkChanges(t *testing.T) {
	have := []podstore.Link{
		{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVeth, PeerPod: "r2", PeerIntf: "eth1"},                    // there
		{UID: 2, LocalIntf: "eth2", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r3", PeerIntf: "eth1"},                   // lost
		{UID: 3, LocalIntf: "eth3", PeerPod: "r4", PeerIntf: "eth1"},                                                // waiting
		{UID: 4, LocalIntf: "eth4", Kind: v1beta1.LinkKindVeth, PeerPod: "r5", PeerIntf: "eth1"},                    // moved
		{UID: 5, LocalIntf: "eth5", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r6", PeerIntf: "eth1"},                   // removed
		{UID: 7, LocalIntf: "eth7", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r9", PeerIntf: "eth1", FarEndOwed: true}, // far end owed
	}
	want := []v1beta1.Link{
		{UID: 1, LocalIntf: "eth1", PeerPod: "r2", PeerIntf: "eth1"},
		{UID: 2, LocalIntf: "eth2", PeerPod: "r3", PeerIntf: "eth1"},
		{UID: 3, LocalIntf: "eth3", PeerPod: "r4", PeerIntf: "eth1"},
		{UID: 4, LocalIntf: "eth4", PeerPod: "r7", PeerIntf: "eth1"},
		{UID: 6, LocalIntf: "eth6", PeerPod: "r8", PeerIntf: "eth1"}, // new
		{UID: 7, LocalIntf: "eth7", PeerPod: "r9", PeerIntf: "eth1"},
	}
	names := map[string]bool{"lo": true, "eth0": true, "eth1": true, "eth4": true, "eth5": true, "eth7": true}
	add, drop, lost, owed := linkChanges(have, want, names)
	uids := func(ls []v1beta1.Link) []int {
		var out []int
		for _, l := range ls {
			out = append(out, l.UID)
		}
		return out
	}
	var dropped []int
	for _, l := range drop {
		dropped = append(dropped, l.UID)
	}
	if got := uids(add); !slices.Equal(got, []int{2, 4, 6}) {
		t.Errorf("add %v, want [2 4 6]: the lost, the moved, the new", got)
	}
	if !slices.Equal(dropped, []int{4, 5}) {
		t.Errorf("drop %v, want [4 5]: the moved, the removed", dropped)
	}
	if got := uids(lost); !slices.Equal(got, []int{2}) {
		t.Errorf("lost %v, want [2]", got)
	}
	if got := uids(owed); !slices.Equal(got, []int{7}) {
		t.Errorf("owed %v, want [7]", got)
	}
}
