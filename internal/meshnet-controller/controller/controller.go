// Package controller is meshnet-controller's reconciler: for each Topology it
// computes the pod's desired runtime state, sends it with ApplyPod to the
// meshnetd on the pod's node, and writes what the kernel has back into the
// status.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/partition"
)

// FieldOwner is the server-side-apply manager of the status fields the
// controller writes. meshnetd owns meshnet-cni's fields (src_ip, net_ns,
// container_id, skipped).
const FieldOwner = "meshnet-controller"

// maxRetryDelay caps the backoff of a failing Topology. The default cap
// (1000s) would leave a pod unconverged for minutes after its daemon came
// back from a crash during a burst of edits: each failed pass doubles the
// delay, and once the edits stop only the retry is left.
const maxRetryDelay = 10 * time.Second

// statusWriteTimeout bounds one status write: half the API server's own
// request timeout (60s).
const statusWriteTimeout = 30 * time.Second

// nodeField indexes Topologies by the node of their pod.
const nodeField = "status.node"

// +kubebuilder:rbac:groups=networkop.co.uk,resources=topologies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=networkop.co.uk,resources=topologies/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=networkop.co.uk,resources=linkfaults,verbs=get;list;watch
// +kubebuilder:rbac:groups=networkop.co.uk,resources=linkfaults/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=meshnet,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=meshnet,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Reconciler converges Topologies. Its patch on topologies is what meshnetd
// demands of ApplyPod's caller (internal/meshnetd/podlinks); core events in meshnet
// are leader election's.
type Reconciler struct {
	Client   client.Client
	Daemons  *partition.Resolver
	Pool     *daemonclient.Pool
	Recorder events.EventRecorder
	// Resync is how often a converged Topology is re-applied, which corrects
	// drift in the kernel and re-applies state after a daemon lost it.
	Resync time.Duration
	// CallTimeout bounds one ApplyPod, with PerLinkCallTimeout more for
	// each link of the pod.
	CallTimeout time.Duration
	// stale carries peers whose status a pass made stale (refreshPeers).
	stale chan event.GenericEvent
	// kernel is the nodes' link watches; ctx, SetupWithManager's, bounds
	// them.
	kernel *kernel
	ctx    context.Context
	// written is what the last status writes said.
	written writtenStatuses
	// sent is, per Topology, the fields its last ApplyPod sent by link
	// uid (desiredState's sent).
	sent sync.Map
	// ahead holds, per Topology, how to call off its ApplyPod sent ahead
	// of a LinkFault's edge while it waits for its moment (callOff).
	ahead sync.Map
	// Workers is how many Topologies are reconciled at once (one Topology
	// is never reconciled twice at once). A pass mostly waits, on ApplyPod
	// and on the status write, so a batch of edits over many pods converges
	// only as fast as enough of them are in flight.
	Workers int
}

