// Package topograph draws a namespace's links as Grafana Node Graph
// frames: pods and the peers outside the cluster as nodes, links as edges,
// coloured by the state their ends report (the Topologies' status and the
// kernels' live readings). It is pure: meshnetd's data API serves its
// frames and kubectl meshnet graph prints them.
package topograph

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
)

// Graph is what one namespace's Node Graph is drawn from.
type Graph struct {
	Namespace  string
	Topologies []v1beta1.Topology
	// Pods are the namespace's pods by name; a pod missing here is gone.
	Pods map[string]*corev1.Pod
	// Live holds what the nodes' kernels report of link ends right now.
	Live map[End]Live
	// Unavailable says, per Kubernetes node, why its link ends have no live
	// data (its meshnetd did not answer).
	Unavailable map[string]string
}

// End names one end of a link: a pod's interface.
type End struct{ Pod, Interface string }

// Live is one link end as its node's kernel reports it (LinkService.ListLinks).
type Live struct {
	Status *meshnetv1.LinkStatus
	// BytesPerSecond is the end's rx+tx rate between its last two readings;
	// negative when not known yet.
	BytesPerSecond float64
}

// Edge states, as GraphEdge.detail__state spells them.
const (
	stateUp        = "up"
	stateDown      = "down"
	stateNoCarrier = "no-carrier"
	statePending   = "pending"
	stateFailed    = "failed"
)

// Colours, by name: Grafana maps them to its theme.
const (
	green  = "green"
	red    = "red"
	orange = "orange"
	grey   = "gray"
)

// Node kinds, as GraphNode.detail__kind spells them.
const (
	kindPod      = "pod"
	kindPhysical = "physical"
	kindHost     = "host"
)

// Frames builds the Node Graph frames of g: one node per pod, physical
// device and host NIC, one edge per link, both ordered by id. It is pure so
// that its cost can be measured (BenchmarkEdgesFrame5000).
func Frames(g Graph) (nodes []*meshnetv1.GraphNode, edges []*meshnetv1.GraphEdge) {
	b := newBuilder(g)
	for i := range g.Topologies {
		t := &g.Topologies[i]
		b.pod(t.Name)
		for j := range t.Spec.Links {
			if e := b.edge(t, &t.Spec.Links[j]); e != nil {
				edges = append(edges, e)
			}
		}
	}
	nodes = make([]*meshnetv1.GraphNode, 0, len(b.nodes))
	for _, n := range b.nodes {
		nodes = append(nodes, n.row())
	}
	slices.SortFunc(nodes, func(a, b *meshnetv1.GraphNode) int { return cmp.Compare(a.Id, b.Id) })
	slices.SortFunc(edges, func(a, b *meshnetv1.GraphEdge) int { return cmp.Compare(a.Id, b.Id) })
	return nodes, edges
}

// EdgeEnds returns the edge of g whose id is id, with its ends in the pods,
// source first; nil when g has no such edge.
func EdgeEnds(g Graph, id string) (*meshnetv1.GraphEdge, []*meshnetv1.GraphEdgeEnd) {
	nodes, edges := Frames(g)
	i, ok := slices.BinarySearchFunc(edges, id, func(e *meshnetv1.GraphEdge, id string) int { return cmp.Compare(e.Id, id) })
	if !ok {
		return nil, nil
	}
	e := edges[i]
	b := newBuilder(g)
	ends := []*meshnetv1.GraphEdgeEnd{b.edgeEnd(e.Source, e.DetailSourceInterface, int(e.DetailUid))}
	// The target is a pod when Frames drew it as one, not a physical
	// device or a host NIC.
	if j, ok := slices.BinarySearchFunc(nodes, e.Target, func(n *meshnetv1.GraphNode, id string) int { return cmp.Compare(n.Id, id) }); ok && nodes[j].DetailKind == kindPod {
		ends = append(ends, b.edgeEnd(e.Target, e.DetailTargetInterface, int(e.DetailUid)))
	}
	return e, ends
}

// edgeEnd is pod's interface intf, link uid, as the data API shows it.
func (b *builder) edgeEnd(pod, intf string, uid int) *meshnetv1.GraphEdgeEnd {
	x := b.end(pod, b.topos[pod], intf, uid)
	r := &meshnetv1.GraphEdgeEnd{Pod: pod, Interface: intf, Node: x.node}
	switch {
	case x.live != nil:
		r.Link = x.live.Status
		if n := x.live.Status.GetNetem(); n != nil {
			s, _ := netemconv.FromProto(n) // the kernel's: spelled even where a spec would be refused
			r.Netem = netemconv.Words(s)
		}
	case b.g.Pods[pod] == nil:
		r.Error = "no pod " + pod + " in namespace " + b.g.Namespace
	case !x.present:
		r.Error = "pod " + pod + " is being deleted"
	case x.node == "":
		r.Error = "pod " + pod + " is on no node yet"
	case b.g.Unavailable[x.node] != "":
		r.Error = "no reading from node " + x.node + ": " + b.g.Unavailable[x.node]
	default:
		r.Error = "the meshnetd of node " + x.node + " reports no interface " + intf + " in pod " + pod
	}
	return r
}

