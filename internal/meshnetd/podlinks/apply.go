package podlinks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/shaping"
)

// linkPlan is one validated LinkSpec of an ApplyPod.
type linkPlan struct {
	spec  *meshnetv1.LinkSpec
	link  podstore.Link
	wired bool   // the link exists on this node
	why   string // why it is pending, when not wired
	netem shaping.Spec
	// peer is the other end of a veth on this node, which an mtu sets too.
	peer *podstore.Pod
}

// ApplyPod implements meshnetv1.LinkServiceServer.
func (s linkServer) ApplyPod(ctx context.Context, req *meshnetv1.ApplyPodRequest) (*meshnetv1.ApplyPodResponse, error) {
	return s.rc.apply(ctx, req)
}

// Reapply converges the pod to the last ApplyPod that converged for it:
// after a daemon restart, or once a new sandbox of the pod is wired. A pod
// that never had one is left alone.
func (rc *Reconciler) Reapply(ctx context.Context, pod podstore.Key) error {
	p, ok := rc.wiredPod(pod)
	if !ok {
		return rc.notWired(pod)
	}
	st, err := func() (podRecord, error) {
		defer rc.lockPod(pod, nil)()
		return rc.load(p)
	}()
	if err != nil || st.Applied == nil {
		return err
	}
	req := &meshnetv1.ApplyPodRequest{}
	if err := protojson.Unmarshal(st.Applied, req); err != nil {
		return fmt.Errorf("reapply pod %s: decode last apply: %w", pod, err)
	}
	_, err = rc.apply(ctx, req)
	return err
}

func (rc *Reconciler) apply(ctx context.Context, req *meshnetv1.ApplyPodRequest) (*meshnetv1.ApplyPodResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	if req.GetGeneration() < 0 {
		v.add("generation", "%d is negative", req.GetGeneration())
	}
	v.most("links", len(req.GetLinks()), v1beta1.MaxLinks)
	v.most("routes.routes", len(req.GetRoutes().GetRoutes()), v1beta1.MaxRoutes)
	v.applyAt("apply_at", req.GetApplyAt(), rc.cfg.NodeName)
	if err := v.err(); err != nil {
		return nil, err
	}
	if k := (podstore.Key{Namespace: req.GetNamespace(), Name: req.GetPod()}); rc.InCNI(k) {
		// As for a pod not wired yet: its ADD makes the links, and the
		// caller comes back once it is done (the sandbox fields it writes).
		return nil, status.Errorf(codes.NotFound, "pod %s is being wired or unwired by its CNI ADD or DEL on node %s; apply once it is done", k, rc.cfg.NodeName)
	}
	leave, err := rc.applying.enter(ctx, podstore.Key{Namespace: req.GetNamespace(), Name: req.GetPod()})
	if err != nil {
		return nil, err
	}
	defer leave()
	// The watcher reads the pod at the end of the call (Refresh), not at
	// each step of it.
	defer rc.watch.Hold(podstore.Key{Namespace: req.GetNamespace(), Name: req.GetPod()})()
	// The pod's set of links first, as its Topology has it now (before any
	// lock of this call: making and removing links takes their locks itself).
	var failed []error
	if rc.cfg.Topologies != nil {
		if err := rc.SyncLinks(ctx, podstore.Key{Namespace: req.GetNamespace(), Name: req.GetPod()}, req.GetGeneration()); err != nil {
			failed = append(failed, fmt.Errorf("links: %w", err))
		}
	}
	p, err := rc.lookup(req.GetNamespace(), req.GetPod())
	if err != nil {
		return nil, err
	}
	plans, extra := rc.plan(&v, p, req)
	if err := v.err(); err != nil {
		return nil, err
	}
	for _, pl := range plans {
		if pl.wired && pl.spec.State != nil {
			if err := rc.needRemote(p, pl.link); err != nil {
				return nil, err
			}
		}
	}
	if req.GetPrune() {
		for _, l := range p.Links {
			if !requested(plans, l.LocalIntf) {
				return nil, status.Errorf(codes.Unimplemented, "prune: pod %s has link %s that is not in links, and this meshnetd cannot delete links", p.Key(), l.LocalIntf)
			}
		}
	}

	// Everything up to here is ready ahead of time, and so is the record
	// of the admin states; the change is made on time (a LinkFault's edge,
	// sent ahead).
	if at := req.GetApplyAt(); at != nil && time.Until(at.AsTime()) > 0 {
		putBack, err := rc.recordAdminEarly(p, plans)
		if err != nil {
			return nil, err
		}
		if err := waitUntil(ctx, at); err != nil {
			putBack()
			return nil, err
		}
	}
	err = rc.withPod(p, extra, func(n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		return rc.applyLocal(ctx, &v, &failed, req, p, plans, n, st, devs)
	})
	if err != nil {
		return nil, err
	}
	farFailed, changedFar := rc.applyFarEnds(ctx, p, plans)
	failed = append(failed, farFailed...)
	if len(failed) > 0 {
		return nil, applyError(ctx, p, failed, changedFar)
	}
	return rc.applyResponse(p, plans, changedFar)
}

