package meshnetctl

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
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
