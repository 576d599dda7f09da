//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestKernelVethCablePull takes a veth link down through the API: both ends
// lose carrier and no traffic passes either way; up, after a daemon restart
// in between, brings back carrier, traffic and the static routes the kernel
// flushed on down, managed and not.
func TestKernelVethCablePull(t *testing.T) {
	tok := podlinkstest.Cluster(t, ns)
	lab, r1, r2 := twoPods(t)
	if err := links.AddRoute(r1, links.Route{Dst: pfx("10.9.0.0/24"), Gw: addr("10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store, Checker: tok.Checker})
	c := st.Client(t, tok.Editor)
	ctx := context.Background()
	if _, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: []*meshnetv1.Route{{Dst: "10.8.0.0/24", Gw: "10.0.0.2", Dev: "eth1"}}}); err != nil {
		t.Fatal(err)
	}
	wantRoutes := []string{"10.8.0.0/24 via 10.0.0.2 dev eth1", "10.9.0.0/24 via 10.0.0.2 dev eth1"}
	if got := routes(t, r1, "eth1"); !slices.Equal(got, wantRoutes) {
		t.Fatalf("routes before down: %v, want %v", got, wantRoutes)
	}
	mustPing(t, r1, "10.0.0.2")

	resp, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: down})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetLink().GetAdminState() != down {
		t.Fatalf("read back after down: %v", resp.GetLink())
	}
	waitCarrier(t, r1, "eth1", false)
	waitCarrier(t, r2, "eth1", false)
	mustNotPing(t, r1, "10.0.0.2")
	mustNotPing(t, r2, "10.0.0.1")
	if got := routes(t, r1, "eth1"); len(got) != 0 {
		t.Fatalf("routes while down: %v, want the kernel to have flushed them", got)
	}
	// Down again is a no-op and must not forget what the first saved.
	if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: down}); err != nil {
		t.Fatal(err)
	}

	// meshnetd restarts: a new server on the pod store read again.
	st2 := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Reopen(), Checker: tok.Checker})
	c2 := st2.Client(t, tok.Editor)
	resp, err = c2.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: up})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.GetLink(); l.GetAdminState() != up {
		t.Fatalf("read back after up: %v", l)
	}
	waitCarrier(t, r1, "eth1", true)
	waitCarrier(t, r2, "eth1", true)
	mustPing(t, r1, "10.0.0.2")
	mustPing(t, r2, "10.0.0.1")
	if got := routes(t, r1, "eth1"); !slices.Equal(got, wantRoutes) {
		t.Fatalf("routes after up: %v, want %v restored", got, wantRoutes)
	}
	got, err := c2.GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r2", Interface: "eth1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetLink(); !l.GetCarrier() || l.GetAdminState() != up || l.GetKind() != meshnetv1.LinkKind_LINK_KIND_VETH ||
		l.GetPeer().GetPod().GetPod().GetName() != "r1" || !slices.Equal(l.GetAddresses(), []string{"10.0.0.2/30"}) {
		t.Fatalf("GetLink r2 eth1: %v", l)
	}
}