// applyLocal converges this node's ends of the pod's planned links and its
// routes, with the pod's locks held (withPod): admin states in one batch,
// then each link, then the routes, and records the request as applied when
// nothing failed. What fails is added to failed; the error is for the call
// (a bad route, an older generation).
func (rc *Reconciler) applyLocal(ctx context.Context, v *violations, failed *[]error, req *meshnetv1.ApplyPodRequest, p podstore.Pod, plans []linkPlan,
	n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
	var want []route
	if req.GetRoutes() != nil {
		want = v.routes("routes.routes", req.GetRoutes().GetRoutes(), devs)
		if err := v.err(); err != nil {
			return false, err
		}
	}
	changed := false
	if req.GetPodUid() != "" && st.PodUID != req.GetPodUid() {
		// State converged for another pod object of this name.
		st.PodUID, st.Generation, st.Applied = req.GetPodUid(), 0, nil
		changed = true
	}
	if g := req.GetGeneration(); g != 0 && g < st.Generation {
		return changed, status.Errorf(codes.Aborted, "pod %s: generation %d is older than %d, already converged", p.Key(), g, st.Generation)
	}
	// Admin states in one batch: one dump of the pod's routes and
	// addresses, one wait for carrier, however many links.
	admin := adminStates(plans)
	if err := rc.recordAdminAhead(p, st, devs, admin); err != nil {
		return changed, err
	}
	set, stateFailed := changeAdmins(n, st, devs, admin)
	for _, intf := range set {
		rc.logChange(true, "link admin state set", p, "link", intf, "up", admin[intf])
	}
	changed = changed || len(set) > 0
	for _, pl := range plans {
		if !pl.wired {
			continue
		}
		if err := ctx.Err(); err != nil {
			// Cancelled, or past its deadline: what is left is the
			// retry's, which waits for this call (see applying).
			*failed = append(*failed, status.FromContextError(err).Err())
			break
		}
		c, err := rc.convergeLink(n, st, p, pl, devs[pl.link.LocalIntf].Reading)
		changed = changed || c
		if err == nil {
			err = stateFailed[pl.link.LocalIntf]
		}
		if err != nil {
			st.LastError[pl.link.LocalIntf] = err.Error()
			*failed = append(*failed, fmt.Errorf("%s: %w", pl.link.LocalIntf, err))
			changed = true
			continue
		}
		if _, had := st.LastError[pl.link.LocalIntf]; had {
			delete(st.LastError, pl.link.LocalIntf)
			changed = true
		}
	}
	if req.GetRoutes() != nil {
		c, err := convergeRoutes(n, st, want)
		changed = changed || c
		if err != nil {
			*failed = append(*failed, fmt.Errorf("routes: %w", err))
		}
	}
	if len(*failed) == 0 {
		if g := req.GetGeneration(); g > st.Generation {
			st.Generation, changed = g, true
		}
		if last := (&meshnetv1.ApplyPodRequest{}); st.Applied == nil || protojson.Unmarshal(st.Applied, last) != nil || !proto.Equal(last, req) {
			applied, err := protojson.Marshal(req)
			if err != nil {
				return changed, err
			}
			st.Applied, changed = applied, true
		}
	}
	return changed, nil
}