func newBuilder(g Graph) *builder {
	b := &builder{g: g, topos: make(map[string]*v1beta1.Topology, len(g.Topologies)),
		statuses: map[*v1beta1.Topology]v1beta1.LinkStatusIndex{}, nodes: map[string]*nodeAcc{}}
	for i := range g.Topologies {
		b.topos[g.Topologies[i].Name] = &g.Topologies[i]
	}
	return b
}

type builder struct {
	g        Graph
	topos    map[string]*v1beta1.Topology
	statuses map[*v1beta1.Topology]v1beta1.LinkStatusIndex // built as first needed
	nodes    map[string]*nodeAcc
}

// nodeAcc is a node row and the states of the links that touch it.
type nodeAcc struct {
	r *meshnetv1.GraphNode
	// podOK: the pod exists, is not being deleted and is Ready.
	// topoReady, degraded: its Topology's conditions.
	podOK, topoReady, degraded bool
	up, all                    int
	worst                      string // worst link state, for nodes coloured by their links
}

func (n *nodeAcc) add(state string) {
	n.all++
	if state == stateUp {
		n.up++
	}
	if rank(state) > rank(n.worst) {
		n.worst = state
	}
}

func rank(state string) int {
	switch state {
	case stateFailed:
		return 4
	case stateDown, stateNoCarrier:
		return 3
	case statePending:
		return 2
	case stateUp:
		return 1
	}
	return 0
}

// row finishes the node. A pod is red when it is gone or not ready, or a
// link of it failed; orange while its Topology is not Ready; green when both
// are. The arcs share its links between up and not up; a red pod has all of
// them down, so that Grafana (which draws a full arc in that arc's colour and
// uses color only when every arc is 0) draws it red too.
func (n *nodeAcc) row() *meshnetv1.GraphNode {
	r := n.r
	r.Mainstat, r.Secondarystat = float64(n.up), float64(n.all)
	if r.DetailKind == kindPod {
		switch {
		case !n.podOK || n.degraded || n.worst == stateFailed:
			r.Color = red
		case !n.topoReady:
			r.Color = orange
		default:
			r.Color = green
		}
	} else {
		r.Color = colorOf(n.worst)
	}
	if r.Color == red && r.DetailKind == kindPod {
		r.Mainstat = 0
		if n.all > 0 {
			r.ArcUp, r.ArcDown = 0, 1
		}
	} else if n.all > 0 {
		r.ArcUp = float64(n.up) / float64(n.all)
		r.ArcDown = 1 - r.ArcUp
	}
	r.Highlighted = r.Color == red
	return r
}

// phaseMissing is detail__phase of a pod that has a Topology but no Pod.
const phaseMissing = "Missing"

// pod returns the node of a pod, creating it.
func (b *builder) pod(name string) *nodeAcc {
	if n, ok := b.nodes[name]; ok {
		return n
	}
	r := &meshnetv1.GraphNode{Id: name, Title: name, DetailKind: kindPod, DetailNamespace: b.g.Namespace}
	n := &nodeAcc{r: r}
	t := b.topos[name]
	p := b.g.Pods[name]
	if t != nil {
		r.Subtitle, r.DetailNode, r.DetailVtep = t.Status.Node, t.Status.Node, t.Status.SrcIP
	}
	if p == nil {
		r.DetailPhase = phaseMissing
	} else {
		r.DetailPhase = string(p.Status.Phase)
		if p.Spec.NodeName != "" {
			r.Subtitle, r.DetailNode = p.Spec.NodeName, p.Spec.NodeName
		}
		if p.Status.HostIP != "" {
			r.DetailVtep = p.Status.HostIP
		}
		n.podOK = p.DeletionTimestamp == nil && podCondition(p, corev1.PodReady)
	}
	if t != nil {
		n.topoReady = meta.IsStatusConditionTrue(t.Status.Conditions, v1beta1.ConditionReady)
		n.degraded = meta.IsStatusConditionTrue(t.Status.Conditions, v1beta1.ConditionDegraded)
	}
	b.nodes[name] = n
	return n
}

