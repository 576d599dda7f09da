package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/version/versionmetric"
)

// faultsOn lists the LinkFaults of topo's namespace that may hold one of
// its links at either end: those that name topo's pod or one of its peers,
// and those whose selector matches topo or one of its peers' Topologies
// (peers, as peerTopologies reads them), each with spec.links set to what
// it holds of them.
func (r *Reconciler) faultsOn(ctx context.Context, topo *v1beta1.Topology, peers map[string]*v1beta1.Topology) ([]v1beta1.LinkFault, error) {
	var list v1beta1.LinkFaultList
	if err := r.Client.List(ctx, &list, client.InNamespace(topo.Namespace)); err != nil {
		return nil, fmt.Errorf("list linkfaults in %s: %w", topo.Namespace, err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	pods := map[string]bool{topo.Name: true}
	for _, l := range topo.Spec.Links {
		if l.HasPodPeer() {
			pods[l.PeerPod] = true
		}
	}
	var out []v1beta1.LinkFault
	for _, f := range list.Items {
		if f.Spec.Selector == nil {
			if slices.ContainsFunc(f.Spec.Links, func(l v1beta1.FaultLink) bool { return pods[l.Pod] }) {
				out = append(out, f)
			}
			continue
		}
		var held []v1beta1.FaultLink
		for _, t := range append([]*v1beta1.Topology{topo}, slices.Collect(maps.Values(peers))...) {
			if t == nil {
				continue
			}
			links, _, err := f.LinksOf(t)
			if err != nil {
				break // a bad selector holds nothing; its status says why
			}
			held = append(held, links...)
		}
		if len(held) > 0 {
			f.Spec.Links, f.Spec.Selector, f.Spec.Interfaces = held, nil, nil
			out = append(out, f)
		}
	}
	return out, nil
}

// topologiesOfFault maps a LinkFault to the Topologies at both ends of the
// links it names or selects.
func (r *Reconciler) topologiesOfFault(ctx context.Context, o client.Object) []reconcile.Request {
	f := o.(*v1beta1.LinkFault)
	seen := map[string]bool{}
	var reqs []reconcile.Request
	add := func(pod string) {
		if !seen[pod] {
			seen[pod] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: f.Namespace, Name: pod}})
		}
	}
	topos, err := faultTopologies(ctx, r.Client, f)
	if err != nil {
		log.FromContext(ctx).Error(err, "list the Topologies of a LinkFault", "linkfault", f.Name)
	}
	for _, topo := range topos {
		add(topo.Name)
		links, _, _ := f.LinksOf(topo)
		for _, fl := range links {
			for _, l := range topo.Spec.Links {
				if l.LocalIntf == fl.Interface && l.HasPodPeer() {
					add(l.PeerPod)
				}
			}
		}
	}
	for _, fl := range f.Spec.Links {
		add(fl.Pod) // also without a Topology yet
	}
	return reqs
}

// faultTopologies reads the Topologies f names in spec.links, or those its
// selector matches.
func faultTopologies(ctx context.Context, c client.Reader, f *v1beta1.LinkFault) ([]*v1beta1.Topology, error) {
	if f.Spec.Selector != nil {
		sel, err := f.TopologySelector()
		if err != nil {
			return nil, err
		}
		var list v1beta1.TopologyList
		if err := c.List(ctx, &list, client.InNamespace(f.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		out := make([]*v1beta1.Topology, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out, nil
	}
	var out []*v1beta1.Topology
	seen := map[string]bool{}
	for _, l := range f.Spec.Links {
		if seen[l.Pod] {
			continue
		}
		seen[l.Pod] = true
		t := &v1beta1.Topology{}
		switch err := c.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: l.Pod}, t); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			out = append(out, t)
		}
	}
	return out, nil
}

// faultEvents wakes the Topologies at both ends of a fault's links when it
// changes, as it was and as it is, and calls off their edges sent ahead
// when its spec changed or it is gone (its status writes, at each edge,
// change nothing of what it holds).
func (r *Reconciler) faultEvents() handler.EventHandler {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	wake := func(ctx context.Context, q queue, o client.Object, changed bool) {
		for _, req := range r.topologiesOfFault(ctx, o) {
			if changed {
				r.callOff(req.NamespacedName)
			}
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) { wake(ctx, q, e.Object, true) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			changed := e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration()
			wake(ctx, q, e.ObjectOld, changed)
			wake(ctx, q, e.ObjectNew, changed)
		},
		DeleteFunc:  func(ctx context.Context, e event.DeleteEvent, q queue) { wake(ctx, q, e.Object, true) },
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) { wake(ctx, q, e.Object, false) },
	}
}