// SetupWithManager registers the reconciler and its watches: Topologies,
// their Pods, and the daemon's EndpointSlices (a daemon that comes back gets
// its pods' state re-applied).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := partition.IndexEndpointSlices(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("index endpointslices: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1beta1.Topology{}, nodeField, func(o client.Object) []string {
		if n := o.(*v1beta1.Topology).Status.Node; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index topologies by node: %w", err)
	}
	daemonSlices := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Daemons.Namespace && o.GetLabels()[discoveryv1.LabelServiceName] == r.Daemons.Service
	})
	r.stale = make(chan event.GenericEvent, 1024)
	changed := make(chan event.GenericEvent, 4096)
	r.ctx, r.kernel = ctx, newKernel(r.Daemons, r.Pool, changed)
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("topology").
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: r.Workers,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		}).
		// Status writes (the controller's own, meshnetd's at CNI ADD) do
		// not change what to apply: reconciling on them would send every
		// edit to the daemon twice. Labels do: a LinkFault's selector may
		// pick the Topology now, or no longer.
		For(&v1beta1.Topology{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&v1beta1.Topology{}, r.peersOfChangedStates(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A relabelled Topology's links may be held by a LinkFault's
		// selector now, or no longer: at both ends.
		Watches(&v1beta1.Topology{}, handler.EnqueueRequestsFromMapFunc(peersOf), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(r.stale, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(changed, &handler.EnqueueRequestForObject{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
		})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.topologiesOnSliceNodes), builder.WithPredicates(daemonSlices)).
		Watches(&v1beta1.LinkFault{}, r.faultEvents()).
		Complete(r); err != nil {
		return err
	}
	return r.setupFaults(mgr)
}

// topologiesOnSliceNodes maps a daemon EndpointSlice to the Topologies on
// the nodes it serves.
func (r *Reconciler) topologiesOnSliceNodes(ctx context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
		if ep.NodeName == nil {
			continue
		}
		var topos v1beta1.TopologyList
		if err := r.Client.List(ctx, &topos, client.MatchingFields{nodeField: *ep.NodeName}); err != nil {
			log.FromContext(ctx).Error(err, "list topologies on node", "node", *ep.NodeName)
			continue
		}
		for _, t := range topos.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return reqs
}

// Reconcile converges one Topology, and comes back at the next edge of a
// LinkFault on its links.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	var edge time.Time // when what LinkFaults do to its links changes next
	defer func() {
		if err == nil && !edge.IsZero() {
			if d := max(time.Until(edge)-FaultLead, time.Millisecond); res.RequeueAfter == 0 || d < res.RequeueAfter {
				res.RequeueAfter = d
			}
		}
	}()
	topo := &v1beta1.Topology{}
	if err := r.Client.Get(ctx, req.NamespacedName, topo); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
			r.kernel.unapplied(req.NamespacedName)
			r.sent.Delete(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		pod = nil
	}
	if pod == nil || pod.Spec.NodeName == "" {
		return reconcile.Result{}, r.writeStatus(ctx, topo,
			failedStatus(topo, "", false, v1beta1.ReasonPodNotScheduled, "pod "+req.Name+" is not scheduled on a node yet"))
	}
	node := pod.Spec.NodeName
	peers, err := r.peerTopologies(ctx, topo)
	if err != nil {
		return reconcile.Result{}, err
	}
	faults, err := r.faultsOn(ctx, topo, peers)
	if err != nil {
		return reconcile.Result{}, err
	}
	var held map[v1beta1.FaultLink]v1beta1.FaultHold
	held, edge = v1beta1.Holding(faults, time.Now())
	var sent map[int][]string
	if v, ok := r.sent.Load(req.NamespacedName); ok {
		sent = v.(map[int][]string)
	}
	d, err := desiredState(topo, pod, peers, held, sent)
	if err != nil {
		r.Recorder.Eventf(topo, nil, corev1.EventTypeWarning, v1beta1.ReasonInvalidSpec, "Apply", "%v", err)
		return reconcile.Result{}, r.writeStatus(ctx, topo, failedStatus(topo, node, true, v1beta1.ReasonInvalidSpec, err.Error()))
	}
	r.kernel.follow(r.ctx, node)
	key := req.NamespacedName
	if a, ok := r.kernel.current(node, key, d.request, r.Resync); ok {
		if !edge.IsZero() && time.Until(edge) <= FaultLead {
			// What holds now is applied: the next edge goes ahead, for
			// meshnetd to make on time (apply_at).
			held, next := v1beta1.Holding(faults, edge)
			if ahead, err := desiredState(topo, pod, peers, held, sent); err == nil {
				ahead.request.ApplyAt = timestamppb.New(edge)
				edge = next
				return r.apply(ctx, topo, pod, ahead, peers)
			}
		}
		// Applied already: only the kernel (or the status) changed.
		kl, _ := r.kernel.links(node, key)
		d.farEnds = r.farEnds(ctx, topo)
		return requeueAfter(r.Resync-time.Since(a.at), r.writeStatus(ctx, topo, convergedStatus(topo, pod, d, kl, a.results)))
	}
	return r.apply(ctx, topo, pod, d, peers)
}

// kernelBusy tells whether err is a meshnetd's UNAVAILABLE for a busy
// kernel (its ErrorInfo), not a daemon that did not answer.
func kernelBusy(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == meshnetv1.ErrorDomain && info.GetReason() == meshnetv1.ReasonKernelBusy {
			return true
		}
	}
	return false
}

