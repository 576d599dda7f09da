package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology is the wiring of one pod: one object per pod, named like the pod.
// It is wire compatible with meshnet-cni's Topology; every field beyond
// meshnet-cni's is optional.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=topologies,singular=topology,shortName=topo,scope=Namespaced
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Links",type=integer,JSONPath=`.status.link_count`
// +kubebuilder:printcolumn:name="Shaped",type=integer,JSONPath=`.status.shaped_links`
// +kubebuilder:printcolumn:name="Down",type=integer,JSONPath=`.status.down_links`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Topology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TopologySpec   `json:"spec,omitempty"`
	Status TopologyStatus `json:"status,omitempty"`
}

// TopologyList is a list of Topology objects.
//
// +kubebuilder:object:root=true
type TopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topology `json:"items"`
}

// The CRD's bounds on a Topology's lists (the MaxItems markers below, which
// cannot name a constant; deploy/crd's tests check they agree). Whatever
// takes a pod's links or routes from elsewhere (a topology file, the gRPC
// API) holds to the same.
const (
	MaxLinks  = 10000
	MaxRoutes = 256
)

// VXLAN's numbers, which the markers on LinkOptions repeat: a VNI is 24
// bits, and udp_port is the IANA VXLAN port when unset.
const (
	MaxVNI           = 1<<24 - 1
	DefaultVXLANPort = 4789
)

// MaxLinksWithLinkLocal is the most links a Topology may have while its
// links get IPv6 link-local addresses (ipv6_link_local unset or true); the
// CEL rule on TopologySpec says it again (deploy/crd's tests check they
// agree). The kernel's IPv6 set-up of an interface (its multicast and
// link-local routes, duplicate address detection, MLD reports) walks every
// interface of the namespace, so a pod's wiring takes time that grows with
// the square of its links: two pods of 4,096 links wire in 31 to 36 s, of
// 10,000 in 4 min 11 s (past the kubelet's 4 minutes for a sandbox, so the
// pod never starts), and 64 s without link-local addresses.
const MaxLinksWithLinkLocal = 4096

// A Topology's status must fit beside its spec in etcd's request limit
// (1.5 MiB by default, for the whole object): the spec of 4,096 links with
// addresses takes 0.5 MB, twice that with its managedFields (which name
// every field of every link), and a status listing each link about 120
// bytes a link, more with netem. So status.links lists every link while
// the Topology with that list stays within MaxListingBytes of JSON (1,024
// links with addresses do, 4,096 do not); past that, only the links
// not up as specified (not wired yet, failed, down, or without carrier),
// those a LinkFault holds, and the physical ones (whose status says how to set up the device's
// side), at most MaxListedUnconverged of them, and status.omitted_links
// counts the rest: links up, with carrier, as specified. What is left of
// etcd's limit holds the conditions, status.managed and that list.
const (
	MaxListingBytes      = 1 << 20
	MaxListedUnconverged = 1024
)

// A namespace's consent to links that touch the node, which only a cluster
// admin gives (a namespace's editors cannot change its Namespace object);
// the ValidatingAdmissionPolicy in deploy/admission enforces it. A macvlan
// (peer_pod localhost) or a physical peer (link_options) needs the label
// HostLinksLabel=HostLinksAllowed on the namespace; a macvlan's NIC must be
// listed in HostInterfacesAnnotation, a physical peer's VTEP be within a
// prefix of RemoteVTEPsAnnotation and its UDP port listed in
// VXLANPortsAnnotation (4789 when absent). Each list is comma-separated.
const (
	HostLinksLabel           = "meshnet.networkop.co.uk/host-links"
	HostLinksAllowed         = "allowed"
	HostInterfacesAnnotation = "meshnet.networkop.co.uk/host-interfaces"
	RemoteVTEPsAnnotation    = "meshnet.networkop.co.uk/remote-vteps"
	VXLANPortsAnnotation     = "meshnet.networkop.co.uk/vxlan-ports"
)