// applyFarEnds sets the far ends of the planned VXLAN links' states, after
// the local locks are released (see setAdmin), in one call per peer node.
// changed is the links whose far end it changed, whose pods' statuses need
// reading back even when the rest of the call failed.
func (rc *Reconciler) applyFarEnds(ctx context.Context, p podstore.Pod, plans []linkPlan) (failed []error, changed []*meshnetv1.LinkResult) {
	var remote []RemoteState
	for _, pl := range plans {
		if pl.wired && pl.spec.State != nil && pl.link.Kind == v1beta1.LinkKindVXLAN {
			remote = append(remote, RemoteState{Link: pl.link, Up: isUp(pl.spec.GetState())})
		}
	}
	if len(remote) == 0 || ctx.Err() != nil {
		return nil, nil
	}
	for i, r := range rc.remote.SetRemoteStates(ctx, p.Key(), remote) {
		l := remote[i].Link
		if r.Err != nil {
			failed = append(failed, fmt.Errorf("%s: peer's end: %w", l.LocalIntf, r.Err))
		}
		if r.Changed {
			changed = append(changed, &meshnetv1.LinkResult{Interface: l.LocalIntf, Uid: uint32(l.UID),
				Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN, Peer: peerOf(p, l), PeerEndChanged: true})
		}
	}
	return failed, changed
}

// applyError is the call's status when something failed: the context's
// code when it ended, else the kernel's (kernelCode), with the far ends it
// changed as details.
func applyError(ctx context.Context, p podstore.Pod, failed []error, changedFar []*meshnetv1.LinkResult) error {
	all := errors.Join(failed...)
	code := kernelCode(all)
	if ctx.Err() != nil {
		code = status.FromContextError(ctx.Err()).Code()
	}
	st := status.Newf(code, "apply pod %s: %v", p.Key(), all)
	if code == codes.Unavailable && links.IsTransient(all) {
		st = kernelBusy(st)
	}
	if len(changedFar) > 0 {
		if withFar, err := st.WithDetails(&meshnetv1.ApplyPodResponse{Results: changedFar}); err == nil {
			st = withFar
		}
	}
	return st.Err()
}

// applyResponse says each link's phase and what the kernel has of the
// pod now, read once for the whole call.
func (rc *Reconciler) applyResponse(p podstore.Pod, plans []linkPlan, changedFar []*meshnetv1.LinkResult) (*meshnetv1.ApplyPodResponse, error) {
	peerEndChanged := map[string]bool{}
	for _, r := range changedFar {
		peerEndChanged[r.GetInterface()] = true
	}
	resp := &meshnetv1.ApplyPodResponse{}
	for _, l := range p.Links {
		resp.Results = append(resp.Results, &meshnetv1.LinkResult{
			Interface: l.LocalIntf, Uid: uint32(l.UID), Kind: l.Kind.Proto(), Peer: peerOf(p, l),
			Phase: meshnetv1.LinkPhase_LINK_PHASE_READY, PeerEndChanged: peerEndChanged[l.LocalIntf],
		})
	}
	for _, pl := range plans {
		if !pl.wired {
			resp.Results = append(resp.Results, &meshnetv1.LinkResult{
				Interface: pl.spec.GetInterface(), Uid: pl.spec.GetWiring().GetUid(), Kind: pl.spec.GetWiring().GetKind(),
				Peer: pl.spec.GetWiring().GetPeer(), Phase: meshnetv1.LinkPhase_LINK_PHASE_PENDING, Message: pl.why,
			})
		}
	}
	snap, rev, err := rc.watch.Refresh(p.Key())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp.Links, resp.Routes, resp.Revision = snap.Links, snap.Routes, rev
	return resp, nil
}

func requested(plans []linkPlan, intf string) bool {
	for _, pl := range plans {
		if pl.spec.GetInterface() == intf {
			return true
		}
	}
	return false
}