// apply sends d, topo's desired state, to the meshnetd of pod's node and
// writes the status from its answer and the node's link watch.
func (r *Reconciler) apply(ctx context.Context, topo *v1beta1.Topology, pod *corev1.Pod, d desired, peers map[string]*v1beta1.Topology) (reconcile.Result, error) {
	node, key := pod.Spec.NodeName, client.ObjectKeyFromObject(topo)
	logger := log.FromContext(ctx).WithValues("pod", key.String(), "node", node)
	r.kernel.unapplied(key)
	addr, err := r.Daemons.DaemonFor(ctx, node)
	if err != nil {
		return r.fail(ctx, topo, node, v1beta1.ReasonDaemonUnavailable, err)
	}
	conn, err := r.Pool.Conn(addr)
	if err != nil {
		return r.fail(ctx, topo, node, v1beta1.ReasonDaemonUnavailable, err)
	}
	// Sized to the work: a pod of thousands of links takes longer than
	// one of two, and a deadline it cannot meet would have every retry
	// cancelled half way.
	timeout := r.CallTimeout + time.Duration(len(d.request.Links))*PerLinkCallTimeout
	if at := d.request.GetApplyAt(); at != nil {
		timeout += max(time.Until(at.AsTime()), 0)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if d.request.GetApplyAt() != nil {
		c := &aheadCall{}
		callCtx, c.off = context.WithCancelCause(callCtx)
		r.ahead.Store(key, c)
		defer r.ahead.CompareAndDelete(key, c)
	}
	r.sent.Store(key, d.managed)
	resp, err := meshnetv1.NewLinkServiceClient(conn).ApplyPod(callCtx, d.request)
	if errors.Is(context.Cause(callCtx), errCalledOff) {
		// Computed from a fault that changed or went: the pass this
		// queues applies what holds now instead.
		logger.V(1).Info("edge sent ahead called off", "apply_at", d.request.GetApplyAt().AsTime())
		return reconcile.Result{RequeueAfter: time.Millisecond}, nil
	}
	r.refreshPeers(topo, peers, farEndsSet(resp, err))
	switch status.Code(err) {
	case codes.OK:
	case codes.Aborted:
		// A newer generation was applied already; its reconcile writes status.
		return reconcile.Result{}, nil
	case codes.Unavailable:
		if kernelBusy(err) {
			return r.fail(ctx, topo, node, v1beta1.ReasonKernelBusy, fmt.Errorf("apply on meshnetd %s: %w", addr, err))
		}
		// The daemon may be back already (a restart): reconnect at the next
		// pass rather than after gRPC's growing reconnect backoff.
		conn.ResetConnectBackoff()
		return r.fail(ctx, topo, node, v1beta1.ReasonDaemonUnavailable, fmt.Errorf("apply on meshnetd %s: %w", addr, err))
	case codes.NotFound:
		// The CNI has not wired the pod on its node yet; its ADD will.
		return requeueAfter(time.Second, r.writeStatus(ctx, topo,
			failedStatus(topo, node, false, v1beta1.ReasonLinksPending, "waiting for the pod's CNI ADD on "+node)))
	default:
		err = fmt.Errorf("apply on meshnetd %s: %w", addr, err)
		if kl, ok := r.kernel.links(node, key); ok {
			// The links as they are, and why they are not as specified.
			d.farEnds = r.farEnds(ctx, topo)
			st := convergedStatus(topo, pod, d, kl, nil)
			setConditions(&st, topo.Generation, metav1.ConditionFalse, v1beta1.ReasonApplyFailed, err.Error())
			return r.failWith(ctx, topo, st, v1beta1.ReasonApplyFailed, err)
		}
		return r.fail(ctx, topo, node, v1beta1.ReasonApplyFailed, err)
	}
	r.kernel.answered(node, key, d.request, resp)
	kl, ok := r.kernel.links(node, key)
	if !ok { // no stream (yet): the answer's own read
		kl = map[string]*meshnetv1.LinkStatus{}
		for _, l := range resp.GetLinks() {
			kl[l.GetInterface()] = l
		}
	}
	d.farEnds = r.farEnds(ctx, topo)
	st := convergedStatus(topo, pod, d, kl, resp.GetResults())
	logger.V(1).Info("applied", "links", len(d.request.Links), "generation", topo.Generation)
	return requeueAfter(r.Resync, r.writeStatus(ctx, topo, st))
}

// farEnds is, per link uid of topo with a pod at its far end, that end as
// the view of its pod's node says it (kernel.farEnd): for a VXLAN, whose
// end here has carrier whatever the far side has, the one word on whether
// the far end exists. A link whose far end is unknown (its pod not
// scheduled, its node's stream not synced) is left out.
func (r *Reconciler) farEnds(ctx context.Context, topo *v1beta1.Topology) map[int]v1beta1.FarEnd {
	out := map[int]v1beta1.FarEnd{}
	nodes := map[string]string{} // peer pod -> its node, "" when unknown
	for _, l := range topo.Spec.Links {
		if !l.HasPodPeer() {
			continue
		}
		node, seen := nodes[l.PeerPod]
		if !seen {
			pod := &corev1.Pod{}
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: topo.Namespace, Name: l.PeerPod}, pod); err == nil {
				node = pod.Spec.NodeName
			}
			nodes[l.PeerPod] = node
		}
		if node == "" {
			continue
		}
		if end, ok := r.kernel.farEnd(node, types.NamespacedName{Namespace: topo.Namespace, Name: l.PeerPod}, l.PeerIntf, l.UID); ok {
			out[l.UID] = end
		}
	}
	return out
}