// TopologySpec is the desired wiring and runtime state of a pod's links.
//
// +kubebuilder:validation:XValidation:rule="!has(self.links) || size(self.links) <= 4096 || (has(self.ipv6_link_local) && !self.ipv6_link_local)",message="more than 4096 links need ipv6_link_local: false: the kernel's IPv6 set-up of each link-local address walks all of the pod's interfaces, and 10,000 links with them take longer to wire than the 4 minutes a pod's sandbox gets",fieldPath=".ipv6_link_local",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.bridge) || !has(self.links) || self.links.all(l, !has(l.local_ip) || size(l.local_ip) == 0)",message="the links of a pod with bridge are the bridge's ports, which have no address: remove local_ip from them (give the routers on the segment their addresses)",fieldPath=".bridge"
// +kubebuilder:validation:XValidation:rule="!has(self.bridge) || !has(self.links) || !self.links.exists(l, l.local_intf == (has(self.bridge.name) ? self.bridge.name : 'br0'))",message="the bridge's name is a link's local_intf: name one or the other differently",fieldPath=".bridge.name"
type TopologySpec struct {
	// Links are the pod's point-to-point links, keyed by uid. Both ends of a
	// link carry the same uid in their own pod's Topology.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=10000
	Links []Link `json:"links,omitempty"`

	// Routes are static routes meshnet keeps in the pod's network namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Routes []Route `json:"routes,omitempty"`

	// IPv6LinkLocal false makes the pod's links without an IPv6 link-local
	// address (the kernel's addr_gen_mode none): no duplicate address
	// detection or MLD report for each. Addresses in local_ip, IPv6 ones
	// too, are still set. Unset or true keeps the kernel's way, which
	// OSPFv3, IS-IS and BGP unnumbered need; more than
	// MaxLinksWithLinkLocal links require false. It applies to links as
	// they are made: at pod creation, and to a link made again.
	// +optional
	IPv6LinkLocal *bool `json:"ipv6_link_local,omitempty"`

	// Bridge makes the pod an L2 segment, as a containerlab bridge node
	// is: meshnetd makes every link end of the pod a port of one Linux
	// bridge in the pod's network namespace, which learns MAC addresses
	// and floods broadcasts to every port. The routers on the segment are
	// the pods at the links' other ends, each wired to this pod by an
	// ordinary link, on any node; a port's link takes state, netem,
	// LinkFaults and captures as any link does. The ports have no
	// addresses and no IPv6 link-local ones. The pod runs nothing of its
	// own: a pause container is enough.
	// +optional
	Bridge *Bridge `json:"bridge,omitempty"`
}

// DefaultBridgeName is the name of a segment's bridge device when its
// Topology does not name it.
const DefaultBridgeName = "br0"

// Bridge is the Linux bridge of a pod that is an L2 segment.
type Bridge struct {
	// Name of the bridge device in the pod; br0 when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	Name string `json:"name,omitempty"`
}

// BridgeName is the name of the pod's segment bridge, empty when the pod
// is not a segment (or has no Topology).
func (t *Topology) BridgeName() string {
	switch {
	case t == nil || t.Spec.Bridge == nil:
		return ""
	case t.Spec.Bridge.Name != "":
		return t.Spec.Bridge.Name
	}
	return DefaultBridgeName
}

// LinkLocalIPv6 tells whether the pod's links get IPv6 link-local
// addresses: unless spec.ipv6_link_local is false. A missing Topology
// (nil) keeps the kernel's default.
func (t *Topology) LinkLocalIPv6() bool {
	return t == nil || t.Spec.IPv6LinkLocal == nil || *t.Spec.IPv6LinkLocal
}

// Link is one end of a point-to-point link, seen from this pod.
//
// +kubebuilder:validation:XValidation:rule="!has(self.link_options) || self.peer_pod != 'localhost'",message="link_options (a physical peer) cannot be combined with peer_pod localhost (a macvlan to a host NIC)"
type Link struct {
	// UID identifies the link; both ends use the same value.
	// +kubebuilder:validation:Minimum=0
	UID int `json:"uid"`

	// PeerPod is the name of the pod at the other end. "localhost" makes the
	// link a macvlan to the host NIC named by peer_intf. With link_options it
	// names the physical device, which is not a pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PeerPod string `json:"peer_pod"`

	// LocalIntf is the interface name inside this pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	LocalIntf string `json:"local_intf"`

	// PeerIntf is the interface name at the other end.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	PeerIntf string `json:"peer_intf"`

	// LocalIP is the address of local_intf, in CIDR notation (10.0.0.1/24).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == '' || isCIDR(self)",message="must be an address in CIDR notation, like 10.0.0.1/24"
	LocalIP string `json:"local_ip,omitempty"`

	// PeerIP is the address of peer_intf, in CIDR notation.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == '' || isCIDR(self)",message="must be an address in CIDR notation, like 10.0.0.2/24"
	PeerIP string `json:"peer_ip,omitempty"`

	// MTU of local_intf (and of the peer's end of a veth). A VXLAN link
	// defaults to its parent's MTU less the encapsulation overhead.
	// +optional
	// +kubebuilder:validation:Minimum=68
	// +kubebuilder:validation:Maximum=65535
	MTU *int32 `json:"mtu,omitempty"`

	// State is the link's administrative state; down emulates a cable pull.
	// Both ends' Topologies may set it: the link is down when either says
	// down.
	// +optional
	State *LinkState `json:"state,omitempty"`

	// Netem shapes the traffic leaving local_intf. Shaping both directions
	// takes a netem block at each end.
	// +optional
	Netem *Netem `json:"netem,omitempty"`

	// LinkOptions make the peer a physical device outside the cluster,
	// reached over VXLAN: there is no pod for it.
	// +optional
	LinkOptions *LinkOptions `json:"link_options,omitempty"`
}

