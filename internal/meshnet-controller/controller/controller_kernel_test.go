//go:build kernel

package controller_test

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// TestKernelStateDownVeth pulls the veth cable through the spec and puts it
// back by dropping the field.
func TestKernelStateDownVeth(t *testing.T) {
	p := newPair(t)
	if err := pings(p.r1, "10.0.1.2", 3); err != nil {
		t.Fatal(err)
	}
	mustEdit(t, p.lab, "r1", setState(ptr.To(v1beta1.LinkDown), "eth1"))
	waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, func(s links.Reading) bool { return !s.AdminUp && !s.Carrier })
	waitKernel(t, p.r2.Netns, "eth1", 10*time.Second, func(s links.Reading) bool { return !s.Carrier })
	if err := pings(p.r1, "10.0.1.2", 1); err == nil {
		t.Error("ping over eth1 works with state down")
	}
	topo := waitStatus(t, p.lab, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		return converged(topo) && l != nil && l.State == v1beta1.LinkDown && !l.Carrier
	})
	if topo.Status.DownLinks != 1 || !slices.Contains(topo.LinkManagedFields(1), "state") {
		t.Errorf("status down_links %d, eth1 managed %v; want 1, [state]", topo.Status.DownLinks, topo.LinkManagedFields(1))
	}

	mustEdit(t, p.lab, "r1", setState(nil, "eth1"))
	waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, up)
	waitKernel(t, p.r2.Netns, "eth1", 10*time.Second, up)
	if err := pings(p.r1, "10.0.1.2", 3); err != nil {
		t.Errorf("after state was removed: %v", err)
	}
	topo = waitStatus(t, p.lab, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		return converged(topo) && l != nil && l.State == v1beta1.LinkUp && l.Carrier
	})
	if topo.Status.DownLinks != 0 || len(topo.LinkManagedFields(1)) != 0 {
		t.Errorf("status down_links %d, eth1 managed %v; want 0, none", topo.Status.DownLinks, topo.LinkManagedFields(1))
	}
}

// TestKernelStateDownVXLAN takes a cross-node link down from one end's spec:
// node a's daemon takes r1's end down, node b's daemon r3's (asked through
// PeerService).
func TestKernelStateDownVXLAN(t *testing.T) {
	p := newPair(t)
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Fatal(err)
	}
	mustEdit(t, p.lab, "r1", setState(ptr.To(v1beta1.LinkDown), "eth2"))
	waitKernel(t, p.r1.Netns, "eth2", 10*time.Second, down)
	waitKernel(t, p.r3.Netns, "eth1", 10*time.Second, down)
	if err := pings(p.r1, "10.0.2.2", 1); err == nil {
		t.Error("ping over the VXLAN works with state down")
	}
	waitStatus(t, p.lab, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth2")
		return converged(topo) && l != nil && l.State == v1beta1.LinkDown && l.Kind == v1beta1.LinkKindVXLAN
	})

	mustEdit(t, p.lab, "r1", setState(nil, "eth2"))
	waitKernel(t, p.r1.Netns, "eth2", 10*time.Second, up)
	waitKernel(t, p.r3.Netns, "eth1", 10*time.Second, up)
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Errorf("after state was removed: %v", err)
	}
}