// underlay is two node namespaces joined by a veth: node-a 192.168.50.1 on
// eth0, node-b 192.168.50.2 on ens5 (different NIC names on purpose).
func underlay(t *testing.T) (*links.Netns, *links.Netns) {
	open := func() *links.Netns {
		n, err := links.OpenNetns(netnstest.New(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	n1, n2 := open(), open()
	if _, err := links.EnsureVeth(links.Veth{
		A: links.End{NS: n1, Name: "eth0", Addrs: []netip.Prefix{pfx("192.168.50.1/24")}},
		B: links.End{NS: n2, Name: "ens5", Addrs: []netip.Prefix{pfx("192.168.50.2/24")}},
	}); err != nil {
		t.Fatal(err)
	}
	return n1, n2
}

// TestKernelVXLANCablePull takes a cross-node VXLAN link down through node
// A's API: node B's meshnetd takes its end down too (VXLAN carries no
// carrier), so both ends are down without carrier and no traffic passes
// either way; up restores both.
func TestKernelVXLANCablePull(t *testing.T) {
	tok := podlinkstest.Cluster(t, ns)
	n1, n2 := underlay(t)
	labA, labB := podlinkstest.NewLab(t), podlinkstest.NewLab(t)
	p1, p2 := labA.Pod(ns, "r1"), labB.Pod(ns, "r2")
	vni := links.VNI(ns, "r1", "r2", 7)
	for _, x := range []links.VXLAN{
		{Node: n1, VNI: vni, Local: addr("192.168.50.1"), Remote: addr("192.168.50.2"), End: links.End{NS: p1, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.1/30")}}},
		{Node: n2, VNI: vni, Local: addr("192.168.50.2"), Remote: addr("192.168.50.1"), End: links.End{NS: p2, Name: "eth1", Addrs: []netip.Prefix{pfx("10.0.0.2/30")}}},
	} {
		if _, err := links.EnsureVXLAN(x); err != nil {
			t.Fatal(err)
		}
	}
	labA.AddLink(ns, "r1", podstore.Link{UID: 7, LocalIntf: "eth1", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r2", PeerIntf: "eth1", PeerNodeIP: "192.168.50.2", VNI: vni})
	labB.AddLink(ns, "r2", podstore.Link{UID: 7, LocalIntf: "eth1", Kind: v1beta1.LinkKindVXLAN, PeerPod: "r1", PeerIntf: "eth1", PeerNodeIP: "192.168.50.1", VNI: vni})
	stB := podlinkstest.Start(t, podlinkstest.Options{Pods: labB.Store, Checker: tok.Checker, Node: "node-b"})
	stA := podlinkstest.Start(t, podlinkstest.Options{Pods: labA.Store, Checker: tok.Checker, Node: "node-a", Remote: directPeer{stB.Links}})
	mustPing(t, p1, "10.0.0.2")
	ctx := context.Background()

	// Without a way to the peer node, a VXLAN state change is refused and
	// changes nothing rather than pulling one end only.
	lone := podlinkstest.Start(t, podlinkstest.Options{Pods: labA.Store, Checker: tok.Checker, Node: "node-a"})
	_, err := lone.Client(t, tok.Editor).SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: down})
	mustCode(t, "SetLinkState of a VXLAN link without a peer client", err, codes.FailedPrecondition)
	if !mustState(t, p1, "eth1").AdminUp {
		t.Fatal("refused call took the link down")
	}

	c := stA.Client(t, tok.Editor)
	if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: down}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*links.Netns{p1, p2} {
		if s := mustState(t, p, "eth1"); s.AdminUp {
			t.Fatalf("%s eth1 still admin up after the cable pull", p.Path())
		}
		waitCarrier(t, p, "eth1", false)
	}
	mustNotPing(t, p1, "10.0.0.2")
	mustNotPing(t, p2, "10.0.0.1")
	got, err := stB.Client(t, tok.Viewer).GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r2", Interface: "eth1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetLink(); l.GetAdminState() != down || l.GetCarrier() || l.GetNode() != "node-b" || l.GetVxlan().GetVni() != vni {
		t.Fatalf("node B's read back of its end: %v", l)
	}

	if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: up}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*links.Netns{p1, p2} {
		waitCarrier(t, p, "eth1", true)
	}
	mustPing(t, p1, "10.0.0.2")
	mustPing(t, p2, "10.0.0.1")

	// ApplyPod says when it changed the far end, whose pod's status then
	// needs reading back, and only then.
	apply := func(s meshnetv1.LinkState) bool {
		t.Helper()
		resp, err := c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &s}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0].GetPeerEndChanged()
	}
	if !apply(down) || mustState(t, p2, "eth1").AdminUp {
		t.Fatal("ApplyPod down: r2 eth1 not taken down, or not reported as changed")
	}
	if apply(down) {
		t.Fatal("repeated ApplyPod down reports the far end changed")
	}
	if !apply(up) || !mustState(t, p2, "eth1").AdminUp {
		t.Fatal("ApplyPod up: r2 eth1 not brought up, or not reported as changed")
	}

	// A call that fails (an MTU above what the VXLAN device allows over a
	// 1500-byte underlay) after taking the far end down says so in its
	// error's details.
	mtu := uint32(9000)
	_, err = c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down, Mtu: &mtu}}})
	st := status.Convert(err)
	var far *meshnetv1.ApplyPodResponse
	for _, d := range st.Details() {
		far, _ = d.(*meshnetv1.ApplyPodResponse)
	}
	if st.Code() == codes.OK || len(far.GetResults()) != 1 || !far.GetResults()[0].GetPeerEndChanged() || mustState(t, p2, "eth1").AdminUp {
		t.Fatalf("failed ApplyPod: %v, details %v; want an error naming r2's end as changed, and that end down", err, far)
	}
	if !apply(up) {
		t.Fatal("ApplyPod up after the failed call: far end not reported as changed")
	}

	// A call cancelled before it starts (a controller that gave up) does
	// nothing, on this node and on the peer's: its retry is the one that
	// changes the link.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = stA.Links.LinkServer().ApplyPod(cancelled, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{{Interface: "eth1", State: &down}}})
	mustCode(t, "cancelled ApplyPod", err, codes.Canceled)
	r := stB.Links.SetEndStates(cancelled, podstore.Key{Namespace: ns, Name: "r2"}, map[string]bool{"eth1": false})
	mustCode(t, "cancelled SetEndStates", r["eth1"].Err, codes.Canceled)
	if !mustState(t, p1, "eth1").AdminUp || !mustState(t, p2, "eth1").AdminUp {
		t.Fatal("a cancelled call changed an end")
	}
}