// LinkState is the administrative state of a link.
// +kubebuilder:validation:Enum=up;down
type LinkState string

const (
	LinkUp   LinkState = "up"
	LinkDown LinkState = "down"
)

// FarEnd is a link's other end as the meshnetd of its own node reports it.
// +kubebuilder:validation:Enum=up;down;missing
type FarEnd string

const (
	// FarEndUp: the far end exists and is administratively up.
	FarEndUp FarEnd = "up"
	// FarEndDown: the far end exists and is administratively down.
	FarEndDown FarEnd = "down"
	// FarEndMissing: the far end's node has no such end in the peer
	// pod's wired sandbox.
	FarEndMissing FarEnd = "missing"
)

// Netem is tc-netem shaping in human units: durations like "50ms" or "1.5s",
// percentages like "0.5%" or "0.5", rates like "100mbit" or "1gbit".
//
// A field that needs another needs it present (netemconv.FromTopology checks
// the same); a base of zero ("loss: 0%") makes what depends on it a no-op.
//
// +kubebuilder:validation:XValidation:rule="!has(self.jitter) || has(self.delay)",message="jitter needs delay"
// +kubebuilder:validation:XValidation:rule="!has(self.delay_correlation) || has(self.jitter)",message="delay_correlation needs jitter (it correlates the jitter)"
// +kubebuilder:validation:XValidation:rule="!has(self.distribution) || (has(self.delay) && has(self.jitter))",message="distribution needs delay and jitter"
// +kubebuilder:validation:XValidation:rule="!has(self.loss_correlation) || has(self.loss)",message="loss_correlation needs loss"
// +kubebuilder:validation:XValidation:rule="!has(self.duplicate_correlation) || has(self.duplicate)",message="duplicate_correlation needs duplicate"
// +kubebuilder:validation:XValidation:rule="!has(self.corrupt_correlation) || has(self.corrupt)",message="corrupt_correlation needs corrupt"
// +kubebuilder:validation:XValidation:rule="!has(self.reorder) || has(self.delay)",message="reorder needs delay"
// +kubebuilder:validation:XValidation:rule="!has(self.reorder_correlation) || has(self.reorder)",message="reorder_correlation needs reorder"
// +kubebuilder:validation:XValidation:rule="!has(self.gap) || has(self.reorder)",message="gap needs reorder"
type Netem struct {
	// Delay added to every packet; more than 0 (leave it out for none), at
	// most 1h (queued packets are kernel memory held that long).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be more than 0s; leave delay out for none"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="must be at most 1h, meshnet's cap (queued packets are kernel memory held that long)"
	Delay *Duration `json:"delay,omitempty"`
	// Jitter varies the delay by up to this much (at most 2.147483647s, the kernel's cap).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2147483647ns')",message="must be at most 2.147483647s, the kernel's cap"
	Jitter *Duration `json:"jitter,omitempty"`
	// +optional
	DelayCorrelation *Percent `json:"delay_correlation,omitempty"`
	// Distribution of the jitter.
	// +optional
	Distribution *Distribution `json:"distribution,omitempty"`
	// +optional
	Loss *Percent `json:"loss,omitempty"`
	// +optional
	LossCorrelation *Percent `json:"loss_correlation,omitempty"`
	// +optional
	Duplicate *Percent `json:"duplicate,omitempty"`
	// +optional
	DuplicateCorrelation *Percent `json:"duplicate_correlation,omitempty"`
	// +optional
	Corrupt *Percent `json:"corrupt,omitempty"`
	// +optional
	CorruptCorrelation *Percent `json:"corrupt_correlation,omitempty"`
	// Reorder sends this share of packets at once, the rest delayed.
	// +optional
	Reorder *Percent `json:"reorder,omitempty"`
	// +optional
	ReorderCorrelation *Percent `json:"reorder_correlation,omitempty"`
	// Gap reorders every gap-th packet.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Gap *int32 `json:"gap,omitempty"`
	// Rate limits the link's egress.
	// +optional
	Rate *Rate `json:"rate,omitempty"`
	// Limit is netem's queue length in packets, at most 65536 (a queue is
	// kernel memory charged to no pod: about 150 MiB of full-size frames at
	// the cap). Unset, meshnet sizes it for delay x rate; netem's own
	// default of 1000 drops packets on long delays.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	Limit *int32 `json:"limit,omitempty"`
}

