package controller

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kernelstatus"
)

// convergedStatus is the status after a successful ApplyPod: the links as
// the kernel has them.
// kernel is the pod's link ends by interface; results the last ApplyPod's.
func convergedStatus(topo *v1beta1.Topology, pod *corev1.Pod, d desired, kernel map[string]*meshnetv1.LinkStatus, results []*meshnetv1.LinkResult) v1beta1.TopologyStatus {
	pending := map[string]string{}
	for _, r := range results {
		if r.GetPhase() == meshnetv1.LinkPhase_LINK_PHASE_PENDING {
			pending[r.GetInterface()] = r.GetMessage()
		}
	}
	st := v1beta1.TopologyStatus{
		Node:               pod.Spec.NodeName,
		LinkCount:          int32(len(topo.Spec.Links)),
		RoutesManaged:      d.routesManaged,
		ObservedGeneration: topo.Generation,
		// A copy: setCondition changes it in place, and unchanged compares
		// the result with topo's status.
		Conditions: slices.Clone(topo.Status.Conditions),
	}
	var errs, waiting []string
	var unconverged []v1beta1.LinkStatus // not up as specified, physical, or held by a fault: listed at any size
	var skipped []v1beta1.SkippedLink
	for _, l := range topo.Spec.Links {
		ls := v1beta1.LinkStatus{UID: l.UID, LocalIntf: l.LocalIntf, Node: pod.Spec.NodeName}
		k, ok := kernel[l.LocalIntf]
		switch {
		case ok:
			kernelstatus.Fill(&ls, k)
			if k.GetLastError() != "" {
				errs = append(errs, fmt.Sprintf("%s: %s", l.LocalIntf, k.GetLastError()))
			}
			if ls.FarEnd = d.farEnds[l.UID]; ls.FarEnd == v1beta1.FarEndMissing {
				waiting = append(waiting, fmt.Sprintf("%s (uid %d): its far end %s:%s is not made yet", l.LocalIntf, l.UID, l.PeerPod, l.PeerIntf))
			}
			if offBridge(topo, ls) {
				waiting = append(waiting, fmt.Sprintf("%s (uid %d): not a port of bridge %s yet", l.LocalIntf, l.UID, topo.BridgeName()))
			}
		default:
			why := cmp.Or(d.waiting[l.UID], pending[l.LocalIntf], "not wired yet")
			waiting = append(waiting, fmt.Sprintf("%s (uid %d): %s", l.LocalIntf, l.UID, why))
			skipped = append(skipped, v1beta1.SkippedLink{PodName: l.PeerPod, LinkID: l.UID})
		}
		ls.Faults = d.faults[l.UID]
		if ls.Netem != nil {
			st.ShapedLinks++
		}
		if ls.State == v1beta1.LinkDown {
			st.DownLinks++
		}
		if !ok || ls.LastError != "" || ls.State != v1beta1.LinkUp || !ls.Carrier || ls.FarEnd == v1beta1.FarEndMissing || offBridge(topo, ls) || ls.Physical != nil || len(ls.Faults) > 0 {
			unconverged = append(unconverged, ls)
		}
		st.Links = append(st.Links, ls)
	}
	st.Skipped = skipped
	if msg := segmentMTUs(topo, st.Links); msg != "" {
		waiting = append(waiting, msg)
	}
	if specBytes(topo)+listedBytes(st.Links) > v1beta1.MaxListingBytes {
		// The whole list would not fit etcd's request limit beside the
		// spec.
		st.Links = unconverged[:min(len(unconverged), v1beta1.MaxListedUnconverged)]
		st.Skipped = skipped[:min(len(skipped), v1beta1.MaxListedUnconverged)]
		st.OmittedLinks = int32(len(topo.Spec.Links) - len(st.Links))
	}
	st.Managed = v1beta1.NewManagedLinks(d.managed)
	switch {
	case len(errs) > 0:
		setConditions(&st, topo.Generation, metav1.ConditionFalse, v1beta1.ReasonLinkErrors, firstOf(errs, "links failed"))
	case len(waiting) > 0:
		setCondition(&st, v1beta1.ConditionReady, topo.Generation, metav1.ConditionFalse, v1beta1.ReasonLinksPending, firstOf(waiting, "links wait"))
		setCondition(&st, v1beta1.ConditionDegraded, topo.Generation, metav1.ConditionFalse, v1beta1.ReasonLinksPending,
			fmt.Sprintf("no link failed; %d of %d links wait for their peer side (see Ready)", len(waiting), len(topo.Spec.Links)))
	default:
		msg := fmt.Sprintf("%d links as specified", len(topo.Spec.Links))
		for _, l := range topo.Spec.Links {
			if peer, ok := d.heldDown[l.UID]; ok {
				msg += fmt.Sprintf("; %s held down by %s, whose Topology sets it down", l.LocalIntf, peer)
			}
			if by := d.faults[l.UID]; len(by) > 0 {
				msg += fmt.Sprintf("; %s held by LinkFault %s", l.LocalIntf, strings.Join(by, ", "))
			}
		}
		setConditions(&st, topo.Generation, metav1.ConditionTrue, v1beta1.ReasonConverged, msg)
	}
	return st
}