func podCondition(p *corev1.Pod, c corev1.PodConditionType) bool {
	for _, pc := range p.Status.Conditions {
		if pc.Type == c {
			return pc.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (b *builder) other(id, title, subtitle, kind, vtep string) *nodeAcc {
	if n, ok := b.nodes[id]; ok {
		return n
	}
	n := &nodeAcc{r: &meshnetv1.GraphNode{
		Id: id, Title: title, Subtitle: subtitle, DetailKind: kind,
		DetailNamespace: b.g.Namespace, DetailVtep: vtep,
	}}
	b.nodes[id] = n
	return n
}

// end is one end of a link as the Topology status and the kernel have it.
type end struct {
	pod, intf string
	node      string // Kubernetes node of the pod
	present   bool   // the pod exists and is not being deleted
	status    *v1beta1.LinkStatus
	// asSpecified: the status leaves the end out because it is up, with
	// carrier, as specified (a Topology past 4,096 links lists only the
	// others).
	asSpecified bool
	live        *Live
}

// edge returns the row of link l of t, or nil when the row is made from the
// peer's side (each pod-to-pod link appears in both pods' Topologies; the
// pod with the smaller name draws it).
func (b *builder) edge(t *v1beta1.Topology, l *v1beta1.Link) *meshnetv1.GraphEdge {
	src := b.end(t.Name, t, l.LocalIntf, l.UID)
	e := &meshnetv1.GraphEdge{
		Source: t.Name, DetailSourceInterface: l.LocalIntf, DetailTargetInterface: l.PeerIntf,
		DetailUid: uint32(l.UID),
	}
	var dst *end
	var target *nodeAcc
	switch {
	case l.LinkOptions != nil:
		e.DetailKind = string(v1beta1.LinkKindPhy)
		e.DetailVni = uint32(l.LinkOptions.VNI)
		target = b.other(PeerID(l, src.node), l.PeerPod, l.LinkOptions.RemoteVTEP, kindPhysical, l.LinkOptions.RemoteVTEP)
	case l.PeerPod == v1beta1.PeerHost:
		e.DetailKind = string(v1beta1.LinkKindMacvlan)
		target = b.other(PeerID(l, src.node), l.PeerIntf, src.node, kindHost, "")
	default:
		peer := b.topos[l.PeerPod]
		back := peer.Link(l.UID)
		if back != nil && back.PeerPod == t.Name && l.PeerPod < t.Name {
			return nil // drawn from the peer's side
		}
		d := b.end(l.PeerPod, peer, l.PeerIntf, l.UID)
		dst = &d
		e.DetailKind = string(v1beta1.LinkKindVXLAN)
		if src.node != "" && src.node == d.node {
			e.DetailKind = string(v1beta1.LinkKindVeth)
		}
		target = b.pod(l.PeerPod)
	}
	if src.status != nil && src.status.Kind != "" {
		e.DetailKind = string(src.status.Kind)
	}
	e.Target = target.r.Id
	e.Id = e.Source + ":" + l.LocalIntf + "--" + e.Target + ":" + l.PeerIntf

	state, errs := linkState(src, dst)
	e.DetailState = state
	e.Color = colorOf(state)
	e.Highlighted = state != stateUp
	if state != stateUp && state != stateFailed {
		e.StrokeDasharray = "5,5"
	}
	if msg, ok := b.g.Unavailable[src.node]; ok && src.live == nil {
		errs = append(errs, "no live counters: "+msg)
	}
	e.DetailError = strings.Join(errs, "; ")
	e.DetailFaults = strings.Join(faults(src, dst), ", ")
	b.fill(e, l, src)
	source := b.nodes[t.Name]
	source.add(state)
	if target != source {
		target.add(state)
	}
	return e
}

// PeerID is the graph's id of link l's far end, whose pod is on node: the
// peer pod's name, "physical:DEVICE" for a physical device, or
// "host:NODE:NIC" for the node's NIC of a macvlan.
func PeerID(l *v1beta1.Link, node string) string {
	switch {
	case l.LinkOptions != nil:
		return "physical:" + l.PeerPod
	case l.PeerPod == v1beta1.PeerHost:
		return "host:" + node + ":" + l.PeerIntf
	}
	return l.PeerPod
}

// end gathers what is known of pod's interface intf, link uid; t is the
// pod's Topology, nil when it has none.
func (b *builder) end(pod string, t *v1beta1.Topology, intf string, uid int) end {
	st, ok := b.statuses[t]
	if !ok {
		st = t.LinkStatuses()
		b.statuses[t] = st
	}
	e := end{pod: pod, intf: intf, status: st.Of(uid), asSpecified: st.AsSpecified(uid)}
	if p := b.g.Pods[pod]; p != nil {
		e.present = p.DeletionTimestamp == nil
		e.node = p.Spec.NodeName
	}
	if e.node == "" && t != nil {
		e.node = t.Status.Node
	}
	if lv, ok := b.g.Live[End{pod, intf}]; ok {
		e.live = &lv
	}
	return e
}

// linkState is the state of a link from its ends (dst nil for a physical or
// host peer), with the errors either end reported. The kernel's live reading
// wins over the Topology status, which is written back later.
func linkState(src end, dst *end) (string, []string) {
	var errs []string
	ends := []*end{&src}
	if dst != nil {
		ends = append(ends, dst)
	}
	state := stateUp
	worse := func(s string) {
		if rank(s) > rank(state) {
			state = s
		}
	}
	for i, x := range ends {
		if msg := lastError(x); msg != "" {
			if i == 1 {
				msg = x.pod + ": " + msg
			}
			errs = append(errs, msg)
			worse(stateFailed)
		}
		worse(endState(x))
	}
	return state, errs
}

// faults names the LinkFaults that either end's status says hold the
// link, each once.
func faults(src end, dst *end) []string {
	var out []string
	for _, x := range []*end{&src, dst} {
		if x != nil && x.status != nil {
			out = append(out, x.status.Faults...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func lastError(x *end) string {
	if x.live != nil && x.live.Status.GetLastError() != "" {
		return x.live.Status.GetLastError()
	}
	if x.status != nil {
		return x.status.LastError
	}
	return ""
}

// endState is the state of one end: pending until its pod exists and its
// state is known.
func endState(x *end) string {
	switch {
	case !x.present || (x.status == nil && x.live == nil && !x.asSpecified):
		return statePending
	case x.live != nil:
		switch s := x.live.Status; {
		case s.GetAdminState() != meshnetv1.LinkState_LINK_STATE_UP:
			return stateDown
		case !s.GetCarrier():
			return stateNoCarrier
		}
		return stateUp
	}
	switch {
	case x.status == nil: // left out as up as specified
		return stateUp
	case x.status.State == v1beta1.LinkDown:
		return stateDown
	case x.status.State == "":
		return statePending
	case x.status.Kind == v1beta1.LinkKindVeth && !x.status.Carrier:
		// Only a veth reports its peer's cable pull as lost carrier.
		return stateNoCarrier
	}
	return stateUp
}

func colorOf(state string) string {
	switch state {
	case stateUp:
		return green
	case stateDown, stateNoCarrier, stateFailed:
		return red
	}
	return grey
}

// fill adds the source end's MTU, shaping, VNI and counters.
func (b *builder) fill(e *meshnetv1.GraphEdge, l *v1beta1.Link, src end) {
	var spec *meshnetv1.NetemSpec
	switch {
	case src.live != nil:
		s := src.live.Status
		e.DetailMtu = s.GetMtu()
		spec = s.GetNetem()
		if v := s.GetVxlan().GetVni(); v != 0 {
			e.DetailVni = v
		}
	case src.status != nil:
		e.DetailMtu = uint32(max(src.status.MTU, 0))
		if src.status.Netem != nil {
			s, _ := netemconv.FromTopology(src.status.Netem)
			spec = netemconv.ToProto(s)
		}
		if p := src.status.Physical; p != nil {
			e.DetailVni = uint32(p.VNI)
		}
	}
	if e.DetailMtu == 0 && l.MTU != nil {
		e.DetailMtu = uint32(*l.MTU)
	}
	if spec != nil {
		e.Mainstat = ms(spec.GetDelay().AsDuration())
		e.Secondarystat = spec.GetLossPercent()
		s, _ := netemconv.FromProto(spec)
		e.DetailNetem = netemconv.Words(s)
	}
	e.Thickness = 1
	if src.live == nil {
		return
	}
	e.Thickness = thickness(src.live.BytesPerSecond)
	e.DetailRateBps = max(0, 8*src.live.BytesPerSecond)
	if c := src.live.Status.GetCounters(); c != nil {
		e.DetailTxBytes, e.DetailRxBytes = float64(c.TxBytes), float64(c.RxBytes)
		e.DetailTxPackets, e.DetailRxPackets = float64(c.TxPackets), float64(c.RxPackets)
		e.DetailTxDrops, e.DetailRxDrops = float64(c.TxDrops), float64(c.RxDrops)
		e.DetailTxErrors, e.DetailRxErrors = float64(c.TxErrors), float64(c.RxErrors)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// thickness maps a byte rate onto 1..10 pixels, 1.5 a decade: 1 up to
// 1 kB/s, 5.5 at 1 MB/s, 10 from 1 GB/s.
func thickness(bytesPerSecond float64) float64 {
	if !(bytesPerSecond > 1e3) {
		return 1
	}
	return math.Round(min(10, 1+1.5*math.Log10(bytesPerSecond/1e3))*10) / 10
}
