package wiring

import (
	"context"
	"fmt"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/links"
	"github.com/meshnet/meshnet/internal/podstore"
)

// SetRemoteState sets the admin state of the peer's end of l, a VXLAN link
// of pod k on this node, through the peer node's meshnetd: VXLAN carries no
// carrier, so a cable pull takes both nodes. It satisfies
// linkserver.RemoteEnds.
func (w *Wirer) SetRemoteState(ctx context.Context, l podstore.Link, k podstore.Key, up bool) error {
	ip, err := netip.ParseAddr(l.PeerNodeIP)
	if err != nil {
		return fmt.Errorf("link %d of %s: the peer's node is not known yet", l.UID, k)
	}
	c, err := w.peerClient(ip)
	if err != nil {
		return err
	}
	state := meshnetv1.LinkState_LINK_STATE_DOWN
	if up {
		state = meshnetv1.LinkState_LINK_STATE_UP
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	_, err = c.SetRemoteState(cctx, &meshnetv1.SetRemoteStateRequest{
		End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Uid: uint32(l.UID)},
		State: state,
	})
	if err != nil {
		return fmt.Errorf("set remote end of link %d of %s on meshnetd at %s: %w", l.UID, k, ip, err)
	}
	return nil
}

// SetRemoteState sets this node's end of a cross-node VXLAN link up or
// down for the peer's node. What down flushes (routes, IPv6 addresses) is
// kept in memory and restored on up.
func (s peerServer) SetRemoteState(ctx context.Context, req *meshnetv1.SetRemoteStateRequest) (*meshnetv1.SetRemoteStateResponse, error) {
	w := s.w
	k, err := podKey(req.GetEnd().GetPod())
	if err != nil {
		return nil, err
	}
	if req.GetState() == meshnetv1.LinkState_LINK_STATE_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "state is required")
	}
	rec, ok := w.cfg.Store.Get(k)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod %s is not wired on node %s", k, w.cfg.NodeName)
	}
	intf, uid := req.GetEnd().GetInterface(), int(req.GetEnd().GetUid())
	var l *podstore.Link
	for i := range rec.Links {
		if rec.Links[i].UID == uid && rec.Links[i].LocalIntf == intf && rec.Links[i].Kind == string(v1beta1.LinkKindVXLAN) {
			l = &rec.Links[i]
		}
	}
	if l == nil {
		return nil, status.Errorf(codes.NotFound, "pod %s has no VXLAN link %d on %s", k, uid, intf)
	}
	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: %v", k, err)
	}
	defer ns.Close()
	defer w.cfg.Locks.Lock(endKey(k, intf))()
	id := linkID{k, uid}
	if req.GetState() == meshnetv1.LinkState_LINK_STATE_DOWN {
		saved, err := links.SetAdminDown(ns, intf)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
		}
		w.mu.Lock()
		w.saved[id] = saved
		w.mu.Unlock()
	} else {
		w.mu.Lock()
		saved := w.saved[id]
		delete(w.saved, id)
		w.mu.Unlock()
		if err := links.SetAdminUp(ns, intf, saved); err != nil {
			return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
		}
	}
	w.log.Info("remote end state set for peer", "pod", k.String(), "link", uid, "intf", intf, "state", req.GetState().String())
	w.status.Add(k)
	st, err := links.ReadState(ns, intf)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}
	remote, _ := netip.ParseAddr(l.PeerNodeIP)
	spec := v1beta1.Link{UID: uid, LocalIntf: intf, PeerPod: l.PeerPod, PeerIntf: l.PeerIntf}
	return &meshnetv1.SetRemoteStateResponse{Link: w.linkStatus(k, spec, v1beta1.LinkKindVXLAN, st, l.VNI, remote)}, nil
}
