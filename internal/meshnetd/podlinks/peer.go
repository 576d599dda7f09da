package podlinks

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// peerServer serves other nodes' meshnetds. It trusts their request only
// as a trigger: the end is made from this node's own records and the pod's
// own Topology, and the VNI is checked against the derived one, so a caller
// cannot make arbitrary interfaces in a pod.
type peerServer struct {
	meshnetv1.UnimplementedPeerServiceServer
	rc *Reconciler
}

// CreateRemoteEnd makes this node's end of a cross-node VXLAN link.
func (s peerServer) CreateRemoteEnd(ctx context.Context, req *meshnetv1.CreateRemoteEndRequest) (*meshnetv1.CreateRemoteEndResponse, error) {
	rc := s.rc
	k, err := podKey(req.GetEnd().GetPod())
	if err != nil {
		return nil, err
	}
	peer := req.GetPeer().GetPod()
	if peer.GetNamespace() != k.Namespace || peer.GetName() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "peer of %s must be a pod in namespace %s", k, k.Namespace)
	}
	rec, ok := rc.wiredPod(k)
	if !ok || rc.isDeleting(k) {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s is not wired on node %s yet; its ADD makes this end", k, rc.cfg.NodeName)
	}
	topo, err := rc.topology(ctx, k)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "pod %s: %v", k, err)
	}
	uid := int(req.GetEnd().GetUid())
	l := topo.Link(uid)
	if l == nil || l.LocalIntf != req.GetEnd().GetInterface() || l.PeerPod != peer.GetName() || l.LinkOptions != nil {
		return nil, status.Errorf(codes.NotFound, "Topology %s has no link %d on %s to pod %s", k, uid, req.GetEnd().GetInterface(), peer.GetName())
	}
	vni := req.GetVxlan().GetVni()
	if vnis := links.VNIs(k.Namespace, k.Name, peer.GetName(), uid); !slices.Contains(vnis, vni) {
		return nil, status.Errorf(codes.InvalidArgument, "vxlan.vni: link %d of %s: vni %d is none of the link's %v", uid, k, vni, vnis)
	}
	remote, err := netip.ParseAddr(req.GetVxlan().GetRemoteVtep())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "remote_vtep %q: %v", req.GetVxlan().GetRemoteVtep(), err)
	}
	farPort := req.GetVxlan().GetRemoteSrcPort()
	if farPort > maxSrcPort {
		return nil, status.Errorf(codes.InvalidArgument, "vxlan.remote_src_port: %d is past %d", farPort, maxSrcPort)
	}
	if remote == rc.cfg.NodeIP {
		return nil, status.Errorf(codes.InvalidArgument, "remote_vtep %s is this node's own IP", remote)
	}
	// The tunnel goes to the peer pod's node and nowhere else: a caller may
	// not point this node's traffic at an address of its choosing.
	at, err := rc.peerNode(ctx, podstore.Key{Namespace: k.Namespace, Name: peer.GetName()})
	switch {
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "pod %s: %v", k, err)
	case !at.ip.IsValid():
		return nil, status.Errorf(codes.FailedPrecondition, "vxlan.remote_vtep: pod %s's node is not known yet", peer.GetName())
	case remote != at.ip:
		return nil, status.Errorf(codes.InvalidArgument, "vxlan.remote_vtep: %s is not the address of node %s (%s), which hosts pod %s", remote, at.node, at.ip, peer.GetName())
	}
	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: %v", k, err)
	}
	defer ns.Close()
	self, err := end(ns, l.LocalIntf, l.LocalIP, l.MTU, l.State, topo)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pod %s: %v", k, err)
	}
	log := rc.log.With("pod", k.String(), "link", uid, "intf", l.LocalIntf)
	unlock := rc.cfg.Locks.Lock(endKey(k, l.LocalIntf))
	r, srcPort, err := rc.ensureVXLAN(k, links.VXLAN{Node: rc.nodeNetns, End: self, VNI: vni, Local: rc.cfg.NodeIP, Remote: remote}, uint16(farPort))
	unlock()
	if err != nil {
		rc.settleEnds([]endMade{{pod: k, link: *l, err: err.Error()}})
		code := kernelCode(err)
		if errors.Is(err, links.ErrVNIInUse) {
			// The other node took a VNI that another link has here.
			code = codes.AlreadyExists
		}
		return nil, status.Errorf(code, "pod %s link %d: %v", k, uid, err)
	}
	log.Info("vxlan end wired for peer", "result", r, "vni", vni, "remote_vtep", remote, "peer", peer.GetName(), "src_port", srcPort, "peer_src_port", farPort)
	var lastErr string
	if err := rc.settleEnds([]endMade{{pod: k, link: *l}})[k][l.LocalIntf]; err != nil {
		lastErr = err.Error()
	}
	if err := rc.updateRecord(k, func(p *podstore.Pod) {
		for i := range p.Links {
			if p.Links[i].UID == uid {
				// The far end is this one: no longer owed.
				p.Links[i].Kind, p.Links[i].VNI, p.Links[i].PeerNodeIP, p.Links[i].FarEndOwed = v1beta1.LinkKindVXLAN, vni, remote.String(), false
				p.Links[i].SrcPort, p.Links[i].PeerSrcPort = srcPort, uint16(farPort)
			}
		}
	}); err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}
	st, err := links.ReadLink(ns, l.LocalIntf)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}
	ls := rc.linkStatus(k, *l, v1beta1.LinkKindVXLAN, st, vni, remote, lastErr)
	ls.Vxlan.SrcPort, ls.Vxlan.RemoteSrcPort = uint32(srcPort), farPort
	return &meshnetv1.CreateRemoteEndResponse{Link: ls}, nil
}

