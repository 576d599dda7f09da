package podlinks

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// RemoteEnds reaches the far end of a cross-node VXLAN link, which only the
// peer's node can change: VXLAN carries no carrier, so a cable pull takes
// both nodes. A Reconciler with Peers reaches them through the peer
// node's PeerService (SetRemoteStates).
type RemoteEnds interface {
	// SetRemoteStates sets the admin state of the peer's ends of links,
	// VXLAN links of pod on this node: one call per peer node, however
	// many links. It returns one result per end, in order.
	SetRemoteStates(ctx context.Context, pod podstore.Key, ends []RemoteState) []EndResult
}

// RemoteState is the admin state wanted for the far end of Link.
type RemoteState struct {
	Link podstore.Link
	Up   bool
}

// EndResult is what became of one link end set to an admin state, here
// (SetEndStates) or on the peer's node (RemoteEnds): Changed when it was
// not in that state already, or why it was not set.
type EndResult struct {
	Changed bool
	Err     error
}

// perEndTimeout is what each end adds to a SetRemoteStates call's
// deadline: the deadline is sized to the work, not fixed per call (see
// controller.PerLinkCallTimeout for the figure).
const perEndTimeout = 10 * time.Millisecond

// SetRemoteStates sets the admin state of the peer's ends of links, VXLAN
// links of pod k on this node, through the peer nodes' meshnetds: VXLAN
// carries no carrier, so a cable pull takes both nodes. The ends on one
// peer node go in one call; calls to different nodes run at once. It
// is the RemoteEnds of a Reconciler with Peers.
func (rc *Reconciler) SetRemoteStates(ctx context.Context, k podstore.Key, ends []RemoteState) []EndResult {
	out := make([]EndResult, len(ends))
	byNode := map[netip.Addr][]int{}
	for i, e := range ends {
		ip, err := netip.ParseAddr(e.Link.PeerNodeIP)
		if err != nil {
			out[i].Err = fmt.Errorf("link %d of %s: the peer's node is not known yet", e.Link.UID, k)
			continue
		}
		byNode[ip] = append(byNode[ip], i)
	}
	var wg sync.WaitGroup
	for ip, idx := range byNode {
		wg.Go(func() {
			results, err := rc.setRemoteStates(ctx, ip, k, ends, idx)
			for j, i := range idx {
				switch {
				case err != nil:
					out[i].Err = err
				case results[j].GetError() != "":
					out[i].Err = fmt.Errorf("meshnetd at %s: %s", ip, results[j].GetError())
				default:
					out[i].Changed = results[j].GetChanged()
				}
			}
		})
	}
	wg.Wait()
	return out
}