// TestKernelSetRoutes replaces the managed route set: additions,
// replacement, deletion, idempotence, and routes meshnet did not add left
// alone.
func TestKernelSetRoutes(t *testing.T) {
	lab, r1, _ := twoPods(t)
	lab.Veth(ns, 2, end{Pod: "r1", Intf: "eth2", Addr: "10.0.1.1/30"}, end{Pod: "r3", Intf: "eth1", Addr: "10.0.1.2/30"})
	// A route of the primary CNI or an operator, installed with ip.
	if out, err := netnstest.Run(r1.Path(), "ip", "route", "add", "10.50.0.0/16", "via", "10.0.0.2"); err != nil {
		t.Fatalf("ip route add: %v: %s", err, out)
	}
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	set := func(rs ...*meshnetv1.Route) []*meshnetv1.Route {
		t.Helper()
		resp, err := c.SetRoutes(ctx, &meshnetv1.SetRoutesRequest{Namespace: ns, Pod: "r1", Routes: rs})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRoutes()
	}
	kernel := func() []string {
		return append(routes(t, r1, "eth1"), routes(t, r1, "eth2")...)
	}
	expect := func(want ...string) {
		t.Helper()
		if got := kernel(); !slices.Equal(got, want) {
			t.Fatalf("routes in r1: %v, want %v", got, want)
		}
	}

	got := set(&meshnetv1.Route{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}, &meshnetv1.Route{Dst: "10.10.0.0/24", Dev: "eth2"})
	want := []*meshnetv1.Route{{Dst: "10.9.0.0/24", Gw: "10.0.0.2", Dev: "eth1"}, {Dst: "10.10.0.0/24", Dev: "eth2"}}
	if !slicesEqualProto(got, want) {
		t.Fatalf("SetRoutes read back %v, want %v", got, want)
	}
	expect("10.50.0.0/16 via 10.0.0.2 dev eth1", "10.9.0.0/24 via 10.0.0.2 dev eth1", "10.10.0.0/24 dev eth2")

	w := podlinkstest.Watch(t, r1)
	again := set(&meshnetv1.Route{Dst: "10.9.0.0/24", Gw: "10.0.0.2"}, &meshnetv1.Route{Dst: "10.10.0.0/24", Dev: "eth2"})
	if ev := w.Stop(); !slicesEqualProto(again, want) || len(ev) != 0 {
		t.Fatalf("repeated SetRoutes: read back %v, kernel notified %v; want no change", again, ev)
	}

	// 10.9 moves to eth2, 10.10 goes; the watcher sees real changes.
	w = podlinkstest.Watch(t, r1)
	set(&meshnetv1.Route{Dst: "10.9.0.0/24", Gw: "10.0.1.2", Dev: "eth2"})
	if ev := w.Stop(); !slices.Contains(ev, "RTM_NEWROUTE") || !slices.Contains(ev, "RTM_DELROUTE") {
		t.Fatalf("kernel notified %v for a route replaced and one deleted", ev)
	}
	expect("10.50.0.0/16 via 10.0.0.2 dev eth1", "10.9.0.0/24 via 10.0.1.2 dev eth2")

	if got := set(); len(got) != 0 {
		t.Fatalf("empty SetRoutes read back %v", got)
	}
	expect("10.50.0.0/16 via 10.0.0.2 dev eth1")
}