// TestKernelStateConflictDownWins gives one link two states: r1 says down
// where r2 (veth) and r3 (VXLAN) say up. Down wins on both ends, and stays
// when the peers are applied again (each side used to push its own view to
// both VXLAN ends, flapping the link at every resync); once r1 lets go, both
// links come back up.
func TestKernelStateConflictDownWins(t *testing.T) {
	p := newPair(t)
	mustEdit(t, p.lab, "r2", setState(ptr.To(v1beta1.LinkUp), "eth1"))
	mustEdit(t, p.lab, "r3", setState(ptr.To(v1beta1.LinkUp), "eth1"))
	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
		setState(ptr.To(v1beta1.LinkDown), "eth1")(topo)
		setState(ptr.To(v1beta1.LinkDown), "eth2")(topo)
	})
	bothDown := func() {
		t.Helper()
		waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, down)
		waitKernel(t, p.r2.Netns, "eth1", 10*time.Second, down)
		waitKernel(t, p.r1.Netns, "eth2", 10*time.Second, down)
		waitKernel(t, p.r3.Netns, "eth1", 10*time.Second, down)
	}
	bothDown()
	held := func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		ready := condition(&topo.Status, v1beta1.ConditionReady)
		return converged(topo) && l != nil && l.State == v1beta1.LinkDown && strings.Contains(ready.Message, "eth1 held down by r1")
	}
	waitStatus(t, p.lab, "r2", 10*time.Second, held)
	waitStatus(t, p.lab, "r3", 10*time.Second, held)

	// Applied again (as a resync does), r2 and r3 keep the links down.
	mustEdit(t, p.lab, "r2", setMTU(ptr.To[int32](1400), "eth1"))
	mustEdit(t, p.lab, "r3", setMTU(ptr.To[int32](1400), "eth1"))
	waitStatus(t, p.lab, "r2", 10*time.Second, func(topo *v1beta1.Topology) bool { return held(topo) && linkStatus(topo, "eth1").MTU == 1400 })
	waitStatus(t, p.lab, "r3", 10*time.Second, func(topo *v1beta1.Topology) bool { return held(topo) && linkStatus(topo, "eth1").MTU == 1400 })
	bothDown()

	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
		setState(nil, "eth1")(topo)
		setState(nil, "eth2")(topo)
	})
	waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, up)
	waitKernel(t, p.r2.Netns, "eth1", 10*time.Second, up)
	waitKernel(t, p.r1.Netns, "eth2", 10*time.Second, up)
	waitKernel(t, p.r3.Netns, "eth1", 10*time.Second, up)
	for ip, peer := range map[string]string{"10.0.1.2": "r2", "10.0.2.2": "r3"} {
		if err := pings(p.r1, ip, 3); err != nil {
			t.Errorf("to %s after r1 let go: %v", peer, err)
		}
		waitStatus(t, p.lab, peer, 10*time.Second, func(topo *v1beta1.Topology) bool {
			l := linkStatus(topo, "eth1")
			return converged(topo) && l != nil && l.State == v1beta1.LinkUp &&
				!strings.Contains(condition(&topo.Status, v1beta1.ConditionReady).Message, "held down")
		})
	}
}

