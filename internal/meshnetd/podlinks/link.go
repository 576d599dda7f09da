package podlinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/shaping"
)

// kindOf is how a link is made, as far as its spec alone tells: a link to
// a pod is veth or vxlan depending on where the peer runs.
func kindOf(l v1beta1.Link) v1beta1.LinkKind {
	switch {
	case l.LinkOptions != nil:
		return v1beta1.LinkKindPhy
	case l.PeerPod == v1beta1.PeerHost:
		return v1beta1.LinkKindMacvlan
	}
	return ""
}

func protoPeer(namespace string, l v1beta1.Link, peerNode string) *meshnetv1.Peer {
	switch kindOf(l) {
	case v1beta1.LinkKindPhy:
		return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Physical{Physical: &meshnetv1.PhysicalPeer{Name: l.PeerPod, Interface: l.PeerIntf}}}
	case v1beta1.LinkKindMacvlan:
		return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Host{Host: &meshnetv1.HostPeer{Parent: l.PeerIntf}}}
	}
	return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Pod{Pod: &meshnetv1.PodPeer{
		Pod: &meshnetv1.PodRef{Namespace: namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Node: peerNode,
	}}}
}

// end is the kernel end of a Topology link in ns, in a pod with Topology
// topo (nil when it has none yet): with IPv6 link-local addresses or not,
// and, in a pod that is an L2 segment, a port of its bridge, without
// addresses (an address on a bridge's port is never answered; a member's
// peer_ip does not apply there).
func end(ns *links.Netns, name, ip string, mtu *int32, state *v1beta1.LinkState, topo *v1beta1.Topology) (links.End, error) {
	e := links.End{NS: ns, Name: name, Down: state != nil && *state == v1beta1.LinkDown, NoIPv6LinkLocal: !topo.LinkLocalIPv6()}
	if mtu != nil {
		e.MTU = int(*mtu)
	}
	if e.Bridge = topo.BridgeName(); e.Bridge != "" {
		e.NoIPv6LinkLocal = true
		return e, nil
	}
	if ip != "" {
		p, err := netip.ParsePrefix(ip)
		if err != nil {
			return links.End{}, fmt.Errorf("address %q of %s: %w", ip, name, err)
		}
		e.Addrs = []netip.Prefix{p}
	}
	return e, nil
}

// endKey is the lock of a link end.
func endKey(k podstore.Key, intf string) linklock.Key {
	return linklock.Key{Namespace: k.Namespace, Pod: k.Name, Interface: intf}
}

// pod is a pod being wired: its record, open namespace and Topology.
type pod struct {
	key  podstore.Key
	ns   *links.Netns
	topo *v1beta1.Topology
}

// wired is what wiring one link of a pod did.
type wired struct {
	result *meshnetv1.LinkResult
	record podstore.Link
	// remote is the peer's end to create through its node's meshnetd, once
	// the local locks are released (two nodes each holding their end's lock
	// while calling the other would deadlock).
	remote *meshnetv1.CreateRemoteEndRequest
	// peerIP is the node the remote call goes to.
	peerIP netip.Addr
	// vethPeer is the pod on this node at the veth's other end, whose
	// record must name the link a veth (wireLinks writes it).
	vethPeer *podstore.Key
	// ends are the link ends made, to shape as their Topologies say once
	// the pod's links are made (settleEnds).
	ends []endMade
}