func slicesEqualProto(a, b []*meshnetv1.Route) bool {
	return slices.EqualFunc(a, b, func(x, y *meshnetv1.Route) bool { return proto.Equal(x, y) })
}

// TestKernelApplyPod converges state, MTU (both veth ends) and routes,
// keeps routes of a link it took down for its up, changes nothing on a
// repeated apply (no kernel notification at all), refuses a stale
// generation, reports unwired links PENDING, and re-applies the last state
// after a restart.
func TestKernelApplyPod(t *testing.T) {
	lab, r1, r2 := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	mtu := uint32(1400)
	req := &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", PodUid: "uid-1", Generation: 3,
		Links: []*meshnetv1.LinkSpec{
			{Interface: "eth1", State: &down, Mtu: &mtu},
			{Interface: "eth7", Wiring: &meshnetv1.LinkWiring{Uid: 9, Kind: meshnetv1.LinkKind_LINK_KIND_VETH}},
		},
		Routes: &meshnetv1.RouteSet{Routes: []*meshnetv1.Route{{Dst: "10.9.0.0/24", Gw: "10.0.0.2", Dev: "eth1"}}},
	}
	resp, err := c.ApplyPod(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]meshnetv1.LinkPhase{}
	for _, r := range resp.GetResults() {
		phases[r.GetInterface()] = r.GetPhase()
	}
	if phases["eth1"] != meshnetv1.LinkPhase_LINK_PHASE_READY || phases["eth7"] != meshnetv1.LinkPhase_LINK_PHASE_PENDING {
		t.Fatalf("results %v, want eth1 READY, eth7 PENDING", resp.GetResults())
	}
	if s := mustState(t, r1, "eth1"); s.AdminUp || s.MTU != 1400 {
		t.Fatalf("r1 eth1 after apply: %+v, want down, mtu 1400", s)
	}
	if s := mustState(t, r2, "eth1"); s.MTU != 1400 {
		t.Fatalf("veth peer r2 eth1 mtu %d, want 1400 too", s.MTU)
	}
	if len(resp.GetRoutes()) != 0 || len(routes(t, r1, "eth1")) != 0 {
		t.Fatalf("route through a down link is in the kernel: %v", resp.GetRoutes())
	}

	req.Links[0].State = &up
	req.Generation = 4
	if resp, err = c.ApplyPod(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, r2, "eth1", true)
	mustPing(t, r2, "10.0.0.1")
	if got := routes(t, r1, "eth1"); !slices.Equal(got, []string{"10.9.0.0/24 via 10.0.0.2 dev eth1"}) || len(resp.GetRoutes()) != 1 {
		t.Fatalf("routes after up: kernel %v, read back %v", got, resp.GetRoutes())
	}

	w1, w2 := podlinkstest.Watch(t, r1), podlinkstest.Watch(t, r2)
	if _, err := c.ApplyPod(ctx, req); err != nil {
		t.Fatal(err)
	}
	if e1, e2 := w1.Stop(), w2.Stop(); len(e1)+len(e2) != 0 {
		t.Fatalf("identical ApplyPod changed the kernel: r1 %v, r2 %v", e1, e2)
	}

	// Sent ahead (a LinkFault's edge): made at apply_at, not on arrival.
	ahead := proto.Clone(req).(*meshnetv1.ApplyPodRequest)
	ahead.Links[0].State = &down
	at := time.Now().Add(300 * time.Millisecond)
	ahead.ApplyAt = timestamppb.New(at)
	done := make(chan error, 1)
	go func() { _, err := c.ApplyPod(ctx, ahead); done <- err }()
	var downAt time.Time
	for downAt.IsZero() && time.Since(at) < 5*time.Second {
		if !mustState(t, r1, "eth1").AdminUp {
			downAt = time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("apply_at: r1 eth1 down %v after the moment asked", downAt.Sub(at))
	if downAt.Before(at) || downAt.Sub(at) > 100*time.Millisecond {
		t.Fatalf("apply_at: r1 eth1 down %v after the moment asked, want within 0..100ms", downAt.Sub(at))
	}
	req.Generation = 5 // the same state again, converged
	req.Links[0].State = &up
	if _, err = c.ApplyPod(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, r2, "eth1", true)

	stale := proto.Clone(req).(*meshnetv1.ApplyPodRequest)
	stale.Generation = 2
	stale.Links[0].State = &down
	_, err = c.ApplyPod(ctx, stale)
	mustCode(t, "ApplyPod with an older generation", err, codes.Aborted)
	if !mustState(t, r1, "eth1").AdminUp {
		t.Fatal("stale ApplyPod took the link down")
	}

	_, err = c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Prune: true})
	mustCode(t, "ApplyPod pruning links not in links", err, codes.Unimplemented)

	// Somebody changes the MTU behind meshnet's back; after a restart the
	// last apply is re-applied.
	if err := links.SetMTU(r1, "eth1", 1500); err != nil {
		t.Fatal(err)
	}
	st2 := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Reopen()})
	if err := st2.Links.Reapply(ctx, podstore.Key{Namespace: ns, Name: "r1"}); err != nil {
		t.Fatal(err)
	}
	if s := mustState(t, r1, "eth1"); s.MTU != 1400 || !s.AdminUp {
		t.Fatalf("after Reapply: %+v, want mtu 1400, up", s)
	}

	// The pod's DEL takes its record, the last apply with it: a new pod
	// of the same name (its ADD, a new sandbox) has nothing re-applied.
	r1Key := podstore.Key{Namespace: ns, Name: "r1"}
	p, _ := lab.Store.Get(r1Key)
	if err := lab.Store.Delete(r1Key, p.ContainerID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(lab.Dir, ns+"_r1.json")); !os.IsNotExist(err) {
		t.Fatalf("record after the pod's DEL: %v", err)
	}
	p.ContainerID, p.Runtime = "sandbox-r1-next", nil
	if err := lab.Store.Put(p); err != nil {
		t.Fatal(err)
	}
	if err := links.SetMTU(r1, "eth1", 1500); err != nil {
		t.Fatal(err)
	}
	if err := st2.Links.Reapply(ctx, r1Key); err != nil {
		t.Fatal(err)
	}
	if s := mustState(t, r1, "eth1"); s.MTU != 1500 {
		t.Fatalf("Reapply of the pod's next sandbox changed the mtu to %d", s.MTU)
	}
}