// TestKernelRoutes adds spec.routes and removes them.
func TestKernelRoutes(t *testing.T) {
	p := newPair(t)
	routes := func() string {
		out, err := p.r1.Run("ip", "route", "show")
		if err != nil {
			t.Fatalf("ip route: %v\n%s", err, out)
		}
		return out
	}
	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
		topo.Spec.Routes = []v1beta1.Route{{Dst: "192.0.2.0/24", Gw: "10.0.1.2"}, {Dst: "198.51.100.0/24", Dev: "eth2"}}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !(strings.Contains(routes(), "192.0.2.0/24 via 10.0.1.2 dev eth1") && strings.Contains(routes(), "198.51.100.0/24 dev eth2")) {
		if time.Now().After(deadline) {
			t.Fatalf("routes never appeared:\n%s", routes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, p.lab, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool { return converged(topo) && topo.Status.RoutesManaged })

	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) { topo.Spec.Routes = nil })
	deadline = time.Now().Add(10 * time.Second)
	for strings.Contains(routes(), "192.0.2.0/24") || strings.Contains(routes(), "198.51.100.0/24") {
		if time.Now().After(deadline) {
			t.Fatalf("routes still there after removal from the spec:\n%s", routes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(routes(), "10.0.1.0/30 dev eth1") {
		t.Errorf("the link's own route went too:\n%s", routes())
	}
}

// TestKernelStatus checks what the status says against the kernel, and that
// a netem spec on this host (no sch_netem) reports Degraded clearly without
// breaking the rest.
func TestKernelStatus(t *testing.T) {
	p := newPair(t)
	mustEdit(t, p.lab, "r1", setMTU(ptr.To[int32](1400), "eth1"))
	topo := waitStatus(t, p.lab, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		return converged(topo) && l != nil && l.MTU == 1400
	})
	st := topo.Status
	if st.Node != "node-a" || st.LinkCount != 2 || st.DownLinks != 0 || st.ObservedGeneration != topo.Generation {
		t.Errorf("status node %q link_count %d down_links %d observedGeneration %d (generation %d)",
			st.Node, st.LinkCount, st.DownLinks, st.ObservedGeneration, topo.Generation)
	}
	if c := condition(&st, v1beta1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded = %+v, want False", c)
	}
	for _, intf := range []string{"eth1", "eth2"} {
		l, k := linkStatus(topo, intf), readState(t, p.r1.Netns, intf)
		if l == nil {
			t.Fatalf("no status for %s", intf)
		}
		if (l.State == v1beta1.LinkUp) != k.AdminUp || l.Carrier != k.Carrier || int(l.MTU) != k.MTU {
			t.Errorf("%s status state %s carrier %v mtu %d; kernel admin up %v carrier %v mtu %d", intf, l.State, l.Carrier, l.MTU, k.AdminUp, k.Carrier, k.MTU)
		}
	}
	if k := readState(t, p.r1.Netns, "eth1"); k.MTU != 1400 {
		t.Errorf("kernel eth1 mtu %d, want 1400", k.MTU)
	}

	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
		topo.Spec.Links[0].Netem = &v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("10ms")}
	})
	topo = waitStatus(t, p.lab, "r1", 15*time.Second, func(topo *v1beta1.Topology) bool {
		c := condition(&topo.Status, v1beta1.ConditionDegraded)
		return topo.Status.ObservedGeneration == topo.Generation && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == topo.Generation
	})
	t.Logf("Degraded with netem on this host: %s: %s", condition(&topo.Status, v1beta1.ConditionDegraded).Reason, condition(&topo.Status, v1beta1.ConditionDegraded).Message)
	if c := condition(&topo.Status, v1beta1.ConditionDegraded); !strings.Contains(c.Message, "sch_netem") {
		t.Errorf("Degraded %s: %q does not name sch_netem", c.Reason, c.Message)
	}
	if c := condition(&topo.Status, v1beta1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %+v with a failing netem, want False", c)
	}
	if err := pings(p.r1, "10.0.1.2", 3); err != nil {
		t.Errorf("with a failed netem: %v", err)
	}
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Errorf("with a failed netem on the other link: %v", err)
	}
	mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) { topo.Spec.Links[0].Netem = nil })
	waitStatus(t, p.lab, "r1", 15*time.Second, converged)
}

// TestKernelDaemonKilledMidEdits kills node a's meshnetd in the middle of a
// run of edits; once it is back, the kernel has the last spec.
func TestKernelDaemonKilledMidEdits(t *testing.T) {
	p := newPair(t)
	const edits = 100
	mtus := []int32{1400, 1450, 1500, 1380}
	for i := range edits {
		if i == edits/2 {
			p.a.Kill()
			setDaemonReady(t, p.lab, p.a, false)
		}
		if i == edits/2+20 {
			p.a.Start()
			setDaemonReady(t, p.lab, p.a, true)
		}
		var st *v1beta1.LinkState
		if i%3 == 0 {
			st = ptr.To(v1beta1.LinkDown)
		}
		mustEdit(t, p.lab, "r1", func(topo *v1beta1.Topology) {
			setMTU(ptr.To(mtus[i%len(mtus)]), "eth1")(topo)
			setState(st, "eth1")(topo)
		})
		time.Sleep(5 * time.Millisecond)
	}
	// The last edit (i = 99: 99%3 == 0) is state down, mtu 1380.
	last := get(t, p.lab, "r1")
	if l := last.Spec.Links[0]; l.State == nil || *l.State != v1beta1.LinkDown || *l.MTU != 1380 {
		t.Fatalf("last spec %+v", l)
	}
	waitKernel(t, p.r1.Netns, "eth1", 60*time.Second, func(s links.Reading) bool { return !s.AdminUp && s.MTU == 1380 })
	waitStatus(t, p.lab, "r1", 30*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		return converged(topo) && l != nil && l.State == v1beta1.LinkDown && l.MTU == 1380
	})
	// And the field removed after the restart still comes back up.
	mustEdit(t, p.lab, "r1", setState(nil, "eth1"))
	waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, up)
	if err := pings(p.r1, "10.0.1.2", 3); err != nil {
		t.Error(err)
	}
}

