package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/links"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/podstore"
)

// statusWorkers write Topology statuses concurrently; one pod's status is
// never written by two at once (the queue hands a key to one worker).
const statusWorkers = 2

// Run writes the Topology status of pods whose links changed, read back
// from the kernel, until ctx ends. ADD does not wait for it: the status
// follows within the API server's round trip.
func (w *Wirer) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.status.ShutDown()
	}()
	var wg sync.WaitGroup
	for range statusWorkers {
		wg.Go(func() {
			for {
				k, quit := w.status.Get()
				if quit {
					return
				}
				if err := w.writeStatus(ctx, k); err != nil && ctx.Err() == nil {
					w.log.Warn("topology status not written; retrying", "pod", k.String(), "error", err)
					w.status.AddRateLimited(k)
				} else {
					w.status.Forget(k)
				}
				w.status.Done(k)
			}
		})
	}
	wg.Wait()
}

// writeStatus patches the status of a pod's Topology with what this node
// has for it.
func (w *Wirer) writeStatus(ctx context.Context, k podstore.Key) error {
	topo, err := w.topology(ctx, k)
	if err != nil || topo == nil {
		return err
	}
	rec, wiredHere := w.cfg.Store.Get(k)
	if !wiredHere && topo.Status.Node != "" && topo.Status.Node != w.cfg.NodeName {
		return nil // the pod lives on another node now; its status is that node's
	}
	st := w.buildStatus(k, topo, rec, wiredHere)
	for f, v := range st {
		if v == nil {
			delete(st, f) // left out of an apply, a field meshnetd owned is removed
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode Topology %s status: %w", k, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("encode Topology %s status: %w", k, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": fields}}
	u.SetAPIVersion(v1beta1.GroupVersion.String())
	u.SetKind("Topology")
	u.SetNamespace(k.Namespace)
	u.SetName(k.Name)
	// Server-side apply: meshnetd and the controller each own the fields
	// they write, so neither wipes the other's (the controller's
	// links[].managed, for one).
	if err := w.cfg.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(StatusFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply Topology %s status: %w", k, err)
	}
	return nil
}

// StatusFieldOwner is meshnetd's server-side-apply manager of Topology status.
const StatusFieldOwner = "meshnetd"

// buildStatus is the status fields wiring owns; nil values are fields it
// no longer sets.
func (w *Wirer) buildStatus(k podstore.Key, topo *v1beta1.Topology, rec podstore.Pod, wiredHere bool) map[string]any {
	out := map[string]any{
		"src_ip": nil, "net_ns": nil, "container_id": nil, "node": nil,
		"skipped": nil, "links": nil, "link_count": nil, "shaped_links": nil, "down_links": nil,
	}
	conds := append([]metav1.Condition(nil), topo.Status.Conditions...)
	if !wiredHere {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "NotWired", Message: "the pod has no sandbox wired by meshnet", ObservedGeneration: topo.Generation})
		meta.RemoveStatusCondition(&conds, v1beta1.ConditionDegraded)
		out["conditions"] = conds
		return out
	}
	out["src_ip"], out["net_ns"], out["container_id"], out["node"] = w.cfg.NodeIP.String(), rec.Netns, rec.ContainerID, w.cfg.NodeName

	byUID := map[int]podstore.Link{}
	for _, l := range rec.Links {
		byUID[l.UID] = l
	}
	var (
		statuses []v1beta1.LinkStatus
		skipped  []v1beta1.SkippedLink
		pending  []string
		errs     []string
		shaped   int32
		down     int32
	)
	ns, nsErr := links.OpenNetns(rec.Netns)
	if nsErr == nil {
		defer ns.Close()
	}
	for _, l := range topo.Spec.Links {
		r := byUID[l.UID]
		lastErr := w.getLastErr(k, l.UID)
		var s links.State
		var err error
		if nsErr != nil {
			err = nsErr
		} else {
			s, err = links.ReadState(ns, l.LocalIntf)
		}
		if err != nil {
			skipped = append(skipped, v1beta1.SkippedLink{PodName: l.PeerPod, LinkID: l.UID})
			pending = append(pending, fmt.Sprint(l.UID))
			if lastErr != "" {
				statuses = append(statuses, v1beta1.LinkStatus{UID: l.UID, LocalIntf: l.LocalIntf, Kind: v1beta1.LinkKind(r.Kind), Node: w.cfg.NodeName, LastError: lastErr})
				errs = append(errs, fmt.Sprintf("link %d: %s", l.UID, lastErr))
			}
			continue
		}
		ls := v1beta1.LinkStatus{
			UID: l.UID, LocalIntf: l.LocalIntf, Kind: v1beta1.LinkKind(r.Kind), Node: w.cfg.NodeName,
			State: v1beta1.LinkUp, Carrier: s.Carrier, MTU: int32(s.MTU), LastError: lastErr,
		}
		if !s.AdminUp {
			ls.State = v1beta1.LinkDown
			down++
		}
		if o := l.LinkOptions; o != nil {
			ls.Physical = &v1beta1.PhysicalPeer{VNI: o.VNI, LocalVTEP: w.cfg.NodeIP.String(), RemoteVTEP: o.RemoteVTEP, UDPPort: int32(udpPort(o))}
		}
		if l.Netem != nil && lastErr == "" {
			if n := readNetem(rec.Netns, l.LocalIntf); n != nil {
				ls.Netem = n
				shaped++
			}
		}
		if lastErr != "" {
			errs = append(errs, fmt.Sprintf("link %d: %s", l.UID, lastErr))
		}
		statuses = append(statuses, ls)
	}
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].UID < statuses[j].UID })
	count := int32(0)
	for _, s := range statuses {
		if s.MTU != 0 {
			count++
		}
	}
	if len(skipped) > 0 {
		out["skipped"] = skipped
	}
	if len(statuses) > 0 {
		out["links"] = statuses
	}
	if count > 0 {
		out["link_count"] = count
	}
	if shaped > 0 {
		out["shaped_links"] = shaped
	}
	if down > 0 {
		out["down_links"] = down
	}
	ready := metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Wired",
		Message: "every link is wired", ObservedGeneration: topo.Generation}
	if len(pending) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, "LinksPending"
		ready.Message = "links waiting for their peer: " + strings.Join(pending, ", ")
	}
	meta.SetStatusCondition(&conds, ready)
	if len(errs) > 0 {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue,
			Reason: "LinkErrors", Message: strings.Join(errs, "; "), ObservedGeneration: topo.Generation})
	} else {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionFalse,
			Reason: "NoErrors", Message: "no link failed", ObservedGeneration: topo.Generation})
	}
	out["conditions"] = conds
	return out
}

// readNetem is meshnet's shaping on an interface as the kernel has it, nil
// when there is none.
func readNetem(nsPath, dev string) *v1beta1.Netem {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil
	}
	defer h.Close()
	st, err := netem.Get(h, dev)
	if err != nil || st.Owner != netem.OwnerMeshnet {
		return nil
	}
	return APINetem(st.Spec)
}