// errCalledOff ends an ApplyPod sent ahead whose faults changed.
var errCalledOff = errors.New("the LinkFaults it was computed from changed")

// callOff ends topo's ApplyPod sent ahead, if one waits for its moment:
// meshnetd stops before it changes anything, so that a fault deleted or
// changed just before its edge does not make that edge all the same.
func (r *Reconciler) callOff(topo types.NamespacedName) {
	if c, ok := r.ahead.Load(topo); ok {
		c.(*aheadCall).off(errCalledOff)
	}
}

// aheadCall is an ApplyPod sent ahead, to call off (a pointer: r.ahead
// compares it).
type aheadCall struct{ off context.CancelCauseFunc }

// FaultLead is how far ahead of a LinkFault's edge the controller sends
// the change to the meshnetds (ApplyPodRequest.apply_at), which make it
// on time: the pass, the call and the queue's wait are not in the edge's
// delay. Within meshnetv1.MaxApplyAhead.
const FaultLead = 200 * time.Millisecond

// PerLinkCallTimeout is what each link of a pod adds to its ApplyPod's
// deadline. The kernel's own cost of a link change grows with the pod's
// size: taking an end down costs 0.2 ms of processor time in a namespace of
// 1,024 interfaces and 1 ms in one of 4,096 (links'
// BenchmarkKernelAdminChangeWideNetns), and an ApplyPod changes both ends
// of a VXLAN link; 10 ms leaves room for a loaded node. 2 ms had every
// retry of a 4,096-link down edit cancelled.
const PerLinkCallTimeout = 10 * time.Millisecond

// requeueAfter has the pass run again after d, or, when err is set, after
// the work queue's backoff: controller-runtime ignores d with an error.
func requeueAfter(d time.Duration, err error) (reconcile.Result, error) {
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: d}, nil
}

