package v1beta1

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)

func fault(name string, spec LinkFaultSpec) LinkFault {
	if spec.Start == nil {
		spec.Start = &metav1.MicroTime{Time: t0}
	}
	if len(spec.Links) == 0 {
		spec.Links = []FaultLink{{Pod: "r1", Interface: "eth1"}}
	}
	return LinkFault{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestScheduleAt(t *testing.T) {
	down := ptr.To(LinkDown)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name string
		spec LinkFaultSpec
		now  time.Duration
		want FaultSchedule
	}{
		{"before its start", LinkFaultSpec{State: down, Duration: "30s"}, -time.Second,
			FaultSchedule{Phase: FaultPending, NextEdge: t0}},
		{"at its start", LinkFaultSpec{State: down, Duration: "30s"}, 0,
			FaultSchedule{Phase: FaultActive, Windows: 1, WindowStart: t0, LastEdge: t0, NextEdge: at(30 * time.Second)}},
		{"its one window over", LinkFaultSpec{State: down, Duration: "30s"}, 30 * time.Second,
			FaultSchedule{Phase: FaultCompleted, Windows: 1, LastEdge: at(30 * time.Second)}},
		{"a flap, down", LinkFaultSpec{State: down, Duration: "2s", Period: ptr.To[Duration]("10s"), Count: ptr.To[int32](3)}, 21 * time.Second,
			FaultSchedule{Phase: FaultActive, Windows: 3, WindowStart: at(20 * time.Second), LastEdge: at(20 * time.Second), NextEdge: at(22 * time.Second)}},
		{"a flap, up", LinkFaultSpec{State: down, Duration: "2s", Period: ptr.To[Duration]("10s"), Count: ptr.To[int32](3)}, 12 * time.Second,
			FaultSchedule{Phase: FaultWaiting, Windows: 2, LastEdge: at(12 * time.Second), NextEdge: at(20 * time.Second)}},
		{"a flap after its count", LinkFaultSpec{State: down, Duration: "2s", Period: ptr.To[Duration]("10s"), Count: ptr.To[int32](3)}, time.Hour,
			FaultSchedule{Phase: FaultCompleted, Windows: 3, LastEdge: at(22 * time.Second)}},
		{"a flap without count", LinkFaultSpec{State: down, Duration: "2s", Period: ptr.To[Duration]("10s")}, time.Hour + 5*time.Second,
			FaultSchedule{Phase: FaultWaiting, Windows: 361, LastEdge: at(time.Hour + 2*time.Second), NextEdge: at(time.Hour + 10*time.Second)}},
		{"suspended in a window", LinkFaultSpec{State: down, Duration: "30s", Suspend: true}, time.Second,
			FaultSchedule{Phase: FaultSuspended, Windows: 1, LastEdge: t0}},
		{"suspended before its start", LinkFaultSpec{State: down, Duration: "30s", Suspend: true}, -time.Second,
			FaultSchedule{Phase: FaultSuspended}},
		// t0 is 20:00:00 UTC.
		{"a schedule, before its first time", LinkFaultSpec{State: down, Duration: "1m", Schedule: ptr.To("*/10 * * * *")}, -time.Second,
			FaultSchedule{Phase: FaultPending, NextEdge: t0}},
		{"a schedule, at a time it names", LinkFaultSpec{State: down, Duration: "1m", Schedule: ptr.To("*/10 * * * *")}, 20*time.Minute + time.Second,
			FaultSchedule{Phase: FaultActive, Windows: 3, WindowStart: at(20 * time.Minute), LastEdge: at(20 * time.Minute), NextEdge: at(21 * time.Minute)}},
		{"a schedule, between", LinkFaultSpec{State: down, Duration: "1m", Schedule: ptr.To("*/10 * * * *")}, 25 * time.Minute,
			FaultSchedule{Phase: FaultWaiting, Windows: 3, LastEdge: at(21 * time.Minute), NextEdge: at(30 * time.Minute)}},
		{"a schedule starting between its times", LinkFaultSpec{State: down, Duration: "1m", Schedule: ptr.To("@hourly"),
			Start: &metav1.MicroTime{Time: at(-30 * time.Minute)}}, -time.Minute,
			FaultSchedule{Phase: FaultPending, NextEdge: t0}},
		{"a schedule's time inside an open window is skipped", LinkFaultSpec{State: down, Duration: "15m", Schedule: ptr.To("*/10 * * * *")}, 12 * time.Minute,
			FaultSchedule{Phase: FaultActive, Windows: 1, WindowStart: t0, LastEdge: t0, NextEdge: at(15 * time.Minute)}},
		{"the same, the next window", LinkFaultSpec{State: down, Duration: "15m", Schedule: ptr.To("*/10 * * * *")}, 16 * time.Minute,
			FaultSchedule{Phase: FaultWaiting, Windows: 1, LastEdge: at(15 * time.Minute), NextEdge: at(20 * time.Minute)}},
		{"a schedule after its count", LinkFaultSpec{State: down, Duration: "1m", Schedule: ptr.To("0 * * * *"), Count: ptr.To[int32](2)}, 3 * time.Hour,
			FaultSchedule{Phase: FaultCompleted, Windows: 2, LastEdge: at(time.Hour + time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fault("f", tc.spec)
			got, err := f.ScheduleAt(at(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("at %v:\n got %+v\nwant %+v", tc.now, got, tc.want)
			}
		})
	}
}

func TestScheduleAtStartsAtCreationWithoutStart(t *testing.T) {
	f := LinkFault{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: t0}},
		Spec: LinkFaultSpec{State: ptr.To(LinkDown), Duration: "1m"}}
	if s, err := f.ScheduleAt(t0.Add(time.Second)); err != nil || s.Phase != FaultActive || !s.NextEdge.Equal(t0.Add(time.Minute)) {
		t.Errorf("got %+v, %v; want Active until a minute after the creation", s, err)
	}
}

func TestScheduleAtNamesTheBadField(t *testing.T) {
	for spec, want := range map[*LinkFaultSpec]string{
		{Duration: "soon"}: "spec.duration",
		{Duration: "0s"}:   "spec.duration",
		{Duration: "2s", Period: ptr.To[Duration]("later")}:                                                          "spec.period",
		{Duration: "20s", Period: ptr.To[Duration]("10s")}:                                                           "spec.period",
		{Duration: "1m", Schedule: ptr.To("every day")}:                                                              "spec.schedule",
		{Duration: "1m", Schedule: ptr.To("0 0 30 2 *")}:                                                             "spec.schedule", // February 30th
		{Duration: "1s", Schedule: ptr.To("* * * * *"), Start: &metav1.MicroTime{Time: t0.Add(-8 * 24 * time.Hour)}}: "spec.schedule", // past MaxScheduledWindows
	} {
		f := fault("f", *spec)
		if _, err := f.ScheduleAt(t0); err == nil || err.Error()[:len(want)] != want {
			t.Errorf("%+v: %v, want an error naming %s", *spec, err, want)
		}
	}
}

func TestHolding(t *testing.T) {
	eth1 := FaultLink{Pod: "r1", Interface: "eth1"}
	eth2 := FaultLink{Pod: "r1", Interface: "eth2"}
	slow, slower := &Netem{Delay: ptr.To[Duration]("100ms")}, &Netem{Delay: ptr.To[Duration]("300ms")}
	faults := []LinkFault{
		fault("cut", LinkFaultSpec{State: ptr.To(LinkDown), Duration: "30s", Links: []FaultLink{eth1}}),
		fault("b-slow", LinkFaultSpec{Netem: slow, Duration: "1m", Links: []FaultLink{eth1, eth2}}),
		fault("a-slower", LinkFaultSpec{Netem: slower, Duration: "1m", Links: []FaultLink{eth2}}),
		fault("later", LinkFaultSpec{Netem: slower, Duration: "1m", Links: []FaultLink{eth1},
			Start: &metav1.MicroTime{Time: t0.Add(10 * time.Second)}}),
		fault("broken", LinkFaultSpec{State: ptr.To(LinkDown), Duration: "never", Links: []FaultLink{eth2}}),
	}
	held, next := Holding(faults, t0.Add(time.Second))
	if h := held[eth1]; !h.Down || h.Netem != slow || !slices.Equal(h.By, []string{"cut", "b-slow"}) {
		t.Errorf("r1:eth1 %+v; want down by cut, shaped by b-slow (later has not begun)", h)
	}
	if h := held[eth2]; h.Down || h.Netem != slower {
		t.Errorf("r1:eth2 %+v; want up, shaped by a-slower (began with b-slow, first by name)", h)
	}
	if !next.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("next edge %v, want later's start", next)
	}
	held, next = Holding(faults, t0.Add(40*time.Second))
	if h := held[eth1]; h.Down || h.Netem != slower {
		t.Errorf("r1:eth1 after the cut %+v; want up, shaped by later (its window began last)", h)
	}
	if !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("next edge %v, want the slow faults' end", next)
	}
}

