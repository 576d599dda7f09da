package v1beta1

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// FaultSchedule is where a LinkFault's schedule is at a moment: the one
// rule that the controller holds links by, writes the fault's status by and
// wakes up at the edges of.
//
// +kubebuilder:object:generate=false
type FaultSchedule struct {
	Phase FaultPhase
	// Windows counts the windows begun by then.
	Windows int32
	// WindowStart is when the current window began (Phase Active).
	WindowStart time.Time
	// LastEdge is when the last window began or ended; zero before the
	// first.
	LastEdge time.Time
	// NextEdge is when the next window begins or the current one ends;
	// zero when none will (Completed, Suspended).
	NextEdge time.Time
}

// Holds reports whether the fault holds its links: in a window.
func (s FaultSchedule) Holds() bool { return s.Phase == FaultActive }

// ScheduleAt is where f's schedule is at now. Its windows begin at start
// (spec.start, else the fault's creation) and every period after, or at
// the times spec.schedule names from start on, each lasting duration,
// count of them (one without a period or a schedule, no end with either
// and no count). An error names the spec field that does not
// parse (the CRD's validation makes that unlikely).
func (f *LinkFault) ScheduleAt(now time.Time) (FaultSchedule, error) {
	d, err := f.Spec.Duration.Parse()
	if err != nil {
		return FaultSchedule{}, fmt.Errorf("spec.duration: %w", err)
	}
	if d <= 0 {
		return FaultSchedule{}, fmt.Errorf("spec.duration: %s is not more than 0s", f.Spec.Duration)
	}
	var period time.Duration
	if f.Spec.Period != nil {
		if period, err = f.Spec.Period.Parse(); err != nil {
			return FaultSchedule{}, fmt.Errorf("spec.period: %w", err)
		}
		if period <= d {
			return FaultSchedule{}, fmt.Errorf("spec.period: %s is not longer than spec.duration %s", *f.Spec.Period, f.Spec.Duration)
		}
	}
	count := int64(-1) // no end
	switch {
	case f.Spec.Count != nil:
		count = int64(*f.Spec.Count)
	case period == 0 && f.Spec.Schedule == nil:
		count = 1
	}
	start := f.CreationTimestamp.Time
	if f.Spec.Start != nil {
		start = f.Spec.Start.Time
	}
	if f.Spec.Schedule != nil {
		if period != 0 {
			return FaultSchedule{}, errors.New("spec.schedule: period is set too")
		}
		return f.scheduledAt(now, start, d, count)
	}
	var s FaultSchedule
	if now.Before(start) {
		s.Phase, s.NextEdge = FaultPending, start
		if f.Spec.Suspend {
			s.Phase, s.NextEdge = FaultSuspended, time.Time{}
		}
		return s, nil
	}
	// k is the window begun last: the one now is in or after.
	k := int64(0)
	if period > 0 {
		k = int64(now.Sub(start) / period)
	}
	if count >= 0 && k >= count {
		k = count - 1
	}
	begun := start.Add(time.Duration(k) * period)
	ended := begun.Add(d)
	s.Windows = int32(min(k+1, 1<<31-1))
	switch {
	case f.Spec.Suspend:
		s.Phase, s.LastEdge = FaultSuspended, begun
		if !now.Before(ended) {
			s.LastEdge = ended
		}
	case now.Before(ended):
		s.Phase, s.WindowStart, s.LastEdge, s.NextEdge = FaultActive, begun, begun, ended
	case count < 0 || k+1 < count:
		s.Phase, s.LastEdge, s.NextEdge = FaultWaiting, ended, begun.Add(period)
	default:
		s.Phase, s.LastEdge = FaultCompleted, ended
	}
	return s, nil
}

// LinksOf is what f holds of topo when in a window: its spec.links on
// topo's pod that topo lists; or, when its selector matches topo's
// labels, the links of topo that spec.interfaces names (all of them when
// it names none). missing is what f names of topo that topo lacks. An error names
// spec.selector when it does not parse.
func (f *LinkFault) LinksOf(topo *Topology) (links []FaultLink, missing []FaultLink, err error) {
	lists := func(intf string) bool {
		return slices.ContainsFunc(topo.Spec.Links, func(l Link) bool { return l.LocalIntf == intf })
	}
	if f.Spec.Selector == nil {
		for _, l := range f.Spec.Links {
			switch {
			case l.Pod != topo.Name:
			case lists(l.Interface):
				links = append(links, l)
			default:
				missing = append(missing, l)
			}
		}
		return links, missing, nil
	}
	sel, err := f.TopologySelector()
	if err != nil {
		return nil, nil, err
	}
	if !sel.Matches(labels.Set(topo.Labels)) {
		return nil, nil, nil
	}
	for _, l := range topo.Spec.Links {
		if len(f.Spec.Interfaces) == 0 || slices.Contains(f.Spec.Interfaces, l.LocalIntf) {
			links = append(links, FaultLink{Pod: topo.Name, Interface: l.LocalIntf})
		}
	}
	for _, intf := range f.Spec.Interfaces {
		if !lists(intf) {
			missing = append(missing, FaultLink{Pod: topo.Name, Interface: intf})
		}
	}
	return links, missing, nil
}

