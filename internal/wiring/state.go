package wiring

import (
	"context"
	"fmt"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/podstore"
)

// SetRemoteState sets the admin state of the peer's end of l, a VXLAN link
// of pod k on this node, through the peer node's meshnetd: VXLAN carries no
// carrier, so a cable pull takes both nodes. It satisfies
// linkserver.RemoteEnds.
func (w *Wirer) SetRemoteState(ctx context.Context, l podstore.Link, k podstore.Key, up bool) (changed bool, err error) {
	ip, err := netip.ParseAddr(l.PeerNodeIP)
	if err != nil {
		return false, fmt.Errorf("link %d of %s: the peer's node is not known yet", l.UID, k)
	}
	c, err := w.peerClient(ip)
	if err != nil {
		return false, err
	}
	state := meshnetv1.LinkState_LINK_STATE_DOWN
	if up {
		state = meshnetv1.LinkState_LINK_STATE_UP
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	resp, err := c.SetRemoteState(cctx, &meshnetv1.SetRemoteStateRequest{
		End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Uid: uint32(l.UID)},
		State: state,
	})
	if err != nil {
		return false, fmt.Errorf("set remote end of link %d of %s on meshnetd at %s: %w", l.UID, k, ip, err)
	}
	return resp.GetChanged(), nil
}

// EndStates changes this node's end of a link: linkserver.Server, which
// also keeps what down flushed (routes, IPv6 addresses) across restarts.
type EndStates interface {
	SetEndState(ctx context.Context, pod podstore.Key, intf string, state meshnetv1.LinkState) (_ *meshnetv1.LinkStatus, changed bool, err error)
}

// SetRemoteState sets this node's end of a cross-node VXLAN link up or
// down for the peer's node.
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
	found := false
	for _, l := range rec.Links {
		found = found || (l.UID == uid && l.LocalIntf == intf && l.Kind == v1beta1.LinkKindVXLAN)
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "pod %s has no VXLAN link %d on %s", k, uid, intf)
	}
	ls, changed, err := s.ends.SetEndState(ctx, k, intf, req.GetState())
	if err != nil {
		return nil, err
	}
	// SetEndState logged a change. The pod's status is the controller's to
	// keep after ADD: Changed reaches it through ApplyPod, which has it read
	// this pod back, and its resync reads every pod (after a runtime
	// SetLinkState, say).
	w.log.Debug("remote end state set for peer", "pod", k.String(), "link", uid, "intf", intf, "state", req.GetState().String(), "node", w.cfg.NodeName)
	return &meshnetv1.SetRemoteStateResponse{Link: ls, Changed: changed}, nil
}
