//go:build kernel

package controller_test

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-controller/controller"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// cut is a down link: the end's admin state down and no carrier.
func cut(s links.Reading) bool { return !s.AdminUp && !s.Carrier }

// TestKernelLinkFaults holds links with LinkFaults through the controller
// and the meshnetds: a cable pull that ends by itself (both ends of a
// VXLAN link lose carrier, and get it back when the window ends, without
// anyone touching the Topology), a flap of a veth link counted at the
// kernel, and a fault deleted in its window.
func TestKernelLinkFaults(t *testing.T) {
	p := newPair(t)
	outer := t
	down := ptr.To(v1beta1.LinkDown)

	t.Run("down for 3s", func(t *testing.T) {
		_, start := newFault(t, p.lab, "cut", v1beta1.LinkFaultSpec{
			Links: []v1beta1.FaultLink{{Pod: "r3", Interface: "eth1"}}, State: down, Duration: "3s"})
		waitKernel(t, p.r3.Netns, "eth1", 5*time.Second, cut)
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, func(s links.Reading) bool { return !s.Carrier })
		pulled := time.Since(start)
		f := waitFault(t, p.lab, "cut", 5*time.Second, func(f *v1beta1.LinkFault) bool {
			return f.Status.Phase == v1beta1.FaultActive && f.Status.HeldLinks == 1
		})
		if f.Status.NextEdge == nil || f.Status.NextEdge.Sub(start.Truncate(time.Microsecond)) != 3*time.Second { // a MicroTime
			t.Errorf("status next_edge %v, want 3s after the start %v", f.Status.NextEdge, start)
		}
		topo := waitStatus(t, p.lab, "r1", 5*time.Second, func(topo *v1beta1.Topology) bool {
			l := linkStatus(topo, "eth2")
			return l != nil && l.State == v1beta1.LinkDown && slices.Equal(l.Faults, []string{"cut"})
		})
		if c := condition(&topo.Status, v1beta1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("r1 Ready %+v while the fault holds its eth2; want True (held as the fault says)", c)
		}
		if err := pings(p.r1, "10.0.2.2", 1); err == nil {
			t.Error("ping over r1:eth2 passes while the fault holds it down")
		}

		waitKernel(t, p.r3.Netns, "eth1", 5*time.Second, up)
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, up)
		back := time.Since(start)
		t.Logf("both ends down %v after the window began, up %v after (window 3s)", pulled.Round(time.Millisecond), back.Round(time.Millisecond))
		if back < 3*time.Second {
			t.Errorf("the link came back %v after the start, before its window of 3s ended", back)
		}
		if err := pings(p.r1, "10.0.2.2", 3); err != nil {
			t.Errorf("after the window: %v", err)
		}
		waitFault(t, p.lab, "cut", 5*time.Second, func(f *v1beta1.LinkFault) bool {
			return f.Status.Phase == v1beta1.FaultCompleted && f.Status.HeldLinks == 0 && f.Status.Windows == 1
		})
		topo = waitStatus(t, p.lab, "r1", 5*time.Second, func(topo *v1beta1.Topology) bool {
			l := linkStatus(topo, "eth2")
			return converged(topo) && l != nil && l.State == v1beta1.LinkUp && l.Carrier && len(l.Faults) == 0
		})
		if topo.Spec.Links[1].State != nil {
			t.Errorf("r1's spec: eth2 state %v; a fault must not write the Topology", *topo.Spec.Links[1].State)
		}
	})

	t.Run("flap 3 times", func(t *testing.T) {
		_, start := newFault(t, p.lab, "flap", v1beta1.LinkFaultSpec{
			Links: []v1beta1.FaultLink{{Pod: "r1", Interface: "eth1"}}, State: down,
			Duration: "700ms", Period: ptr.To[v1beta1.Duration]("2s"), Count: ptr.To[int32](3)})
		// The far end's carrier, read every 10 ms: each window is one
		// loss of carrier.
		var downs []time.Duration
		was := true
		for time.Since(start) < 7*time.Second {
			now := readState(t, p.r2.Netns, "eth1").Carrier
			if was && !now {
				downs = append(downs, time.Since(start))
			}
			was = now
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("r2:eth1 lost carrier at %v (windows at 0s, 2s, 4s)", downs)
		if len(downs) != 3 {
			t.Fatalf("r2:eth1 lost carrier %d times, want 3", len(downs))
		}
		for i, d := range downs {
			if late := d - time.Duration(i)*2*time.Second; late < 0 || late > time.Second {
				t.Errorf("window %d: carrier lost %v after its start, want within 1s", i+1, late)
			}
		}
		waitFault(t, p.lab, "flap", 5*time.Second, func(f *v1beta1.LinkFault) bool {
			return f.Status.Phase == v1beta1.FaultCompleted && f.Status.Windows == 3
		})
	})

	t.Run("the controller and a meshnetd killed in its window", func(t *testing.T) {
		// The fault is kept in the API server: a controller that starts
		// in the window holds the link until the window's end, and ends
		// it on time; the killed meshnetd's pod keeps its end down in the
		// kernel meanwhile.
		_, start := newFault(t, p.lab, "outage", v1beta1.LinkFaultSpec{
			Links: []v1beta1.FaultLink{{Pod: "r3", Interface: "eth1"}}, State: down, Duration: "8s"})
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, func(s links.Reading) bool { return !s.Carrier })
		p.ctrl.signal(syscall.SIGKILL)
		// r3's end, read every 5 ms through the restarts: a restarted
		// meshnetd re-applies r3's last apply, which takes the states the
		// far end's meshnetd set since (the controller may have been killed
		// before r3's own down converged), so its end never comes up in
		// between.
		stopProbe := make(chan struct{})
		probed := make(chan []time.Duration)
		go func() { probed <- changesUntil(p.r3.Netns, "eth1", true, start, stopProbe) }()
		p.b.Kill()
		setDaemonReady(t, p.lab, p.b, false)
		time.Sleep(time.Second)
		p.b.Start()
		setDaemonReady(t, p.lab, p.b, true)
		// Without leader election: the killed leader's Lease would hold
		// a successor back for its 15 s. Started for the rest of the test.
		p.ctrl = startController(outer, p.lab, p.a, "controller-2", "--leader-elect=false")
		time.Sleep(2 * time.Second) // the new controller's first passes
		close(stopProbe)
		if ups := <-probed; len(ups) > 0 {
			t.Errorf("r3's eth1 came up at %v into the window, through the restarts; want held down", ups)
		}
		waitKernel(t, p.r3.Netns, "eth1", 15*time.Second, up)
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, up)
		back := time.Since(start)
		t.Logf("after the controller and node-b's meshnetd were killed and restarted: both ends up %v after the window began (window 8s)", back.Round(time.Millisecond))
		if back < 8*time.Second || back > 9*time.Second {
			t.Errorf("both ends up %v after the start, want within 1 s after the window's 8 s", back)
		}
	})

	t.Run("Topologies selected by label", func(t *testing.T) {
		// r3 labelled after the fault exists: held from then on, at both
		// ends of its eth1 (the VXLAN to r1:eth2).
		_, start := newFault(t, p.lab, "edge-cut", v1beta1.LinkFaultSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "edge"}}, Interfaces: []string{"eth1"},
			State: down, Duration: "4s"})
		time.Sleep(300 * time.Millisecond)
		if !readState(t, p.r3.Netns, "eth1").AdminUp {
			t.Fatal("r3:eth1 down before any Topology has the label")
		}
		mustEdit(t, p.lab, "r3", func(topo *v1beta1.Topology) { topo.Labels = map[string]string{"role": "edge"} })
		labelled := time.Since(start)
		waitKernel(t, p.r3.Netns, "eth1", 5*time.Second, cut)
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, func(s links.Reading) bool { return !s.Carrier })
		t.Logf("r3 labelled %v into the window: both ends of its eth1 down %v after", labelled.Round(time.Millisecond), (time.Since(start) - labelled).Round(time.Millisecond))
		waitStatus(t, p.lab, "r3", 5*time.Second, func(topo *v1beta1.Topology) bool {
			l := linkStatus(topo, "eth1")
			return l != nil && slices.Equal(l.Faults, []string{"edge-cut"})
		})
		// The fault's own status counts it, without waiting for its next edge.
		waitFault(t, p.lab, "edge-cut", 2*time.Second, func(f *v1beta1.LinkFault) bool { return f.Status.HeldLinks == 1 })
		if s := readState(t, p.r2.Netns, "eth1"); !s.AdminUp || !s.Carrier {
			t.Errorf("r2:eth1, not selected, is %+v; want up", s)
		}
		waitKernel(t, p.r3.Netns, "eth1", 6*time.Second, up)
		waitKernel(t, p.r1.Netns, "eth2", 5*time.Second, up)
		if back := time.Since(start); back < 4*time.Second {
			t.Errorf("r3:eth1 back %v after the window began, before its 4s", back)
		}
		mustEdit(t, p.lab, "r3", func(topo *v1beta1.Topology) { topo.Labels = nil })
	})

	t.Run("a selector that does not parse", func(t *testing.T) {
		// The CRD's schema does not check an expression's operator: the
		// fault's status names the field, and it holds nothing.
		newFault(t, p.lab, "odd", v1beta1.LinkFaultSpec{
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Near"}}},
			State:    down, Duration: "1m"})
		f := waitFault(t, p.lab, "odd", 5*time.Second, func(f *v1beta1.LinkFault) bool {
			c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse
		})
		if c := meta.FindStatusCondition(f.Status.Conditions, v1beta1.ConditionReady); !strings.Contains(c.Message, "spec.selector") {
			t.Errorf("Ready %q; want it to name spec.selector", c.Message)
		}
		if s := readState(t, p.r1.Netns, "eth1"); !s.AdminUp || !s.Carrier {
			t.Errorf("r1:eth1 is %+v under a fault that selects nothing; want up", s)
		}
		if err := p.lab.Client.Delete(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("deleted just before its window", func(t *testing.T) {
		// Its first edge is with the meshnetds, sent ahead; the deletion
		// calls it off: the cable is never pulled.
		start := time.Now().Add(time.Second)
		f, _ := newFault(t, p.lab, "late", v1beta1.LinkFaultSpec{Start: &metav1.MicroTime{Time: start},
			Links: []v1beta1.FaultLink{{Pod: "r1", Interface: "eth2"}}, State: down, Duration: "2s"})
		stop := make(chan struct{})
		r1, r3 := make(chan []time.Duration), make(chan []time.Duration)
		go func() { r1 <- changesUntil(p.r1.Netns, "eth2", false, start, stop) }()
		go func() { r3 <- changesUntil(p.r3.Netns, "eth1", false, start, stop) }()
		time.Sleep(time.Until(start.Add(-controller.FaultLead / 2)))
		if err := p.lab.Client.Delete(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start.Add(time.Second)))
		close(stop)
		if d1, d3 := <-r1, <-r3; len(d1)+len(d3) > 0 {
			t.Errorf("deleted %v before its window: r1:eth2 went down at %v, r3:eth1 at %v after the window's start; want never", controller.FaultLead/2, d1, d3)
		}
	})

	t.Run("deleted in its window", func(t *testing.T) {
		f, _ := newFault(t, p.lab, "long", v1beta1.LinkFaultSpec{
			Links: []v1beta1.FaultLink{{Pod: "r2", Interface: "eth1"}}, State: down, Duration: "10m"})
		waitKernel(t, p.r1.Netns, "eth1", 5*time.Second, func(s links.Reading) bool { return !s.Carrier })
		deleted := time.Now()
		if err := p.lab.Client.Delete(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		waitKernel(t, p.r1.Netns, "eth1", 5*time.Second, up)
		waitKernel(t, p.r2.Netns, "eth1", 5*time.Second, up)
		took := time.Since(deleted)
		t.Logf("both ends up %v after the fault's deletion", took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("both ends up %v after the deletion, want within 1s", took)
		}
	})
}

// changesUntil reads intf's admin state in the netns every 5 ms until stop
// and returns when, after start, it was seen to become up (or down).
func changesUntil(nsPath, intf string, up bool, start time.Time, stop <-chan struct{}) []time.Duration {
	var seen []time.Duration
	was := !up
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return seen
		case <-tick.C:
		}
		n, err := links.OpenNetns(nsPath)
		if err != nil {
			continue
		}
		s, err := links.ReadLink(n, intf)
		n.Close()
		if err != nil {
			continue
		}
		if s.AdminUp == up && was != up {
			seen = append(seen, time.Since(start).Round(time.Millisecond))
		}
		was = s.AdminUp
	}
}