func leaseHolder(t testing.TB, lab *labnet.Lab) string {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: daemonNS, Name: leaseName}, l); err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// TestKernelLeaderElection runs two replicas: one holds the Lease and acts;
// killed, the other takes over and converges the next edit.
func TestKernelLeaderElection(t *testing.T) {
	p := newPair(t)
	deadline := time.Now().Add(30 * time.Second)
	first := leaseHolder(t, p.lab)
	for first == "" {
		if time.Now().After(deadline) {
			t.Fatal("no Lease holder")
		}
		time.Sleep(100 * time.Millisecond)
		first = leaseHolder(t, p.lab)
	}
	second := startController(t, p.lab, p.b, "controller-2")
	// The second replica waits: the holder stays, and edits still converge
	// exactly once each (the first replica's work).
	mustEdit(t, p.lab, "r1", setMTU(ptr.To[int32](1400), "eth1"))
	waitKernel(t, p.r1.Netns, "eth1", 10*time.Second, func(s links.Reading) bool { return s.MTU == 1400 })
	time.Sleep(3 * time.Second)
	if h := leaseHolder(t, p.lab); h != first {
		t.Fatalf("Lease holder changed from %q to %q while the leader ran", first, h)
	}
	if strings.Contains(second.Log(), "Starting workers") {
		t.Errorf("the standby replica started its workers:\n%s", tail(second.Log()))
	}

	p.ctrl.signal(syscall.SIGKILL)
	mustEdit(t, p.lab, "r1", setMTU(ptr.To[int32](1450), "eth1"))
	// The Lease of a killed leader expires after its 15s duration.
	waitKernel(t, p.r1.Netns, "eth1", 45*time.Second, func(s links.Reading) bool { return s.MTU == 1450 })
	if h := leaseHolder(t, p.lab); h == first || h == "" {
		t.Errorf("Lease holder %q after the leader was killed, want the other replica", h)
	}
	if !strings.Contains(second.Log(), "Starting workers") {
		t.Errorf("the new leader did not start its workers:\n%s", tail(second.Log()))
	}
	waitStatus(t, p.lab, "r1", 10*time.Second, converged)

	// Stopped as a rollout stops it (SIGTERM), a leader hands the Lease
	// over as it exits: the standby leads within its retry period (2s), not
	// once the Lease expires (15s), so a LinkFault's edge is not held up.
	third := startController(t, p.lab, p.a, "controller-3")
	time.Sleep(3 * time.Second) // third campaigns, as a standby
	second.signal(syscall.SIGTERM)
	stopped := time.Now()
	mustEdit(t, p.lab, "r1", setMTU(ptr.To[int32](1420), "eth1"))
	waitKernel(t, p.r1.Netns, "eth1", 45*time.Second, func(s links.Reading) bool { return s.MTU == 1420 })
	took := time.Since(stopped)
	t.Logf("leader stopped with SIGTERM: the standby converged the next edit %v after", took.Round(time.Millisecond))
	if took > 6*time.Second {
		t.Errorf("the standby converged the edit %v after the leader's SIGTERM, want within the retry period and a pass (the Lease was not handed over)", took.Round(time.Millisecond))
	}
	if !strings.Contains(third.Log(), "Starting workers") {
		t.Errorf("the third replica did not start its workers:\n%s", tail(third.Log()))
	}
}

