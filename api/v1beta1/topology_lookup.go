package v1beta1

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lookups in a Topology: its links by uid, their status, the fields the
// controller manages, and its Ready condition.

// ReadyCondition is t's Ready condition when it describes generation gen
// or a later one; nil while the status is older.
func (t *Topology) ReadyCondition(gen int64) *metav1.Condition {
	for i := range t.Status.Conditions {
		if c := &t.Status.Conditions[i]; c.Type == ConditionReady && c.ObservedGeneration >= gen {
			return c
		}
	}
	return nil
}

// HasPodPeer reports whether the other end of l is a pod, with a Topology of
// its own, rather than the node's NIC (macvlan) or a physical device.
func (l *Link) HasPodPeer() bool { return l.PeerPod != PeerHost && l.LinkOptions == nil }

// Link returns the spec's link uid, nil when t is nil or has none.
func (t *Topology) Link(uid int) *Link {
	if t == nil {
		return nil
	}
	for i := range t.Spec.Links {
		if t.Spec.Links[i].UID == uid {
			return &t.Spec.Links[i]
		}
	}
	return nil
}

// AsSpecified reports whether the status leaves link uid out because it is
// up, with carrier, as specified (OmittedLinks): with fewer than
// MaxListedUnconverged links listed, every other link is among them.
func (t *Topology) AsSpecified(uid int) bool {
	return t.shortened() && t.LinkStatus(uid) == nil
}

// shortened reports whether the status lists only the links not up as
// specified, all of them: every link it leaves out is up as specified.
func (t *Topology) shortened() bool {
	return t != nil && t.Status.OmittedLinks > 0 && len(t.Status.Links) < MaxListedUnconverged
}

// LinkStatusIndex answers LinkStatus and AsSpecified for every link of a
// Topology in constant time, for readers that look up each link of a wide
// one (LinkStatus scans the list).
// +kubebuilder:object:generate=false
type LinkStatusIndex struct {
	t     *Topology
	byUID map[int]*LinkStatus
}

// LinkStatuses indexes t's status by link uid; t may be nil.
func (t *Topology) LinkStatuses() LinkStatusIndex {
	x := LinkStatusIndex{t: t}
	if t != nil {
		x.byUID = make(map[int]*LinkStatus, len(t.Status.Links))
		for i := range t.Status.Links {
			x.byUID[t.Status.Links[i].UID] = &t.Status.Links[i]
		}
	}
	return x
}

// Of is the status of link uid, as Topology.LinkStatus.
func (x LinkStatusIndex) Of(uid int) *LinkStatus { return x.byUID[uid] }

// AsSpecified is Topology.AsSpecified.
func (x LinkStatusIndex) AsSpecified(uid int) bool { return x.t.shortened() && x.byUID[uid] == nil }

// LinkManagedFields are the spec fields of link uid that the controller
// applied (status.managed), in the order state, mtu, netem.
func (t *Topology) LinkManagedFields(uid int) []string {
	return t.Status.Managed.ByUID()[uid]
}

// The names of the spec fields in ManagedLinks.
const (
	ManagedState = "state"
	ManagedMTU   = "mtu"
	ManagedNetem = "netem"
)

// fields pairs each field's name with its uids.
func (m *ManagedLinks) fields() []struct {
	name string
	uids *[]int
} {
	return []struct {
		name string
		uids *[]int
	}{{ManagedState, &m.State}, {ManagedMTU, &m.MTU}, {ManagedNetem, &m.Netem}}
}

// ByUID turns m around: the fields applied, by link uid, each in the
// order state, mtu, netem. A nil m has none.
func (m *ManagedLinks) ByUID() map[int][]string {
	out := map[int][]string{}
	if m == nil {
		return out
	}
	for _, f := range m.fields() {
		for _, uid := range *f.uids {
			out[uid] = append(out[uid], f.name)
		}
	}
	return out
}

// NewManagedLinks is the ManagedLinks of fields applied by link uid (as
// ByUID gives them), the uids in order; nil when there are none.
func NewManagedLinks(byUID map[int][]string) *ManagedLinks {
	m := &ManagedLinks{}
	for _, uid := range slices.Sorted(maps.Keys(byUID)) {
		for _, f := range m.fields() {
			if slices.Contains(byUID[uid], f.name) {
				*f.uids = append(*f.uids, uid)
			}
		}
	}
	if m.State == nil && m.MTU == nil && m.Netem == nil {
		return nil
	}
	return m
}

// LinkStatus returns the status of link uid, nil when t is nil or has none.
func (t *Topology) LinkStatus(uid int) *LinkStatus {
	if t == nil {
		return nil
	}
	for i := range t.Status.Links {
		if t.Status.Links[i].UID == uid {
			return &t.Status.Links[i]
		}
	}
	return nil
}