// TopologySelector is spec.selector as the API's list calls and LinksOf
// read it; nil without one. An error names spec.selector: the CRD's schema
// does not check an expression's operator.
func (f *LinkFault) TopologySelector() (labels.Selector, error) {
	if f.Spec.Selector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(f.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	return sel, nil
}

// MaxScheduledWindows bounds the windows of a fault with a schedule, from
// its start: the windows are counted from there, each time ScheduleAt is
// asked, so the cost of an answer stays bounded (a minute's schedule
// reaches it in a week, an hour's in a year).
const MaxScheduledWindows = 10000

// scheduledAt is ScheduleAt for a fault with a schedule: a window begins at
// each time the schedule names at or after start, unless a window is
// still open then, count of them (-1: no end).
func (f *LinkFault) scheduledAt(now, start time.Time, d time.Duration, count int64) (FaultSchedule, error) {
	sched, err := cron.ParseStandard(*f.Spec.Schedule)
	if err != nil {
		return FaultSchedule{}, fmt.Errorf("spec.schedule: %q: %w", *f.Spec.Schedule, err)
	}
	var s FaultSchedule
	var begun, ended time.Time
	k := int64(0)
	// The first time at or after start: Next is strictly after, in whole
	// seconds.
	at := sched.Next(start.Add(-time.Second).Truncate(time.Second))
	for ; !at.IsZero() && !at.After(now) && (count < 0 || k < count); at = sched.Next(at) {
		if at.Before(ended) || at.Before(start) {
			continue // a window is open: skipped
		}
		if k++; k > MaxScheduledWindows {
			return FaultSchedule{}, fmt.Errorf("spec.schedule: more than %d windows since %s: recreate the fault or move spec.start", MaxScheduledWindows, start.UTC().Format(time.RFC3339))
		}
		begun, ended = at, at.Add(d)
	}
	for !at.IsZero() && at.Before(ended) {
		at = sched.Next(at) // the next window's: after this one ends
	}
	s.Windows = int32(k)
	switch {
	case k == 0 && at.IsZero():
		return FaultSchedule{}, fmt.Errorf("spec.schedule: %q names no time after %s", *f.Spec.Schedule, start.UTC().Format(time.RFC3339))
	case f.Spec.Suspend:
		s.Phase = FaultSuspended
		if k > 0 {
			s.LastEdge = begun
			if !now.Before(ended) {
				s.LastEdge = ended
			}
		}
	case k == 0:
		s.Phase, s.NextEdge = FaultPending, at
	case now.Before(ended):
		s.Phase, s.WindowStart, s.LastEdge, s.NextEdge = FaultActive, begun, begun, ended
	case (count < 0 || k < count) && !at.IsZero():
		s.Phase, s.LastEdge, s.NextEdge = FaultWaiting, ended, at
	default:
		s.Phase, s.LastEdge = FaultCompleted, ended
	}
	return s, nil
}

// Holding is each link the faults hold at now, with what they do to it:
// down when any of them says down, and the netem of the one whose window
// began last (ties: the first by name). Faults that do not parse hold
// nothing. next is the earliest edge of any of them after now (zero when
// none will come): when what they hold changes next.
func Holding(faults []LinkFault, now time.Time) (held map[FaultLink]FaultHold, next time.Time) {
	held = map[FaultLink]FaultHold{}
	for i := range faults {
		f := &faults[i]
		s, err := f.ScheduleAt(now)
		if err != nil {
			continue
		}
		if !s.NextEdge.IsZero() && (next.IsZero() || s.NextEdge.Before(next)) {
			next = s.NextEdge
		}
		if !s.Holds() {
			continue
		}
		for _, l := range f.Spec.Links {
			h := held[l]
			h.By = append(h.By, f.Name)
			if f.Spec.State != nil && *f.Spec.State == LinkDown {
				h.Down = true
			}
			if f.Spec.Netem != nil && (h.Netem == nil || s.WindowStart.After(h.netemSince) ||
				(s.WindowStart.Equal(h.netemSince) && f.Name < h.NetemBy)) {
				h.Netem, h.netemSince, h.NetemBy = f.Spec.Netem, s.WindowStart, f.Name
			}
			held[l] = h
		}
	}
	return held, next
}

// FaultHold is what the faults in a window do to one link.
//
// +kubebuilder:object:generate=false
type FaultHold struct {
	// By names the faults holding the link.
	By []string
	// Down: a fault pulls its cable.
	Down bool
	// Netem shapes its traffic in place of its Topology's; nil: the
	// Topology's.
	Netem *Netem
	// NetemBy names the fault whose netem it is.
	NetemBy string

	netemSince time.Time
}