// faultStatus writes LinkFaults' statuses (their one writer) from their
// schedules, and records each edge as an Event on the fault and on the
// Topologies of its links.
type faultStatus struct {
	client   client.Client
	recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=networkop.co.uk,resources=linkfaults,verbs=get;list;watch
// +kubebuilder:rbac:groups=networkop.co.uk,resources=linkfaults/status,verbs=get;patch;update

func (r *Reconciler) setupFaults(mgr ctrl.Manager) error {
	if err := ctrlmetrics.Registry.Register(&faultMetrics{reader: mgr.GetCache()}); err != nil {
		return fmt.Errorf("register linkfault metrics: %w", err)
	}
	if err := ctrlmetrics.Registry.Register(versionmetric.Collector("meshnet-controller")); err != nil {
		return fmt.Errorf("register build info: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("linkfault").
		For(&v1beta1.LinkFault{}).
		// What a fault holds and misses changes with the Topologies too:
		// one created, deleted, relabelled or given other links.
		Watches(&v1beta1.Topology{}, handler.EnqueueRequestsFromMapFunc(r.faultsOfNamespace),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Complete(&faultStatus{client: r.Client, recorder: r.Recorder})
}

// faultsOfNamespace is every LinkFault of o's namespace, for their status
// writer: a fault may name o, select it, or have stopped selecting it.
func (r *Reconciler) faultsOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1beta1.LinkFaultList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "LinkFaults not listed for a changed Topology", "namespace", o.GetNamespace(), "topology", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

// faultMetrics is the LinkFaults as Prometheus sees them, read from reader
// at each scrape with their schedules at that moment: no state of its own.
type faultMetrics struct {
	reader client.Reader
}

var (
	faultsDesc = prometheus.NewDesc("meshnet_linkfaults",
		"LinkFaults by namespace and phase (Pending, Active, Waiting, Completed, Suspended, Invalid).", []string{"namespace", "phase"}, nil)
	faultLinksDesc = prometheus.NewDesc("meshnet_linkfault_held_links",
		"Links that LinkFaults hold now, by namespace: the sum of their status.held_links.", []string{"namespace"}, nil)
)

// Describe implements prometheus.Collector.
func (m *faultMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- faultsDesc
	ch <- faultLinksDesc
}

// Collect implements prometheus.Collector.
func (m *faultMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list v1beta1.LinkFaultList
	if err := m.reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(faultsDesc, fmt.Errorf("list linkfaults: %w", err))
		return
	}
	type key struct{ ns, phase string }
	faults, held := map[key]int{}, map[string]int{}
	now := time.Now()
	for i := range list.Items {
		f := &list.Items[i]
		s, err := f.ScheduleAt(now)
		phase := string(s.Phase)
		if err != nil {
			phase = "Invalid"
		}
		faults[key{f.Namespace, phase}]++
		// The status writer is the one that counts what a fault holds
		// (its links that exist, the Topologies it selects).
		held[f.Namespace] += int(f.Status.HeldLinks)
	}
	for k, n := range faults {
		ch <- prometheus.MustNewConstMetric(faultsDesc, prometheus.GaugeValue, float64(n), k.ns, k.phase)
	}
	for ns, n := range held {
		ch <- prometheus.MustNewConstMetric(faultLinksDesc, prometheus.GaugeValue, float64(n), ns)
	}
}

// Reconcile writes one LinkFault's status and comes back at its next edge.
func (s *faultStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var f v1beta1.LinkFault
	if err := s.client.Get(ctx, req.NamespacedName, &f); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	sched, err := f.ScheduleAt(now)
	st := v1beta1.LinkFaultStatus{
		ObservedGeneration: f.Generation,
		Conditions:         slices.Clone(f.Status.Conditions),
	}
	if err == nil {
		_, err = f.TopologySelector() // a bad one is the spec's error, not a retry's
	}
	if err == nil && f.Spec.Netem != nil {
		if _, nerr := netemconv.FromTopology(f.Spec.Netem); nerr != nil {
			var msgs []string
			for _, fe := range netemconv.Fields(nerr) {
				msgs = append(msgs, fmt.Sprintf("spec.netem.%s: %s", fe.Field, fe.Reason))
			}
			err = fmt.Errorf("%s", strings.Join(msgs, "; "))
		}
	}
	if err != nil {
		st.Phase = f.Status.Phase
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse,
			ObservedGeneration: f.Generation, Reason: v1beta1.ReasonInvalidSpec, Message: err.Error()})
		return reconcile.Result{}, s.write(ctx, &f, st)
	}
	st.Phase, st.Windows = sched.Phase, sched.Windows
	if !sched.LastEdge.IsZero() {
		st.LastEdge = &metav1.MicroTime{Time: sched.LastEdge}
	}
	if !sched.NextEdge.IsZero() {
		st.NextEdge = &metav1.MicroTime{Time: sched.NextEdge}
	}
	selected, err := faultTopologies(ctx, s.client, &f)
	if err != nil {
		return reconcile.Result{}, err
	}
	topos := map[string]*v1beta1.Topology{}
	var links int
	for _, t := range selected {
		topos[t.Name] = t
		held, missing, _ := f.LinksOf(t)
		for _, l := range missing {
			st.Missing = append(st.Missing, l.String())
		}
		links += len(held) + len(missing)
		if sched.Holds() {
			st.HeldLinks += int32(len(held))
		}
	}
	for _, l := range f.Spec.Links {
		if topos[l.Pod] == nil {
			st.Missing = append(st.Missing, l.String())
			links++
		}
	}
	msg := fmt.Sprintf("%s: %d of %d links held", sched.Phase, st.HeldLinks, links)
	if len(st.Missing) > 0 {
		msg += fmt.Sprintf("; no Topology lists %s", firstOf(st.Missing, "links"))
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue,
		ObservedGeneration: f.Generation, Reason: string(sched.Phase), Message: msg})
	if sched.Phase != f.Status.Phase || sched.Windows != f.Status.Windows {
		s.edge(&f, sched, topos)
	}
	if err := s.write(ctx, &f, st); err != nil {
		return reconcile.Result{}, err
	}
	if sched.NextEdge.IsZero() {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: max(time.Until(sched.NextEdge), time.Millisecond)}, nil
}