// fail records a failed pass and returns the error, so that the work queue
// retries with backoff.
func (r *Reconciler) fail(ctx context.Context, topo *v1beta1.Topology, node, reason string, err error) (reconcile.Result, error) {
	return r.failWith(ctx, topo, failedStatus(topo, node, true, reason, err.Error()), reason, err)
}

// failWith is fail with the status to write, which says why.
func (r *Reconciler) failWith(ctx context.Context, topo *v1beta1.Topology, st v1beta1.TopologyStatus, reason string, err error) (reconcile.Result, error) {
	r.Recorder.Eventf(topo, nil, corev1.EventTypeWarning, reason, "Apply", "%v", err)
	if werr := r.writeStatus(ctx, topo, st); werr != nil {
		return reconcile.Result{}, errors.Join(err, werr)
	}
	return reconcile.Result{}, err
}

// writeStatus server-side-applies the controller's status fields, unless
// the status says them already.
func (r *Reconciler) writeStatus(ctx context.Context, topo *v1beta1.Topology, st v1beta1.TopologyStatus) error {
	key := types.NamespacedName{Namespace: topo.Namespace, Name: topo.Name}
	if r.written.unchanged(key, topo, st, r.Resync) {
		return nil
	}
	obj := &v1beta1.Topology{Status: st}
	obj.APIVersion, obj.Kind = v1beta1.GroupVersion.String(), "Topology"
	obj.Name, obj.Namespace = topo.Name, topo.Namespace
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("encode status of %s: %w", types.NamespacedName{Namespace: topo.Namespace, Name: topo.Name}, err)
	}
	delete(u, "spec")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	keepZeroValues(u, st)
	ac := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	// A request the API server never answers must not hold a worker for
	// good; an overloaded one must not see it retried early either.
	ctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	defer cancel()
	if err := r.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		r.written.forget(key)
		return fmt.Errorf("write status of %s/%s: %w", topo.Namespace, topo.Name, err)
	}
	r.written.store(key, st)
	return nil
}

// writtenStatuses are the statuses this controller last wrote, by Topology.
// The cache may not hold the last write yet: compared with the cache, a
// link found down and then up again before the cache saw the down would be
// no change, and the status would stay down. A write older than the resync
// is compared with the cache again, which has caught up by then, so that a
// status changed behind the controller's back is rewritten.
type writtenStatuses struct{ m sync.Map }

type written struct {
	status v1beta1.TopologyStatus
	at     time.Time
}

// unchanged reports whether st is what was written for key less than
// maxAge ago, or, when nothing was, what topo's status says.
func (w *writtenStatuses) unchanged(key types.NamespacedName, topo *v1beta1.Topology, st v1beta1.TopologyStatus, maxAge time.Duration) bool {
	v, ok := w.m.Load(key)
	if !ok || time.Since(v.(written).at) >= maxAge {
		return unchanged(topo, st)
	}
	return sameStatus(v.(written).status, st)
}

func (w *writtenStatuses) store(key types.NamespacedName, st v1beta1.TopologyStatus) {
	w.m.Store(key, written{status: st, at: time.Now()})
}
func (w *writtenStatuses) forget(key types.NamespacedName) { w.m.Delete(key) }

// keepZeroValues puts back the status fields whose zero value omitempty
// drops. meshnetd owns them too from the pod's CNI ADD, so an apply that
// left them out would keep its stale value (carrier true on a link the
// controller took down); applied explicitly, the controller takes them over.
func keepZeroValues(u map[string]any, st v1beta1.TopologyStatus) {
	status, _ := u["status"].(map[string]any)
	if status == nil {
		return
	}
	status["down_links"] = int64(st.DownLinks)
	status["shaped_links"] = int64(st.ShapedLinks)
	ls, _ := status["links"].([]any)
	for i, l := range ls {
		m, ok := l.(map[string]any)
		if !ok || i >= len(st.Links) {
			continue
		}
		m["carrier"] = st.Links[i].Carrier
		m["last_error"] = st.Links[i].LastError
	}
}