// Duration is a Go duration string: "50ms", "1.5s", "250us".
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
type Duration string

// Percent is a percentage from 0 to 100, with or without "%": "0.5%", "30".
// +kubebuilder:validation:MaxLength=16
// +kubebuilder:validation:Pattern=`^(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)%?$`
type Percent string

// Rate is a bit rate ("100mbit", "1gbit", "64kbit") or byte rate ("10mbps"), as tc writes them.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?[kKmMgGtT]?(bit|bps)$`
type Rate string

// Distribution is the shape of netem's jitter.
// +kubebuilder:validation:Enum=uniform;normal;pareto;paretonormal
type Distribution string

const (
	DistributionUniform      Distribution = "uniform"
	DistributionNormal       Distribution = "normal"
	DistributionPareto       Distribution = "pareto"
	DistributionParetoNormal Distribution = "paretonormal"
)

// LinkOptions describe a VXLAN link to a physical device outside the cluster.
type LinkOptions struct {
	// RemoteVTEP is the physical device's VTEP address.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	RemoteVTEP string `json:"remote_vtep"`
	// VNI is the VXLAN network identifier the physical side uses.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16777215
	VNI int32 `json:"vni"`
	// UDPPort is the VXLAN destination port; 4789 when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	UDPPort *int32 `json:"udp_port,omitempty"`
}

// Port is the VXLAN destination port: udp_port, DefaultVXLANPort when
// unset.
func (o *LinkOptions) Port() int32 {
	if o.UDPPort == nil {
		return DefaultVXLANPort
	}
	return *o.UDPPort
}

// Route is a static route in the pod's network namespace.
//
// +kubebuilder:validation:XValidation:rule="has(self.gw) || has(self.dev)",message="a route needs gw or dev"
type Route struct {
	// Dst is the destination in CIDR notation.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a destination in CIDR notation, like 192.0.2.0/24"
	Dst string `json:"dst"`
	// Gw is the next hop's address.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gw string `json:"gw,omitempty"`
	// Dev is the outgoing interface.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	Dev string `json:"dev,omitempty"`
}

