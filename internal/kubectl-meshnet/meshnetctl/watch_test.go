package meshnetctl

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestPrintEvent: a kernel event stream as watch prints it, one line per
// change, at the time meshnetd saw it; a repeated reading prints nothing.
func TestPrintEvent(t *testing.T) {
	at := time.Date(2026, 12, 5, 22, 4, 23, 0, time.Local)
	r1 := &meshnetv1.PodRef{Namespace: "lab", Name: "r1"}
	end := func(state meshnetv1.LinkState, carrier bool) *meshnetv1.LinkStatus {
		return &meshnetv1.LinkStatus{Pod: r1, Interface: "eth1", Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN, AdminState: state, Carrier: carrier, Mtu: 1450}
	}
	ev := func(typ meshnetv1.LinkEventType, l *meshnetv1.LinkStatus) *meshnetv1.WatchLinksResponse {
		return &meshnetv1.WatchLinksResponse{Type: typ, Pod: r1, Link: l, Time: timestamppb.New(at)}
	}
	var b strings.Builder
	seen := newSeen()
	for _, e := range []*meshnetv1.WatchLinksResponse{
		ev(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, end(meshnetv1.LinkState_LINK_STATE_UP, true)),
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED},
		ev(meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, end(meshnetv1.LinkState_LINK_STATE_DOWN, false)),
		ev(meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED, end(meshnetv1.LinkState_LINK_STATE_DOWN, false)),
		// A watch opened again lists the end again: nothing changed.
		ev(meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, end(meshnetv1.LinkState_LINK_STATE_DOWN, false)),
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES, Pod: r1, Time: timestamppb.New(at),
			Routes: []*meshnetv1.Route{{Dst: "192.0.2.0/24", Gw: "12.12.12.2"}}},
		// Listed again (a relay's stream opened again): not printed again.
		{Type: meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES, Pod: r1, Time: timestamppb.New(at),
			Routes: []*meshnetv1.Route{{Dst: "192.0.2.0/24", Gw: "12.12.12.2"}}},
		ev(meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED, end(meshnetv1.LinkState_LINK_STATE_DOWN, false)),
	} {
		seen.print(&b, e)
	}
	want := `22:04:23  r1                eth1        wired: vxlan, up, carrier yes, mtu 1450
22:04:23  r1                eth1        state up -> down, carrier yes -> no
22:04:23  r1                -           routes: 192.0.2.0/24 via 12.12.12.2
22:04:23  r1                eth1        removed
`
	if b.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestPrintFault: a LinkFault's windows as watch prints them, one line per
// link it holds; a status write that changes neither the phase nor the
// window prints nothing.
func TestPrintFault(t *testing.T) {
	until := metav1.NewMicroTime(time.Date(2026, 12, 6, 23, 0, 30, 0, time.Local))
	f := &v1beta1.LinkFault{ObjectMeta: metav1.ObjectMeta{Name: "cut"}, Spec: v1beta1.LinkFaultSpec{
		Links: []v1beta1.FaultLink{{Pod: "r1", Interface: "eth1"}, {Pod: "r2", Interface: "eth3"}}}}
	known := map[string]v1beta1.LinkFaultStatus{}
	var b strings.Builder
	for i, st := range []v1beta1.LinkFaultStatus{
		{Phase: v1beta1.FaultPending},
		{Phase: v1beta1.FaultActive, Windows: 1, NextEdge: &until},
		{Phase: v1beta1.FaultActive, Windows: 1, NextEdge: &until, HeldLinks: 2},
		{Phase: v1beta1.FaultCompleted, Windows: 1},
	} {
		f.Status = st
		printFault(&b, f, known, i == 0)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		got = append(got, strings.Join(strings.Fields(line)[1:], " ")) // without the time
	}
	want := []string{
		"r1 eth1 held by LinkFault cut (window 1, until 23:00:30)",
		"r2 eth3 held by LinkFault cut (window 1, until 23:00:30)",
		"r1 eth1 let go by LinkFault cut (window 1 ended; completed)",
		"r2 eth3 let go by LinkFault cut (window 1 ended; completed)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