// TestKernelSetNetemWithoutNetem runs on the host, whose kernel has no
// sch_netem: the API says so plainly and changes nothing.
func TestKernelSetNetemWithoutNetem(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	_, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1",
		Netem: &meshnetv1.NetemSpec{Delay: durationpb.New(10e6)}})
	mustCode(t, "SetNetem on a kernel without sch_netem", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "sch_netem") {
		t.Fatalf("error %q does not name sch_netem", err)
	}
	mtu := uint32(1450)
	_, err = c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Links: []*meshnetv1.LinkSpec{
		{Interface: "eth1", Netem: &meshnetv1.NetemSpec{LossPercent: 5}, Mtu: &mtu},
	}})
	mustCode(t, "ApplyPod with netem on a kernel without sch_netem", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "sch_netem") {
		t.Fatalf("error %q does not name sch_netem", err)
	}
	if q := qdisc(t, r1, "eth1"); q.Kind != "noqueue" {
		t.Fatalf("root qdisc %s after refused netem", q.Kind)
	}
	resp, err := c.ClearNetem(ctx, &meshnetv1.ClearNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.GetLink(); l.GetQdiscOwner() != meshnetv1.QdiscOwner_QDISC_OWNER_NONE || l.GetNetem() != nil {
		t.Fatalf("ClearNetem read back %v", l)
	}
}