// BenchmarkScheduleAtMostWindows is the cost of one answer for a fault with
// a schedule at MaxScheduledWindows (a minute's schedule, a week in): what
// the controller pays per fault per pass at worst.
func BenchmarkScheduleAtMostWindows(b *testing.B) {
	f := fault("f", LinkFaultSpec{State: ptr.To(LinkDown), Duration: "10s", Schedule: ptr.To("* * * * *")})
	now := t0.Add((MaxScheduledWindows - 1) * time.Minute)
	for b.Loop() {
		if s, err := f.ScheduleAt(now); err != nil || s.Windows != MaxScheduledWindows {
			b.Fatalf("%+v, %v", s, err)
		}
	}
}

func TestLinksOf(t *testing.T) {
	topo := &Topology{}
	topo.Name, topo.Labels = "spine1", map[string]string{"role": "spine"}
	topo.Spec.Links = []Link{{UID: 1, LocalIntf: "eth1"}, {UID: 2, LocalIntf: "eth2"}, {UID: 3, LocalIntf: "eth3"}}
	l := func(intf string) FaultLink { return FaultLink{Pod: "spine1", Interface: intf} }
	for _, tc := range []struct {
		name          string
		spec          LinkFaultSpec
		links, missed []FaultLink
	}{
		{"links on the pod", LinkFaultSpec{Links: []FaultLink{l("eth2"), l("eth9"), {Pod: "leaf1", Interface: "eth1"}}},
			[]FaultLink{l("eth2")}, []FaultLink{l("eth9")}},
		{"a selector and interfaces", LinkFaultSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "spine"}}, Interfaces: []string{"eth3", "eth9"}},
			[]FaultLink{l("eth3")}, []FaultLink{l("eth9")}},
		{"a selector alone: every link", LinkFaultSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "spine"}}},
			[]FaultLink{l("eth1"), l("eth2"), l("eth3")}, nil},
		{"a selector that does not match", LinkFaultSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "leaf"}}},
			nil, nil},
	} {
		f := LinkFault{Spec: tc.spec}
		links, missed, err := f.LinksOf(topo)
		if err != nil || !slices.Equal(links, tc.links) || !slices.Equal(missed, tc.missed) {
			t.Errorf("%s: %v, missing %v, %v; want %v, missing %v", tc.name, links, missed, err, tc.links, tc.missed)
		}
	}
	f := LinkFault{Spec: LinkFaultSpec{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Near"}}}}}
	if _, _, err := f.LinksOf(topo); err == nil || !strings.HasPrefix(err.Error(), "spec.selector") {
		t.Errorf("a selector that does not parse: %v, want an error naming spec.selector", err)
	}
}