// offBridge tells whether link end ls, in a pod that is an L2 segment, is
// not a port of the segment's bridge in the kernel.
func offBridge(topo *v1beta1.Topology, ls v1beta1.LinkStatus) bool {
	bridge := topo.BridgeName()
	return bridge != "" && ls.Bridge != bridge
}

// segmentMTUs says how the ports of a segment's bridge differ in MTU, empty
// when they do not (or the pod is not a segment): a bridge drops a frame
// larger than the port it leaves by, and OSPF refuses a neighbour whose
// MTU differs from its own, so a segment with a veth port (1500 by
// default) and a VXLAN one (1450 over a 1500-byte network) is not what it
// says until every link of it has one mtu.
func segmentMTUs(topo *v1beta1.Topology, ls []v1beta1.LinkStatus) string {
	if topo.BridgeName() == "" {
		return ""
	}
	byMTU := map[int32]string{}
	for _, l := range ls {
		if l.MTU != 0 && byMTU[l.MTU] == "" {
			byMTU[l.MTU] = l.LocalIntf
		}
	}
	if len(byMTU) < 2 {
		return ""
	}
	var parts []string
	for _, mtu := range slices.Sorted(maps.Keys(byMTU)) {
		parts = append(parts, fmt.Sprintf("%s %d", byMTU[mtu], mtu))
	}
	return fmt.Sprintf("the ports of bridge %s differ in MTU (%s): set one mtu on every link of the segment, at both ends", topo.BridgeName(), strings.Join(parts, ", "))
}

// listedBytes is the size of ls in JSON, as the API server stores it.
func listedBytes(ls []v1beta1.LinkStatus) int { return jsonBytes(ls) }

// specBytes is the size of topo without its status, in JSON as the API
// server stores it: its spec and metadata, managedFields among them.
func specBytes(topo *v1beta1.Topology) int {
	return jsonBytes(&v1beta1.Topology{TypeMeta: topo.TypeMeta, ObjectMeta: topo.ObjectMeta, Spec: topo.Spec})
}

func jsonBytes(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return math.MaxInt // cannot happen: it is plain data
	}
	return len(data)
}

// conditionItems is the most links a condition's message names: the API
// server refuses a message past 32,768 characters, and a pod of thousands of
// links waiting for their peers named them all, so that its status was never
// written.
const conditionItems = 20

// firstOf joins the first conditionItems of items, and says how many more
// there are ("...; and 980 more links wait").
func firstOf(items []string, more string) string {
	if len(items) <= conditionItems {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more %s", strings.Join(items[:conditionItems], "; "), len(items)-conditionItems, more)
}

// failedStatus keeps what the status said about the links and records why
// this pass could not converge them.
func failedStatus(topo *v1beta1.Topology, node string, degraded bool, reason, message string) v1beta1.TopologyStatus {
	st := *topo.Status.DeepCopy()
	st.SrcIP, st.NetNS, st.ContainerID = "", "", "" // the daemon's fields
	st.Node = node
	st.LinkCount = int32(len(topo.Spec.Links))
	st.ObservedGeneration = topo.Generation
	setCondition(&st, v1beta1.ConditionReady, topo.Generation, metav1.ConditionFalse, reason, message)
	degradedStatus := metav1.ConditionFalse
	if degraded {
		degradedStatus = metav1.ConditionTrue
	}
	setCondition(&st, v1beta1.ConditionDegraded, topo.Generation, degradedStatus, reason, message)
	return st
}

// unchanged reports whether topo's status already says st, meshnetd's
// fields aside: a resync that finds the kernel as specified then costs the
// API server no write.
func unchanged(topo *v1beta1.Topology, st v1beta1.TopologyStatus) bool {
	return sameStatus(topo.Status, st)
}

// sameStatus reports whether st says what have says, meshnetd's sandbox
// fields aside.
func sameStatus(have, st v1beta1.TopologyStatus) bool {
	st.SrcIP, st.NetNS, st.ContainerID = have.SrcIP, have.NetNS, have.ContainerID
	return equality.Semantic.DeepEqual(have, st)
}

// setConditions sets Ready to ready and Degraded to its opposite.
func setConditions(st *v1beta1.TopologyStatus, gen int64, ready metav1.ConditionStatus, reason, message string) {
	setCondition(st, v1beta1.ConditionReady, gen, ready, reason, message)
	degraded := metav1.ConditionTrue
	if ready == metav1.ConditionTrue {
		degraded = metav1.ConditionFalse
	}
	setCondition(st, v1beta1.ConditionDegraded, gen, degraded, reason, message)
}

// setCondition sets a condition of st. A transition is timed to the
// second, as the API server keeps it: the status the controller remembers
// writing (writtenStatuses) then equals the one it reads back, and a
// resync that finds nothing changed writes nothing (a time kept to the
// nanosecond made every Topology's status differ from its write, and be
// written again, at each resync).
func setCondition(st *v1beta1.TopologyStatus, typ string, gen int64, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: gen,
		LastTransitionTime: metav1.Now().Rfc3339Copy(),
	})
}