// plan validates the links of req into v and returns what to do for each,
// with the extra lock keys (veth peers on this node) the changes need.
func (rc *Reconciler) plan(v *violations, p podstore.Pod, req *meshnetv1.ApplyPodRequest) ([]linkPlan, []linklock.Key) {
	var plans []linkPlan
	var extra []linklock.Key
	seen := map[string]int{}
	for i, ls := range req.GetLinks() {
		f := fmt.Sprintf("links[%d]", i)
		n := len(*v)
		v.ifname(f+".interface", ls.GetInterface())
		if len(*v) > n {
			continue
		}
		if j, dup := seen[ls.GetInterface()]; dup {
			v.add(f+".interface", "%s is also links[%d]'s", ls.GetInterface(), j)
			continue
		}
		seen[ls.GetInterface()] = i
		pl := linkPlan{spec: ls}
		if ls.State != nil {
			v.state(f+".state", ls.GetState())
		}
		if ls.Mtu != nil {
			v.mtu(f+".mtu", ls.GetMtu())
		}
		if ls.GetNetem() != nil {
			pl.netem = v.netemSpec(f+".netem", ls.GetNetem())
		}
		pl.link, pl.wired = linkOf(p, ls.GetInterface())
		switch w := ls.GetWiring(); {
		case !pl.wired:
			pl.why = fmt.Sprintf("link %s is not wired on node %s yet", ls.GetInterface(), rc.cfg.NodeName)
		case w != nil && (w.GetUid() != uint32(pl.link.UID) || w.GetKind() != pl.link.Kind.Proto()):
			pl.wired = false
			pl.why = fmt.Sprintf("link %s is wired as %s uid %d, not %v uid %d; re-wiring is the CNI's", ls.GetInterface(),
				pl.link.Kind, pl.link.UID, w.GetKind(), w.GetUid())
		}
		if pl.wired && pl.link.Kind == v1beta1.LinkKindVeth && ls.Mtu != nil {
			if peer, ok := rc.wiredPod(podstore.Key{Namespace: p.Namespace, Name: pl.link.PeerPod}); ok {
				pl.peer = &peer
				extra = append(extra, linklock.Key{Namespace: p.Namespace, Pod: peer.Name, Interface: pl.link.PeerIntf})
			}
		}
		plans = append(plans, pl)
	}
	return plans, extra
}

// convergeLink brings one link to the MTU and netem its spec has (its admin
// state is set for all links at once, by changeAdmins); fields the
// kernel already has are not touched, so a repeated apply changes nothing.
func (rc *Reconciler) convergeLink(n *podNetns, st *podRecord, p podstore.Pod, pl linkPlan, cur links.Reading) (bool, error) {
	intf := pl.link.LocalIntf
	changed := false
	if pl.spec.Mtu != nil && cur.MTU != int(pl.spec.GetMtu()) {
		if err := links.SetMTU(n.links, intf, int(pl.spec.GetMtu())); err != nil {
			return changed, err
		}
		changed = true
		rc.logChange(true, "mtu set", p, "link", intf, "mtu", pl.spec.GetMtu())
	}
	if pl.spec.Mtu != nil && pl.peer != nil {
		if err := setPeerMTU(*pl.peer, pl.link.PeerIntf, int(pl.spec.GetMtu())); err != nil {
			return changed, err
		}
	}
	if pl.spec.GetNetem() != nil {
		var c bool
		var err error
		if pl.netem == (shaping.Spec{}) {
			c, err = rc.clearNetem(n, st, p, intf)
		} else {
			c, err = rc.applyNetem(n, st, p, intf, pl.netem, true)
		}
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

func setPeerMTU(peer podstore.Pod, intf string, mtu int) error {
	n, err := links.OpenNetns(peer.Netns)
	if err != nil {
		return fmt.Errorf("veth peer %s: %w", peer.Key(), err)
	}
	defer n.Close()
	return links.SetMTU(n, intf, mtu)
}

// adminStates are the admin states the plans set, up by interface, for
// the links wired here.
func adminStates(plans []linkPlan) map[string]bool {
	admin := map[string]bool{}
	for _, pl := range plans {
		if pl.wired && pl.spec.State != nil {
			admin[pl.link.LocalIntf] = isUp(pl.spec.GetState())
		}
	}
	return admin
}

// waitUntil returns at the moment at (at once when it is unset or passed),
// or with ctx's error when ctx ends first.
func waitUntil(ctx context.Context, at *timestamppb.Timestamp) error {
	if at == nil {
		return nil
	}
	d := time.Until(at.AsTime())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