// TestKernelInvalidEditsRefused checks that admission refuses invalid specs
// and that the kernel keeps what it had.
func TestKernelInvalidEditsRefused(t *testing.T) {
	p := newPair(t)
	before := readState(t, p.r1.Netns, "eth1")
	gen := get(t, p.lab, "r1").Generation
	for name, change := range map[string]func(*v1beta1.Topology){
		"loss 150%": func(topo *v1beta1.Topology) {
			topo.Spec.Links[0].Netem = &v1beta1.Netem{Loss: ptr.To[v1beta1.Percent]("150%")}
		},
		"mtu -1":         setMTU(ptr.To[int32](-1), "eth1"),
		"mtu 70000":      setMTU(ptr.To[int32](70000), "eth1"),
		"state sideways": setState(ptr.To[v1beta1.LinkState]("sideways"), "eth1"),
	} {
		err := edit(t, p.lab, "r1", change)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), "Invalid") && !strings.Contains(err.Error(), "invalid") {
			t.Errorf("%s: refused with %v, want an admission (Invalid) error", name, err)
		}
	}
	time.Sleep(2 * time.Second)
	if g := get(t, p.lab, "r1").Generation; g != gen {
		t.Errorf("generation %d after refused edits, was %d", g, gen)
	}
	after := readState(t, p.r1.Netns, "eth1")
	if after.MTU != before.MTU || after.AdminUp != before.AdminUp || after.Carrier != before.Carrier {
		t.Errorf("kernel changed after refused edits: %+v -> %+v", before, after)
	}
	out, err := p.r1.Run("tc", "qdisc", "show", "dev", "eth1")
	if err != nil || strings.Contains(out, "netem") {
		t.Errorf("qdisc after a refused netem edit: %v\n%s", err, out)
	}
}

// BenchmarkKernelEditToKernel measures from a Topology edit (mtu toggled
// between two values, one merge patch as kubectl edit sends it) to the
// change seen in the pod's kernel, and, apart, until the API server
// accepted the patch. The read that kubectl edit makes before the editor
// opens is not timed.
func BenchmarkKernelEditToKernel(b *testing.B) {
	p := newPair(b)
	n, err := links.OpenNetns(p.r1.Netns)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	const edits = 200
	var lat, accepted []time.Duration
	before, err := p.lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		for i := range edits {
			mtu := int32(1400 + 100*(i%2))
			topo, patch, err := mergePatch(p.lab, "r1", setMTU(ptr.To(mtu), "eth1"))
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := p.lab.Client.Patch(context.Background(), topo, patch); err != nil {
				b.Fatalf("edit %d: %v", i, err)
			}
			accepted = append(accepted, time.Since(start))
			for {
				s, err := links.ReadLink(n, "eth1")
				if err != nil {
					b.Fatal(err)
				}
				if s.MTU == int(mtu) {
					break
				}
				if time.Since(start) > 10*time.Second {
					b.Fatalf("edit %d: mtu %d never reached the kernel (has %d)", i, mtu, s.MTU)
				}
				time.Sleep(time.Millisecond)
			}
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	after, err := p.lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	cpu := after.Sub(before)
	perEdit := func(prefix string) float64 {
		return float64(cpu.Sum(prefix).Microseconds()) / 1000 / float64(len(lat))
	}
	b.Logf("%d edits; cpu: %v", len(lat), cpu)
	b.ReportMetric(perEdit("meshnetd/"), "meshnetd-cpu-ms/edit")
	b.ReportMetric(perEdit("controller"), "controller-cpu-ms/edit")
	b.ReportMetric(perEdit("kube-apiserver"), "apiserver-cpu-ms/edit")
	b.ReportMetric(perEdit("etcd"), "etcd-cpu-ms/edit")
	slices.Sort(accepted)
	b.ReportMetric(float64(accepted[len(accepted)/2].Microseconds())/1000, "accepted-p50-ms")
	reportLatencies(b, "edits", lat)
}