// snapshot is everything a refused call must leave as it was.
func snapshot(t *testing.T, stateDir string, pods ...*links.Netns) string {
	t.Helper()
	var b strings.Builder
	for _, p := range pods {
		s := mustState(t, p, "eth1")
		s.Counters = links.Counters{}
		fmt.Fprintf(&b, "%s: %+v routes %v qdisc %s\n", p.Path(), s, routes(t, p, "eth1"), qdisc(t, p, "eth1").Kind)
	}
	entries, _ := os.ReadDir(stateDir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(stateDir, e.Name()))
		fmt.Fprintf(&b, "%s: %s\n", e.Name(), data)
	}
	return b.String()
}

// TestKernelListLinksSandboxGone lists a namespace where one pod's network
// namespace is gone: its links are reported with the reason, the others
// read back, and a change of the gone pod fails without touching anything.
func TestKernelListLinksSandboxGone(t *testing.T) {
	lab, _, _ := twoPods(t)
	if err := lab.Store.Put(podstore.Pod{Namespace: ns, Name: "r9", ContainerID: "gone", Netns: "/var/run/netns/meshnet-test-gone",
		Links: []podstore.Link{{UID: 9, LocalIntf: "eth1", Kind: v1beta1.LinkKindVeth, PeerPod: "r8", PeerIntf: "eth1"}}}); err != nil {
		t.Fatal(err)
	}
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	resp, err := c.ListLinks(ctx, &meshnetv1.ListLinksRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, l := range resp.GetLinks() {
		pods = append(pods, l.GetPod().GetName())
		if l.GetPod().GetName() == "r9" && !strings.Contains(l.GetLastError(), "network namespace is gone") {
			t.Fatalf("r9's link: %v, want the reason in last_error", l)
		}
		if l.GetPod().GetName() != "r9" && (l.GetLastError() != "" || !l.GetCarrier()) {
			t.Fatalf("%s's link: %v", l.GetPod().GetName(), l)
		}
	}
	if !slices.Equal(pods, []string{"r1", "r2", "r9"}) {
		t.Fatalf("ListLinks pods %v, want r1 r2 r9 in order", pods)
	}
	_, err = c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r9", Interface: "eth1", State: down})
	mustCode(t, "SetLinkState of a pod whose sandbox is gone", err, codes.FailedPrecondition)
}

// TestKernelConcurrentCablePulls races downs and ups of one link: calls
// are serialised per link, so whatever order they land in, the routes the
// first down saved are never lost, and a final up restores them.
func TestKernelConcurrentCablePulls(t *testing.T) {
	lab, r1, r2 := twoPods(t)
	if err := links.AddRoute(r1, links.Route{Dst: pfx("10.9.0.0/24"), Gw: addr("10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			state := down
			if i%2 == 1 {
				state = up
			}
			if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: state}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: up}); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, r2, "eth1", true)
	if got := routes(t, r1, "eth1"); !slices.Equal(got, []string{"10.9.0.0/24 via 10.0.0.2 dev eth1"}) {
		t.Fatalf("routes after racing downs and ups: %v", got)
	}
	mustPing(t, r1, "10.0.0.2")
}