// wireLink makes this pod's end of l, and the peer's end of a veth.
func (rc *Reconciler) wireLink(ctx context.Context, p pod, l v1beta1.Link) (wired, error) {
	kind := kindOf(l)
	res := &meshnetv1.LinkResult{Interface: l.LocalIntf, Uid: uint32(l.UID), Peer: protoPeer(p.key.Namespace, l, "")}
	rec := podstore.Link{UID: l.UID, LocalIntf: l.LocalIntf, Kind: kind, PeerPod: l.PeerPod, PeerIntf: l.PeerIntf}
	self, err := end(p.ns, l.LocalIntf, l.LocalIP, l.MTU, l.State, p.topo)
	if err != nil {
		return wired{}, err
	}
	log := rc.log.With("pod", p.key.String(), "link", l.UID, "intf", l.LocalIntf)

	switch kind {
	case v1beta1.LinkKindPhy:
		return rc.wirePhy(p, l, self, res, rec, log)
	case v1beta1.LinkKindMacvlan:
		return rc.wireMacvlan(p, l, self, res, rec, log)
	}

	peerKey := podstore.Key{Namespace: p.key.Namespace, Name: l.PeerPod}
	if peerRec, ok := rc.wiredPod(peerKey); ok && !rc.isDeleting(peerKey) {
		return rc.wireVeth(ctx, p, l, self, peerKey, peerRec, res, rec, log)
	}
	at, err := rc.peerNode(ctx, peerKey)
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	res.Peer = protoPeer(p.key.Namespace, l, at.node)
	switch {
	case at.node == "":
		rec.Kind = ""
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, "peer pod "+l.PeerPod+" is not scheduled yet"
		return wired{result: res, record: rec}, nil
	case at.leaving:
		rec.Kind = ""
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, "peer pod "+l.PeerPod+" is being deleted; its next pod's ADD wires both ends"
		return wired{result: res, record: rec}, nil
	case at.node == rc.cfg.NodeName:
		rec.Kind = v1beta1.LinkKindVeth
		res.Kind = meshnetv1.LinkKind_LINK_KIND_VETH
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, "peer pod "+l.PeerPod+" is not wired yet; its ADD completes the veth"
		return wired{result: res, record: rec}, nil
	case !at.ip.IsValid():
		rec.Kind = v1beta1.LinkKindVXLAN
		res.Kind = meshnetv1.LinkKind_LINK_KIND_VXLAN
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, "node "+at.node+" of peer pod "+l.PeerPod+" has no IP yet"
		return wired{result: res, record: rec}, nil
	}
	return rc.wireVXLAN(p, l, self, at.node, at.ip, res, rec, log)
}

// wirePhy makes the pod's end of a VXLAN to a device outside the cluster
// (a remote VTEP).
func (rc *Reconciler) wirePhy(p pod, l v1beta1.Link, self links.End, res *meshnetv1.LinkResult, rec podstore.Link, log *slog.Logger) (wired, error) {
	o := l.LinkOptions
	remote, err := netip.ParseAddr(o.RemoteVTEP)
	if err != nil {
		return wired{}, fmt.Errorf("link %d: remote_vtep %q: %w", l.UID, o.RemoteVTEP, err)
	}
	x := links.VXLAN{Node: rc.nodeNetns, End: self, VNI: uint32(o.VNI), Local: rc.cfg.NodeIP, Remote: remote, Port: uint16(o.Port())}
	unlock := rc.cfg.Locks.Lock(endKey(p.key, l.LocalIntf))
	r, srcPort, err := rc.ensureVXLAN(p.key, x, 0)
	unlock()
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	rec.VNI, rec.PeerNodeIP, rec.UDPPort, rec.SrcPort = uint32(o.VNI), remote.String(), x.Port, srcPort
	log.Info("physical peer wired", "result", r, "vni", o.VNI, "remote_vtep", remote)
	res.Kind, res.Phase = rec.Kind.Proto(), meshnetv1.LinkPhase_LINK_PHASE_READY
	return wired{result: res, record: rec, ends: []endMade{{pod: p.key, link: l}}}, nil
}

// wireMacvlan makes the pod's end of a macvlan on a host NIC.
func (rc *Reconciler) wireMacvlan(p pod, l v1beta1.Link, self links.End, res *meshnetv1.LinkResult, rec podstore.Link, log *slog.Logger) (wired, error) {
	unlock := rc.cfg.Locks.Lock(endKey(p.key, l.LocalIntf))
	r, err := links.EnsureMacvlan(links.Macvlan{Node: rc.nodeNetns, Parent: l.PeerIntf, Trusted: rc.cfg.MacvlanParents, End: self})
	unlock()
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	log.Info("macvlan wired", "result", r, "parent", l.PeerIntf)
	res.Kind, res.Phase = rec.Kind.Proto(), meshnetv1.LinkPhase_LINK_PHASE_READY
	return wired{result: res, record: rec, ends: []endMade{{pod: p.key, link: l}}}, nil
}