// TopologyStatus is what the node really has. The first four fields are
// meshnet-cni's and mean the same.
type TopologyStatus struct {
	// Skipped lists links this pod left for its peer to complete.
	// +optional
	Skipped []SkippedLink `json:"skipped,omitempty"`
	// SrcIP is the IP of the node hosting the pod (the VXLAN VTEP).
	// +optional
	SrcIP string `json:"src_ip,omitempty"`
	// NetNS is the pod's network namespace path.
	// +optional
	NetNS string `json:"net_ns,omitempty"`
	// ContainerID is the pod sandbox's container ID.
	// +optional
	ContainerID string `json:"container_id,omitempty"`

	// Node is the name of the node hosting the pod.
	// +optional
	Node string `json:"node,omitempty"`
	// LinkCount, ShapedLinks and DownLinks summarise Links for kubectl get.
	// +optional
	LinkCount int32 `json:"link_count,omitempty"`
	// +optional
	ShapedLinks int32 `json:"shaped_links,omitempty"`
	// +optional
	DownLinks int32 `json:"down_links,omitempty"`
	// Links are the links as read back from the kernel: all of them, or,
	// when they would take the Topology past 1 MiB, those not up as
	// specified (see OmittedLinks). One writer (the controller) writes the list whole:
	// atomic, its managedFields entry is one field, not one per link, which
	// costs the API server less per write.
	// +optional
	// +listType=atomic
	Links []LinkStatus `json:"links,omitempty"`
	// OmittedLinks counts the links Links leaves out: when listing every
	// link would take the Topology past 1 MiB of JSON (thousands of links),
	// the status lists only the links not up as specified (not wired yet,
	// failed, down, or without carrier) and the physical ones, at most
	// 1,024, so that it fits etcd's request limit beside the spec. While
	// fewer than 1,024 are listed, a link left out is up, with carrier, as
	// specified.
	// +optional
	OmittedLinks int32 `json:"omitted_links,omitempty"`
	// Managed names, by spec field, the links (by uid) whose field the
	// controller applied, so that removing the field from the spec undoes
	// it, while fields the spec never had stay with runtime callers
	// (grpcurl, REST). It is kept apart from Links, which may omit links.
	// +optional
	Managed *ManagedLinks `json:"managed,omitempty"`
	// Conditions: Ready (every link is as specified) and Degraded (some link
	// failed; the reason says which).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// RoutesManaged is true once the controller applied spec.routes, so that
	// removing them removes the routes.
	// +optional
	RoutesManaged bool `json:"routes_managed,omitempty"`
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SkippedLink is a link whose creation this pod left to its peer.
type SkippedLink struct {
	PodName string `json:"pod_name"`
	LinkID  int    `json:"link_id"`
}

// LinkKind is how a link is made in the kernel.
// +kubebuilder:validation:Enum=veth;vxlan;phy;macvlan
type LinkKind string

const (
	LinkKindVeth    LinkKind = "veth"
	LinkKindVXLAN   LinkKind = "vxlan"
	LinkKindPhy     LinkKind = "phy"
	LinkKindMacvlan LinkKind = "macvlan"
)

// LinkStatus is one link as the kernel has it.
type LinkStatus struct {
	UID       int      `json:"uid"`
	LocalIntf string   `json:"local_intf"`
	Kind      LinkKind `json:"kind,omitempty"`
	// Node hosting this end.
	// +optional
	Node string `json:"node,omitempty"`
	// State is the administrative state.
	// +optional
	State LinkState `json:"state,omitempty"`
	// Carrier is true when the kernel sees the far end (IFF_LOWER_UP). A
	// VXLAN end always has it: FarEnd says whether its far end exists.
	// +optional
	Carrier bool `json:"carrier,omitempty"`
	// FarEnd is the link's other end as its own node's meshnetd reports
	// it, whatever this end's carrier says; absent when that node cannot
	// be read now, or the far end is not a pod's.
	// +optional
	FarEnd FarEnd `json:"far_end,omitempty"`
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// Netem is the shaping read back from the kernel; absent when none.
	// +optional
	Netem *Netem `json:"netem,omitempty"`
	// Physical tells the operator how to configure the physical peer's side.
	// +optional
	Physical *PhysicalPeer `json:"physical,omitempty"`
	// LastError is the last failure applying this link, empty when none.
	// +optional
	LastError string `json:"last_error,omitempty"`
	// Faults names the LinkFaults holding the link now, at either end: its
	// state and netem are theirs until their windows end.
	// +optional
	Faults []string `json:"faults,omitempty"`
	// Bridge is the bridge this end is a port of, as the kernel reports
	// it: in a pod with spec.bridge, the segment's.
	// +optional
	Bridge string `json:"bridge,omitempty"`
}

// ManagedLinks are the uids of the links whose spec field the controller
// applied, one list per field.
type ManagedLinks struct {
	// +optional
	// +listType=set
	State []int `json:"state,omitempty"`
	// +optional
	// +listType=set
	MTU []int `json:"mtu,omitempty"`
	// +optional
	// +listType=set
	Netem []int `json:"netem,omitempty"`
}

// PhysicalPeer is what the physical device must be configured with.
type PhysicalPeer struct {
	VNI        int32  `json:"vni"`
	LocalVTEP  string `json:"local_vtep"`
	RemoteVTEP string `json:"remote_vtep"`
	UDPPort    int32  `json:"udp_port"`
}

// Condition types of a Topology.
const (
	ConditionReady    = "Ready"
	ConditionDegraded = "Degraded"
)

// Reasons of the Ready and Degraded conditions.
const (
	// ReasonConverged: every link is as the spec asks.
	ReasonConverged = "Converged"
	// ReasonLinksPending: some links wait for their peer's side.
	ReasonLinksPending = "LinksPending"
	// ReasonLinkErrors: the kernel refused some links' settings.
	ReasonLinkErrors = "LinkErrors"
	// ReasonPodNotScheduled: the pod is on no node yet; the spec applies
	// when it starts.
	ReasonPodNotScheduled = "PodNotScheduled"
	// ReasonDaemonUnavailable: the pod's node's meshnetd did not answer.
	ReasonDaemonUnavailable = "DaemonUnavailable"
	// ReasonKernelBusy: the pod's node's meshnetd answered that its kernel
	// was busy (netlink dumps interrupted by concurrent changes) for longer
	// than it retries; the apply is retried.
	ReasonKernelBusy = "KernelBusy"
	// ReasonApplyFailed: the call that applies the spec failed; it is retried.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonInvalidSpec: the spec cannot be applied as written.
	ReasonInvalidSpec = "InvalidSpec"
)

// PeerHost as a link's peer_pod makes the link a macvlan on the node's NIC
// named by peer_intf.
const PeerHost = "localhost"