// DeleteRemoteEnd removes this node's end of a link whose other end went
// away. An end already gone, or of another link (another VNI), is success.
func (s peerServer) DeleteRemoteEnd(ctx context.Context, req *meshnetv1.DeleteRemoteEndRequest) (*meshnetv1.DeleteRemoteEndResponse, error) {
	rc := s.rc
	k, err := podKey(req.GetEnd().GetPod())
	if err != nil {
		return nil, err
	}
	intf := req.GetEnd().GetInterface()
	rec, ok := rc.cfg.Store.Get(k)
	if !ok {
		return &meshnetv1.DeleteRemoteEndResponse{}, nil
	}
	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		return &meshnetv1.DeleteRemoteEndResponse{}, nil
	}
	defer ns.Close()
	defer rc.cfg.Locks.Lock(endKey(k, intf))()
	d, ok, err := links.VXLANOf(rc.nodeNetns, ns, intf)
	switch {
	case err != nil:
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	case !ok, req.GetVni() != 0 && d.VNI != req.GetVni():
		return &meshnetv1.DeleteRemoteEndResponse{}, nil
	}
	if err := rc.deleteEnd(k, ns, intf); err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}
	rc.log.Info("vxlan end removed for peer", "pod", k.String(), "link", req.GetEnd().GetUid(), "intf", intf, "vni", d.VNI)
	if err := rc.endWaits(k, int(req.GetEnd().GetUid()), intf, d.VNI); err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}
	return &meshnetv1.DeleteRemoteEndResponse{}, nil
}

// endWaits records that link uid of pod k, whose VXLAN end with vni was
// removed as its peer pod went, waits for its peer's next pod again, as
// before its peer's ADD: recorded as wired, a sync would find it lost and
// make it again, to a pod that is gone.
func (rc *Reconciler) endWaits(k podstore.Key, uid int, intf string, vni uint32) error {
	return rc.updateRecord(k, func(p *podstore.Pod) {
		for i, l := range p.Links {
			if l.UID == uid && l.LocalIntf == intf && l.Kind == v1beta1.LinkKindVXLAN && (l.VNI == 0 || l.VNI == vni) {
				p.Links[i].Kind, p.Links[i].VNI, p.Links[i].PeerNodeIP, p.Links[i].FarEndOwed = "", 0, "", false
			}
		}
	})
}

// linkStatus is an end as the kernel has it, in the API's terms.
func (rc *Reconciler) linkStatus(k podstore.Key, l v1beta1.Link, kind v1beta1.LinkKind, st links.Reading, vni uint32, remote netip.Addr, lastErr string) *meshnetv1.LinkStatus {
	ls := &meshnetv1.LinkStatus{
		Pod:       &meshnetv1.PodRef{Namespace: k.Namespace, Name: k.Name},
		Interface: l.LocalIntf,
		Uid:       uint32(l.UID),
		Kind:      kind.Proto(),
		Carrier:   st.Carrier,
		Mtu:       uint32(st.MTU),
		Peer:      protoPeer(k.Namespace, l, ""),
		Node:      rc.cfg.NodeName,
		LastError: lastErr,
	}
	ls.AdminState = apiState(st.AdminUp)
	for _, a := range st.Addrs {
		ls.Addresses = append(ls.Addresses, a.String())
	}
	if vni != 0 {
		ls.Vxlan = &meshnetv1.Vxlan{Vni: vni, LocalVtep: rc.cfg.NodeIP.String(), RemoteVtep: remote.String(), UdpPort: v1beta1.DefaultVXLANPort}
	}
	return ls
}