// wireVXLAN makes this end of a VXLAN between two nodes with the first of
// the link's VNIs this node has free (the one it has already, if any); the
// caller then asks the peer's node for its end with that VNI (remote).
func (rc *Reconciler) wireVXLAN(p pod, l v1beta1.Link, self links.End, peerNode string, peerIP netip.Addr, res *meshnetv1.LinkResult, rec podstore.Link, log *slog.Logger) (wired, error) {
	vnis := links.VNIs(p.key.Namespace, p.key.Name, l.PeerPod, l.UID)
	prev := rc.recordedVXLAN(p.key, l.UID)
	if i := slices.Index(vnis, prev.VNI); i > 0 {
		vnis[0], vnis[i] = vnis[i], vnis[0]
	}
	res.Kind = meshnetv1.LinkKind_LINK_KIND_VXLAN
	x := links.VXLAN{Node: rc.nodeNetns, End: self, Local: rc.cfg.NodeIP, Remote: peerIP}
	unlock := rc.cfg.Locks.Lock(endKey(p.key, l.LocalIntf))
	var (
		r                links.Result
		srcPort, farPort uint16
		err              error
	)
	for _, x.VNI = range vnis {
		// The far end's port, as its node told, while it is the same far end.
		farPort = 0
		if prev.VNI == x.VNI && prev.PeerNodeIP == peerIP.String() {
			farPort = prev.PeerSrcPort
		}
		if r, srcPort, err = rc.ensureVXLAN(p.key, x, farPort); !errors.Is(err, links.ErrVNIInUse) {
			break
		}
		log.Info("vni in use on this node, trying the link's next", "vni", x.VNI)
	}
	unlock()
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	vni := x.VNI
	rec.Kind, rec.VNI, rec.PeerNodeIP, rec.SrcPort, rec.PeerSrcPort = v1beta1.LinkKindVXLAN, vni, peerIP.String(), srcPort, farPort
	log.Info("vxlan end wired", "result", r, "vni", vni, "remote_vtep", peerIP, "peer_node", peerNode, "src_port", srcPort)
	return wired{result: res, record: rec, remote: rc.remoteEnd(p.key, l, vni, peerIP, srcPort), peerIP: peerIP, ends: []endMade{{pod: p.key, link: l}}}, nil
}

// remoteEnd is the request for the peer's end of VXLAN link l of pod k,
// whose end here has vni, to the peer's node at peerIP.
func (rc *Reconciler) remoteEnd(k podstore.Key, l v1beta1.Link, vni uint32, peerIP netip.Addr, srcPort uint16) *meshnetv1.CreateRemoteEndRequest {
	req := &meshnetv1.CreateRemoteEndRequest{
		End:  &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Uid: uint32(l.UID)},
		Peer: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: k.Name}, Interface: l.LocalIntf, Uid: uint32(l.UID)},
		Vxlan: &meshnetv1.Vxlan{
			Vni: vni, LocalVtep: peerIP.String(), RemoteVtep: rc.cfg.NodeIP.String(), UdpPort: v1beta1.DefaultVXLANPort,
			RemoteSrcPort: uint32(srcPort),
		},
		Ip: l.PeerIP,
	}
	if l.MTU != nil {
		req.Mtu = uint32(*l.MTU)
	}
	return req
}

// recordedVXLAN is link uid of pod k as recorded when this node made it a
// VXLAN (its VNI, far end and far end's port); zero for none.
func (rc *Reconciler) recordedVXLAN(k podstore.Key, uid int) podstore.Link {
	rec, ok := rc.cfg.Store.Get(k)
	if !ok {
		return podstore.Link{}
	}
	for _, l := range rec.Links {
		if l.UID == uid && l.Kind == v1beta1.LinkKindVXLAN {
			return l
		}
	}
	return podstore.Link{}
}