// setRemoteStates makes the one call to the meshnetd at ip for ends[idx].
func (rc *Reconciler) setRemoteStates(ctx context.Context, ip netip.Addr, k podstore.Key, ends []RemoteState, idx []int) ([]*meshnetv1.RemoteStateResult, error) {
	req := &meshnetv1.SetRemoteStatesRequest{}
	for _, i := range idx {
		l := ends[i].Link
		req.Ends = append(req.Ends, &meshnetv1.SetRemoteStateRequest{
			End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Uid: uint32(l.UID)},
			State: apiState(ends[i].Up),
		})
	}
	var results []*meshnetv1.RemoteStateResult
	err := rc.callPeer(ctx, ip, peerCallTimeout+time.Duration(len(idx))*perEndTimeout, func(ctx context.Context, c meshnetv1.PeerServiceClient) error {
		var err error
		results, err = setRemoteStatesOn(ctx, c, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set %d remote ends of %s on meshnetd at %s: %w", len(idx), k, ip, err)
	}
	return results, nil
}

// setRemoteStatesOn makes req's one call to a peer. A peer that predates
// SetRemoteStates (during a DaemonSet rollout) gets one SetRemoteState per
// end instead, so that cable pulls keep working while nodes differ.
func setRemoteStatesOn(ctx context.Context, c meshnetv1.PeerServiceClient, req *meshnetv1.SetRemoteStatesRequest) ([]*meshnetv1.RemoteStateResult, error) {
	resp, err := c.SetRemoteStates(ctx, req)
	switch {
	case status.Code(err) == codes.Unimplemented:
		out := make([]*meshnetv1.RemoteStateResult, len(req.GetEnds()))
		for i, e := range req.GetEnds() {
			r, err := c.SetRemoteState(ctx, e)
			out[i] = &meshnetv1.RemoteStateResult{End: e.GetEnd(), Changed: r.GetChanged()}
			if err != nil {
				out[i].Error = status.Convert(err).Message()
			}
		}
		return out, nil
	case err != nil:
		return nil, err
	case len(resp.GetResults()) != len(req.GetEnds()):
		return nil, fmt.Errorf("%d results for %d ends", len(resp.GetResults()), len(req.GetEnds()))
	}
	return resp.GetResults(), nil
}

// SetRemoteState sets this node's end of a cross-node VXLAN link up or
// down for the peer's node, one end per call: what meshnetds before
// SetRemoteStates send.
func (s peerServer) SetRemoteState(ctx context.Context, req *meshnetv1.SetRemoteStateRequest) (*meshnetv1.SetRemoteStateResponse, error) {
	k, err := s.remoteEnd(req, nil)
	if err != nil {
		return nil, err
	}
	ls, changed, err := s.rc.SetEndState(ctx, k, req.GetEnd().GetInterface(), isUp(req.GetState()))
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetRemoteStateResponse{Link: ls, Changed: changed}, nil
}

// SetRemoteStates sets this node's ends of cross-node VXLAN links for the
// peer's node: each pod's ends at once. A cancelled call stops before the
// next pod.
func (s peerServer) SetRemoteStates(ctx context.Context, req *meshnetv1.SetRemoteStatesRequest) (*meshnetv1.SetRemoteStatesResponse, error) {
	resp := &meshnetv1.SetRemoteStatesResponse{Results: make([]*meshnetv1.RemoteStateResult, len(req.GetEnds()))}
	byPod := map[podstore.Key]map[string]int{} // interface -> index in req
	var pods []podstore.Key
	recs := map[podstore.Key]map[int]podstore.Link{}
	for i, e := range req.GetEnds() {
		resp.Results[i] = &meshnetv1.RemoteStateResult{End: e.GetEnd()}
		k, err := s.remoteEnd(e, recs)
		if err != nil {
			resp.Results[i].Error = status.Convert(err).Message()
			continue
		}
		if byPod[k] == nil {
			byPod[k] = map[string]int{}
			pods = append(pods, k)
		}
		intf := e.GetEnd().GetInterface()
		if j, dup := byPod[k][intf]; dup {
			resp.Results[i].Error = fmt.Sprintf("ends[%d]: pod %s interface %s is also ends[%d]'s", i, k, intf, j)
			continue
		}
		byPod[k][intf] = i
	}
	for _, k := range pods {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		states := map[string]bool{}
		for intf, i := range byPod[k] {
			states[intf] = isUp(req.GetEnds()[i].GetState())
		}
		for intf, r := range s.rc.SetEndStates(ctx, k, states) {
			res := resp.Results[byPod[k][intf]]
			res.Changed = r.Changed
			if r.Err != nil {
				res.Error = status.Convert(r.Err).Message()
			}
		}
		// SetEndStates logged each change. The pod's status is the
		// controller's to keep: it follows this node's WatchLinks.
		s.rc.log.Debug("remote end states set for peer", "pod", k.String(), "ends", len(states))
	}
	return resp, nil
}

// remoteEnd checks that req names a VXLAN link end of a pod on this node
// and returns the pod. recs, when not nil, keeps the pods' links by uid
// across calls, so that a batch reads each pod's record once.
func (s peerServer) remoteEnd(req *meshnetv1.SetRemoteStateRequest, recs map[podstore.Key]map[int]podstore.Link) (podstore.Key, error) {
	rc := s.rc
	k, err := podKey(req.GetEnd().GetPod())
	if err != nil {
		return podstore.Key{}, err
	}
	var v violations
	v.state("state", req.GetState())
	if err := v.err(); err != nil {
		return podstore.Key{}, err
	}
	byUID, ok := recs[k]
	if !ok {
		rec, found := rc.wiredPod(k)
		if !found {
			return podstore.Key{}, rc.notWired(k)
		}
		byUID = make(map[int]podstore.Link, len(rec.Links))
		for _, l := range rec.Links {
			byUID[l.UID] = l
		}
		if recs != nil {
			recs[k] = byUID
		}
	}
	intf, uid := req.GetEnd().GetInterface(), int(req.GetEnd().GetUid())
	if l, ok := byUID[uid]; ok && l.LocalIntf == intf && l.Kind == v1beta1.LinkKindVXLAN {
		return k, nil
	}
	return podstore.Key{}, status.Errorf(codes.NotFound, "pod %s has no VXLAN link %d on %s", k, uid, intf)
}
