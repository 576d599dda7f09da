package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LinkFault is a fault in time on links of a namespace's pods: their cable
// pulled (state down) or their traffic shaped (netem) for a window of
// duration, once or every period, after which each link goes back to what
// its Topology says. It lives in the API server, not in a process: a
// restart of meshnetd or of the controller in a window ends it on time all
// the same. Deleting it, or suspending it, gives its links back to their
// Topologies at once.
//
// Faults overlay Topologies: during a window a link is down when its
// Topology or any fault holding it says down (a cable pulled at one end is
// down at both, as with a Topology's state), and shaped by the netem of
// the fault holding it whose window began last (ties: the first name),
// else by its Topology's.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=linkfaults,singular=linkfault,shortName=fault,scope=Namespaced
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Links",type=integer,JSONPath=`.status.held_links`
// +kubebuilder:printcolumn:name="Windows",type=integer,JSONPath=`.status.windows`
// +kubebuilder:printcolumn:name="Last edge",type=date,JSONPath=`.status.last_edge`
// +kubebuilder:printcolumn:name="Next edge",type=string,JSONPath=`.status.next_edge`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LinkFault struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LinkFaultSpec   `json:"spec"`
	Status LinkFaultStatus `json:"status,omitempty"`
}

// LinkFaultList is a list of LinkFault objects.
//
// +kubebuilder:object:root=true
type LinkFaultList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LinkFault `json:"items"`
}

// MaxFaultLinks is the most links one LinkFault holds (the MaxItems marker
// on LinkFaultSpec.Links says it again; deploy/crd's tests check they
// agree): every router of a large lab at once, as a fibre cut does.
const MaxFaultLinks = 1024

// LinkFaultSpec says which links, what happens to them and when.
//
// +kubebuilder:validation:XValidation:rule="has(self.state) || has(self.netem)",message="a fault needs state, netem or both",fieldPath=".state",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="has(self.links) != has(self.selector)",message="a fault names its links or selects Topologies by label: set one of links and selector",fieldPath=".links"
// +kubebuilder:validation:XValidation:rule="!has(self.interfaces) || has(self.selector)",message="interfaces go with a selector",fieldPath=".interfaces"
// +kubebuilder:validation:XValidation:rule="!has(self.period) || duration(self.period) > duration(self.duration)",message="must be longer than duration: a window ends before the next begins",fieldPath=".period"
// +kubebuilder:validation:XValidation:rule="!has(self.count) || self.count == 1 || has(self.period) || has(self.schedule)",message="more than one window needs period or schedule",fieldPath=".count"
// +kubebuilder:validation:XValidation:rule="!(has(self.period) && has(self.schedule))",message="period and schedule cannot both be set: windows begin every period, or at the times schedule names",fieldPath=".schedule"
// +kubebuilder:validation:XValidation:rule="!has(self.schedule) || !has(self.count) || self.count <= 10000",message="at most 10000 windows with a schedule",fieldPath=".count"
type LinkFaultSpec struct {
	// Links are the pods' interfaces the fault holds, each named by its
	// pod and its interface in the pod, as in the pod's Topology. A fault
	// has links or a selector.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	Links []FaultLink `json:"links,omitempty"`

	// Selector picks Topologies of the fault's namespace by their labels;
	// the fault holds the links of each that Interfaces names, or all of
	// them when Interfaces is empty (every cable of a router, as a power
	// loss takes them). A Topology labelled later is held from then on.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// Interfaces names, with a selector, the interfaces of each selected
	// Topology the fault holds (local_intf in the Topology).
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[^/\s]+$`
	// +listType=set
	Interfaces []string `json:"interfaces,omitempty"`

	// State down pulls the cables of the links for each window: both ends
	// lose carrier.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == 'down'",message="must be down: a fault pulls cables; the end of its window puts them back"
	State *LinkState `json:"state,omitempty"`

	// Netem shapes the traffic leaving each link's interface for each
	// window, in place of its Topology's netem.
	// +optional
	Netem *Netem `json:"netem,omitempty"`

	// Duration is how long each window lasts: "30s", "2m".
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms')",message="must be at least 10ms"
	Duration Duration `json:"duration"`

	// Start is when the first window begins; unset, when the fault was
	// created. kubectl meshnet sets it to the moment of the command.
	// +optional
	Start *metav1.MicroTime `json:"start,omitempty"`

	// Period starts a window every period from start: "10s" with a
	// duration of "2s" flaps a link down 2 s, up 8 s. Unset, there is one
	// window.
	// +optional
	Period *Duration `json:"period,omitempty"`

	// Schedule starts a window at each time it names, in cron's format as
	// a CronJob's schedule ("*/10 * * * *", "0 3 * * 1-5", "@hourly"), in
	// UTC, from start on. A time that comes while a window is open is
	// skipped. At most MaxScheduledWindows windows from start: a fault
	// past them is refused (recreate it, or move its start).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('TZ=') && !self.startsWith('CRON_TZ=')",message="schedules are in UTC: no TZ= or CRON_TZ="
	Schedule *string `json:"schedule,omitempty"`

	// Count is how many windows there are in all; unset with a period or a
	// schedule, windows follow until the fault is deleted or suspended.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Count *int32 `json:"count,omitempty"`

	// Suspend gives the links back to their Topologies and starts no
	// window until it is false again; windows missed meanwhile are skipped.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// FaultLink is one interface of one pod of the fault's namespace.
type FaultLink struct {
	// Pod is the pod's name, the name of its Topology.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// Interface is the link's interface in the pod, local_intf in the
	// pod's Topology.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	Interface string `json:"interface"`
}

// String is the link as kubectl meshnet names it: pod:interface.
func (l FaultLink) String() string { return l.Pod + ":" + l.Interface }

// FaultPhase is where a LinkFault is in its schedule.
// +kubebuilder:validation:Enum=Pending;Active;Waiting;Completed;Suspended
type FaultPhase string

const (
	// FaultPending: its first window has not begun.
	FaultPending FaultPhase = "Pending"
	// FaultActive: in a window, holding its links.
	FaultActive FaultPhase = "Active"
	// FaultWaiting: between two windows.
	FaultWaiting FaultPhase = "Waiting"
	// FaultCompleted: its last window is over.
	FaultCompleted FaultPhase = "Completed"
	// FaultSuspended: spec.suspend.
	FaultSuspended FaultPhase = "Suspended"
)

// LinkFaultStatus is where the fault is in its schedule, written by the
// controller at each edge.
type LinkFaultStatus struct {
	// ObservedGeneration is the generation of the spec this status is of.
	// +optional
	ObservedGeneration int64 `json:"observed_generation,omitempty"`
	// Phase is where the fault is in its schedule.
	// +optional
	Phase FaultPhase `json:"phase,omitempty"`
	// Windows counts the windows begun so far.
	// +optional
	Windows int32 `json:"windows"`
	// HeldLinks counts the links the fault holds now: its links that
	// exist in their pods' Topologies during a window, else 0.
	// +optional
	HeldLinks int32 `json:"held_links"`
	// Missing names the fault's links that no Topology lists.
	// +optional
	Missing []string `json:"missing,omitempty"`
	// LastEdge is when the last window began or ended.
	// +optional
	LastEdge *metav1.MicroTime `json:"last_edge,omitempty"`
	// NextEdge is when the next window begins or the current one ends.
	// +optional
	NextEdge *metav1.MicroTime `json:"next_edge,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