// wireVeth makes a veth to a pod already recorded on this node, with the
// peer's end as its own Topology describes it (this pod's view of it when
// the peer's Topology lacks the link).
func (rc *Reconciler) wireVeth(ctx context.Context, p pod, l v1beta1.Link, self links.End, peerKey podstore.Key, peerRec podstore.Pod,
	res *meshnetv1.LinkResult, rec podstore.Link, log interface{ Info(string, ...any) }) (wired, error) {
	rec.Kind = v1beta1.LinkKindVeth
	res.Kind = meshnetv1.LinkKind_LINK_KIND_VETH
	res.Peer = protoPeer(p.key.Namespace, l, rc.cfg.NodeName)

	// The peer's Topology is confirmed with the API server on a miss: its
	// ADD may be running beside this one, before Topologies tracks it.
	pt, err := rc.topology(ctx, peerKey)
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	peerIP, peerMTU, peerState := l.PeerIP, l.MTU, (*v1beta1.LinkState)(nil)
	if pl := pt.Link(l.UID); pl != nil && pl.PeerPod == p.key.Name {
		if pl.LocalIP != "" {
			peerIP = pl.LocalIP
		}
		if pl.MTU != nil {
			peerMTU = pl.MTU
		}
		peerState = pl.State
	}
	if self.MTU == 0 && peerMTU != nil {
		self.MTU = int(*peerMTU)
	}
	if peerMTU == nil {
		peerMTU = l.MTU
	}
	peerNS, err := links.OpenNetns(peerRec.Netns)
	if err != nil {
		// The peer's sandbox is gone without a DEL; its next ADD wires it.
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, fmt.Sprintf("peer pod %s has no network namespace: %v", l.PeerPod, err)
		return wired{result: res, record: rec}, nil
	}
	defer peerNS.Close()
	other, err := end(peerNS, l.PeerIntf, peerIP, peerMTU, peerState, pt)
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	unlock := rc.cfg.Locks.Lock(endKey(p.key, l.LocalIntf), endKey(peerKey, l.PeerIntf))
	r, err := links.EnsureVeth(links.Veth{A: self, B: other})
	unlock()
	if err != nil {
		return wired{}, fmt.Errorf("link %d: %w", l.UID, err)
	}
	log.Info("veth wired", "result", r, "peer", peerKey.String())
	res.Phase = meshnetv1.LinkPhase_LINK_PHASE_READY
	ends := []endMade{{pod: p.key, link: l}}
	if pl := pt.Link(l.UID); pl != nil {
		ends = append(ends, endMade{pod: peerKey, link: *pl})
	}
	return wired{result: res, record: rec, vethPeer: &peerKey, ends: ends}, nil
}

// endMade is how making a link end went: made, with its Topology's link,
// or not, and err is why.
type endMade struct {
	pod  podstore.Key
	link v1beta1.Link
	err  string
}

// settleEnds hands how each end was made to Wired,
// once per pod: it shapes the ends made as their links' netem says, and
// records each end's last error, why it was not made or not shaped, or
// none. Shaping is never silently ignored: the Topology status shows the
// error and the link stays unshaped. It returns why each end that could
// not be shaped was not.
func (rc *Reconciler) settleEnds(ends []endMade) map[podstore.Key]map[string]error {
	type want struct {
		uids  map[string]int
		shape map[string]*shaping.Spec
		errs  map[string]string
	}
	pods := map[podstore.Key]*want{}
	var order []podstore.Key
	for _, e := range ends {
		p := pods[e.pod]
		if p == nil {
			p = &want{uids: map[string]int{}, shape: map[string]*shaping.Spec{}, errs: map[string]string{}}
			pods[e.pod] = p
			order = append(order, e.pod)
		}
		intf := e.link.LocalIntf
		p.uids[intf] = e.link.UID
		switch {
		case e.err != "":
			p.errs[intf] = e.err
		case e.link.Netem == nil:
			p.shape[intf] = nil
		default:
			spec, err := netemconv.FromTopology(e.link.Netem)
			if err != nil {
				rc.log.Warn("netem not applied", "pod", e.pod.String(), "link", e.link.UID, "intf", intf, "error", err)
				p.errs[intf] = "netem not applied: " + err.Error()
				continue
			}
			p.shape[intf] = &spec
		}
	}
	failed := map[podstore.Key]map[string]error{}
	for _, k := range order {
		p := pods[k]
		errs := rc.Wired(k, p.shape, p.errs)
		for intf, err := range errs {
			rc.log.Warn("netem not applied", "pod", k.String(), "link", p.uids[intf], "intf", intf, "error", err)
		}
		failed[k] = errs
	}
	return failed
}
