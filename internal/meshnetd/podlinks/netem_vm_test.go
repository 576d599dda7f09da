//go:build vm

package podlinks_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/shaping"
)

// The VM has no API server: these stacks leave every method open. The
// kernel tier proves the authentication on the same server.

var (
	rttRE      = regexp.MustCompile(`= [0-9.]+/([0-9.]+)/`)
	receivedRE = regexp.MustCompile(`(\d+) (?:packets )?received`) // iputils' and busybox's
)

// pings sends count pings from n to dst and returns how many came back and
// their average round trip.
func pings(t *testing.T, n *links.Netns, dst string, count int) (int, time.Duration) {
	t.Helper()
	_, out := podlinkstest.Ping(n, dst, count)
	m := receivedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ping output without a count:\n%s", out)
	}
	got, _ := strconv.Atoi(m[1])
	var avg time.Duration
	if r := rttRE.FindStringSubmatch(out); r != nil {
		ms, _ := strconv.ParseFloat(r[1], 64)
		avg = time.Duration(ms * float64(time.Millisecond))
	}
	return got, avg
}

func gauge(t *testing.T, reg *prometheus.Registry, name, pod string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pod" && l.GetValue() == pod {
					if m.Counter != nil {
						return m.Counter.GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestVMSetNetemThroughAPI shapes a veth end through the gRPC API and
// measures the effect in packets: delay raises the round trip, 100% loss
// answers nothing, a new spec switches off what it leaves out, and
// ClearNetem gives the link back; every answer is read back from the kernel,
// and /metrics shows the settings.
func TestVMSetNetemThroughAPI(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	set := func(spec *meshnetv1.NetemSpec) *meshnetv1.LinkStatus {
		t.Helper()
		resp, err := c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1", Netem: spec})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLink()
	}
	if n, _ := pings(t, r1, "10.0.0.2", 3); n != 3 {
		t.Fatalf("%d of 3 pings before shaping", n)
	}
	_, base := pings(t, r1, "10.0.0.2", 10)

	l := set(&meshnetv1.NetemSpec{Delay: durationpb.New(50 * time.Millisecond)})
	if l.GetQdiscOwner() != meshnetv1.QdiscOwner_QDISC_OWNER_MESHNET || l.GetQdiscKind() != "netem" ||
		l.GetNetem().GetDelay().AsDuration() != 50*time.Millisecond || l.GetNetem().GetLimitPackets() != shaping.MinDefaultLimit {
		t.Fatalf("read back after delay 50ms: %v", l)
	}
	handle := qdisc(t, r1, "eth1").Handle
	if handle != netem.Handle {
		t.Fatalf("root handle %x, want meshnet's %x", handle, netem.Handle)
	}
	n, rtt := pings(t, r1, "10.0.0.2", 10)
	if n != 10 || rtt < base+45*time.Millisecond || rtt > base+90*time.Millisecond {
		t.Fatalf("with 50ms delay: %d of 10 answered, rtt %v (base %v), want all, about base+50ms", n, rtt, base)
	}
	t.Logf("rtt %v unshaped, %v with 50ms delay", base, rtt)
	if d, ok := gauge(t, st.Registry, "meshnet_netem_delay_seconds", "r1"); !ok || d != 0.05 {
		t.Fatalf("meshnet_netem_delay_seconds{pod=r1} = %v (present %v), want 0.05", d, ok)
	}
	if _, ok := gauge(t, st.Registry, "meshnet_netem_delay_seconds", "r2"); ok {
		t.Fatal("netem gauges for r2, which is not shaped")
	}

	// A complete spec: the delay it leaves out is switched off.
	l = set(&meshnetv1.NetemSpec{LossPercent: 100})
	if l.GetNetem().GetLossPercent() != 100 || l.GetNetem().GetDelay() != nil {
		t.Fatalf("read back after loss 100%%: %v, want loss 100 and no delay", l.GetNetem())
	}
	if n, _ := pings(t, r1, "10.0.0.2", 5); n != 0 {
		t.Fatalf("%d of 5 pings answered through 100%% loss", n)
	}
	if d, _ := gauge(t, st.Registry, "meshnet_netem_drops_total", "r1"); d < 5 {
		t.Fatalf("meshnet_netem_drops_total{pod=r1} = %v, want the 5 pings at least", d)
	}

	l = set(&meshnetv1.NetemSpec{Delay: durationpb.New(20 * time.Millisecond)})
	if q := qdisc(t, r1, "eth1"); q.Handle != handle || q.Spec.Loss != 0 || q.Spec.Delay != 20*time.Millisecond {
		t.Fatalf("after delay 20ms: qdisc %+v, want the same qdisc changed in place, loss off", q)
	}
	n, rtt = pings(t, r1, "10.0.0.2", 10)
	if n != 10 || rtt < base+17*time.Millisecond || rtt > base+50*time.Millisecond {
		t.Fatalf("with 20ms delay: %d of 10 answered, rtt %v (base %v)", n, rtt, base)
	}
	t.Logf("rtt %v with 20ms delay, changed in place", rtt)

	for range 2 { // idempotent
		resp, err := c.ClearNetem(ctx, &meshnetv1.ClearNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
		if err != nil {
			t.Fatal(err)
		}
		if l := resp.GetLink(); l.GetQdiscOwner() != meshnetv1.QdiscOwner_QDISC_OWNER_NONE || l.GetNetem() != nil {
			t.Fatalf("read back after ClearNetem: %v", l)
		}
	}
	n, rtt = pings(t, r1, "10.0.0.2", 10)
	if n != 10 || rtt > base+10*time.Millisecond {
		t.Fatalf("after ClearNetem: %d of 10 answered, rtt %v (base %v)", n, rtt, base)
	}
	t.Logf("rtt %v after ClearNetem", rtt)
}

// TestVMApplyPodNetem converges netem with ApplyPod: a repeated identical
// apply makes no kernel change at all (no qdisc message, no link flap), an
// empty spec removes the qdisc, and a foreign root qdisc is left alone.
func TestVMApplyPodNetem(t *testing.T) {
	lab, r1, r2 := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	mtu := uint32(1400)
	req := &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 1, Links: []*meshnetv1.LinkSpec{{
		Interface: "eth1", State: &up, Mtu: &mtu,
		Netem: &meshnetv1.NetemSpec{Delay: durationpb.New(30 * time.Millisecond), Jitter: durationpb.New(5 * time.Millisecond),
			Distribution: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL, RateBps: 80_000_000},
	}}}
	resp, err := c.ApplyPod(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(resp.GetLinks(), func(l *meshnetv1.LinkStatus) bool { return l.GetInterface() == "eth1" })
	got := resp.GetLinks()[i].GetNetem()
	if got.GetDelay().AsDuration() != 30*time.Millisecond || got.GetJitter().AsDuration() != 5*time.Millisecond ||
		got.GetRateBps() != 80_000_000 || got.GetDistribution() != meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL {
		t.Fatalf("ApplyPod read back netem %v", got)
	}
	handle := qdisc(t, r1, "eth1").Handle

	w1, w2 := podlinkstest.Watch(t, r1), podlinkstest.Watch(t, r2)
	req.Generation = 2
	if _, err := c.ApplyPod(ctx, req); err != nil {
		t.Fatal(err)
	}
	if e1, e2 := w1.Stop(), w2.Stop(); len(e1)+len(e2) != 0 {
		t.Fatalf("identical ApplyPod changed the kernel: r1 %v, r2 %v", e1, e2)
	}
	if h := qdisc(t, r1, "eth1").Handle; h != handle {
		t.Fatalf("qdisc handle %x after a repeated apply, was %x", h, handle)
	}

	req.Links[0].Netem = &meshnetv1.NetemSpec{}
	if _, err := c.ApplyPod(ctx, req); err != nil {
		t.Fatal(err)
	}
	if q := qdisc(t, r1, "eth1"); q.Owner != netem.OwnerNone {
		t.Fatalf("after an empty netem spec: root %s %x, want the kernel's default", q.Kind, q.Handle)
	}

	addTbf(t, r1, "eth1")
	_, err = c.SetNetem(ctx, &meshnetv1.SetNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1", Netem: &meshnetv1.NetemSpec{LossPercent: 1}})
	mustCode(t, "SetNetem over a foreign qdisc", err, codes.FailedPrecondition)
	_, err = c.ClearNetem(ctx, &meshnetv1.ClearNetemRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
	mustCode(t, "ClearNetem of a foreign qdisc", err, codes.FailedPrecondition)
	if q := qdisc(t, r1, "eth1"); q.Kind != "tbf" {
		t.Fatalf("foreign tbf replaced by %s", q.Kind)
	}
	gl, err := c.GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := gl.GetLink(); l.GetQdiscOwner() != meshnetv1.QdiscOwner_QDISC_OWNER_FOREIGN || l.GetQdiscKind() != "tbf" {
		t.Fatalf("GetLink with a foreign tbf: %v", l)
	}
}

// addTbf installs a root tbf qdisc that meshnet did not make.
func addTbf(t *testing.T, n *links.Netns, dev string) {
	t.Helper()
	ns, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	tbf := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(5, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       125000, Limit: 32768, Buffer: 4096,
	}
	if err := h.QdiscAdd(tbf); err != nil {
		t.Fatalf("add tbf on %s: %v", dev, err)
	}
}

// TestVMShapeAsWired shapes links as CNI ADD does (Wired)
// and checks what the controller's next ApplyPod of the same netem finds:
// the kernel's qdisc and the recorded distribution, which the kernel does not
// report, so the apply changes nothing. A failed interface fails alone.
func TestVMShapeAsWired(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx := context.Background()
	spec := shaping.Spec{Delay: 30 * time.Millisecond, Jitter: 5 * time.Millisecond, Distribution: shaping.DistributionPareto}
	k := podstore.Key{Namespace: ns, Name: "r1"}
	errs := st.Links.Wired(k, map[string]*shaping.Spec{"eth1": &spec, "eth9": &spec}, nil)
	if errs["eth1"] != nil || errs["eth9"] == nil {
		t.Fatalf("Wired eth1 and a missing eth9: %v, want eth9's error alone", errs)
	}
	if _, rtt := pings(t, r1, "10.0.0.2", 5); rtt < 25*time.Millisecond {
		t.Fatalf("round trip %v with 30 ms of delay on r1's eth1", rtt)
	}
	gl, err := c.GetLink(ctx, &meshnetv1.GetLinkRequest{Namespace: ns, Pod: "r1", Interface: "eth1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := gl.GetLink().GetNetem(); n.GetDelay().AsDuration() != 30*time.Millisecond || n.GetDistribution() != meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETO {
		t.Fatalf("GetLink after Wired: netem %v, want 30ms with the pareto distribution", n)
	}
	handle := qdisc(t, r1, "eth1").Handle

	w := podlinkstest.Watch(t, r1)
	if errs := st.Links.Wired(k, map[string]*shaping.Spec{"eth1": &spec}, nil); errs["eth1"] != nil {
		t.Fatal(errs["eth1"])
	}
	_, err = c.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: ns, Pod: "r1", Generation: 1, Links: []*meshnetv1.LinkSpec{{
		Interface: "eth1", Netem: &meshnetv1.NetemSpec{Delay: durationpb.New(30 * time.Millisecond), Jitter: durationpb.New(5 * time.Millisecond),
			Distribution: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETO},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if seen := w.Stop(); len(seen) != 0 {
		t.Fatalf("Wired again and ApplyPod of the netem Wired made changed the kernel: %v", seen)
	}
	if h := qdisc(t, r1, "eth1").Handle; h != handle {
		t.Fatalf("qdisc handle %x after Wired again and ApplyPod, was %x", h, handle)
	}
	if errs := st.Links.Wired(podstore.Key{Namespace: ns, Name: "r9"}, map[string]*shaping.Spec{"eth1": &spec}, nil); errs["eth1"] == nil {
		t.Fatal("Wired of a pod not wired here: no error")
	}
}
