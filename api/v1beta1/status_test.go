package v1beta1_test

import (
	"testing"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestLinkStatusIndexAgrees: the index answers as LinkStatus and
// AsSpecified do, for a status that lists every link, for one shortened past
// MaxListingBytes (a link left out is up as specified), and for no Topology.
func TestLinkStatusIndexAgrees(t *testing.T) {
	whole := &v1beta1.Topology{}
	whole.Status.Links = []v1beta1.LinkStatus{{UID: 1, State: v1beta1.LinkUp}, {UID: 2, State: v1beta1.LinkDown}}
	short := &v1beta1.Topology{}
	short.Status.Links = []v1beta1.LinkStatus{{UID: 2, State: v1beta1.LinkDown}}
	short.Status.OmittedLinks = 2
	for name, topo := range map[string]*v1beta1.Topology{"whole": whole, "shortened": short, "none": nil} {
		x := topo.LinkStatuses()
		for uid := 1; uid <= 3; uid++ {
			if got, want := x.Of(uid), topo.LinkStatus(uid); got != want {
				t.Errorf("%s: Of(%d) = %v, LinkStatus = %v", name, uid, got, want)
			}
			if got, want := x.AsSpecified(uid), topo.AsSpecified(uid); got != want {
				t.Errorf("%s: AsSpecified(%d) = %v, Topology.AsSpecified = %v", name, uid, got, want)
			}
		}
	}
	if !short.LinkStatuses().AsSpecified(1) || short.LinkStatuses().AsSpecified(2) {
		t.Error("shortened: link 1, left out, is not up as specified, or link 2, listed down, is")
	}
}