// edge records that f's schedule moved to sched, on f and on the
// Topologies of its links.
func (s *faultStatus) edge(f *v1beta1.LinkFault, sched v1beta1.FaultSchedule, topos map[string]*v1beta1.Topology) {
	var what string
	switch sched.Phase {
	case v1beta1.FaultActive:
		var did []string
		if f.Spec.State != nil {
			did = append(did, "state "+string(*f.Spec.State))
		}
		if f.Spec.Netem != nil {
			did = append(did, "netem")
		}
		what = fmt.Sprintf("window %d began: %s until %s", sched.Windows, strings.Join(did, " and "), sched.NextEdge.Format(time.RFC3339Nano))
	case v1beta1.FaultPending:
		what = "first window begins at " + sched.NextEdge.Format(time.RFC3339Nano)
	case v1beta1.FaultWaiting:
		what = fmt.Sprintf("window %d ended; the next begins at %s", sched.Windows, sched.NextEdge.Format(time.RFC3339Nano))
	case v1beta1.FaultCompleted:
		what = fmt.Sprintf("window %d, the last, ended", sched.Windows)
	case v1beta1.FaultSuspended:
		what = "suspended: links back to their Topologies"
	}
	s.recorder.Eventf(f, nil, corev1.EventTypeNormal, string(sched.Phase), "Schedule", "%s", what)
	for _, t := range topos {
		if t != nil {
			s.recorder.Eventf(t, f, corev1.EventTypeNormal, "LinkFault"+string(sched.Phase), "Schedule", "LinkFault %s: %s", f.Name, what)
		}
	}
}

// write sets f's status to st, when it differs.
func (s *faultStatus) write(ctx context.Context, f *v1beta1.LinkFault, st v1beta1.LinkFaultStatus) error {
	if equalFaultStatus(f.Status, st) {
		return nil
	}
	base := f.DeepCopy()
	f.Status = st
	if err := s.client.Status().Patch(ctx, f, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("write status of linkfault %s/%s: %w", f.Namespace, f.Name, err)
	}
	return nil
}

// equalFaultStatus compares statuses as the API server stores them: times
// to the microsecond, conditions without their transition times.
func equalFaultStatus(a, b v1beta1.LinkFaultStatus) bool {
	us := func(t *metav1.MicroTime) int64 {
		if t == nil {
			return 0
		}
		return t.Truncate(time.Microsecond).UnixMicro()
	}
	if a.ObservedGeneration != b.ObservedGeneration || a.Phase != b.Phase || a.Windows != b.Windows || a.HeldLinks != b.HeldLinks ||
		!slices.Equal(a.Missing, b.Missing) || us(a.LastEdge) != us(b.LastEdge) || us(a.NextEdge) != us(b.NextEdge) ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
