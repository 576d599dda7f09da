package podlinks

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// isUp is an admin state of the API in the daemon's one form of it, up or
// not. A front validates the state first (violations.state).
func isUp(s meshnetv1.LinkState) bool { return s == meshnetv1.LinkState_LINK_STATE_UP }

// apiState is the daemon's form of an admin state in the API's.
func apiState(up bool) meshnetv1.LinkState {
	if up {
		return meshnetv1.LinkState_LINK_STATE_UP
	}
	return meshnetv1.LinkState_LINK_STATE_DOWN
}

// changeAdmins sets each interface of want up (true) or down, from its
// state in cur, keeping what down flushes in st for the up: one batch in
// the kernel, however many interfaces. changed lists the interfaces it
// changed, failed those it could not; the caller saves st.
func changeAdmins(n *podNetns, st *podRecord, cur map[string]links.Interface, want map[string]bool) (changed []string, failed map[string]error) {
	var down []string
	up := map[string]links.Saved{}
	for intf, u := range want {
		saved, wasDown := st.Down[intf]
		switch adminUp := cur[intf].AdminUp; {
		case !u && adminUp:
			down = append(down, intf)
		case !u, adminUp && !wasDown:
			// Already so; a down keeps what the first down saved.
		default:
			up[intf] = saved.links()
		}
	}
	failed = map[string]error{}
	if len(down) > 0 {
		r := links.SetAdminDown(n.links, cur, down...)
		for intf, sv := range r.Saved {
			st.Down[intf] = fromSaved(sv)
			changed = append(changed, intf)
		}
		maps.Copy(failed, r.Failed)
	}
	if len(up) > 0 {
		r := links.SetAdminUp(n.links, cur, up)
		for intf := range up {
			if err, bad := r.Failed[intf]; bad {
				failed[intf] = err
				continue
			}
			delete(st.Down, intf)
			changed = append(changed, intf)
		}
	}
	slices.Sort(changed)
	return changed, failed
}

// setAdmin changes a link's admin state on this node and, when remote is
// set and the link is VXLAN, its far end. The far end is called after the
// local locks are released, so that two nodes changing both ends of one link
// at once cannot wait on each other. changed is whether this node's end
// changed.
func (rc *Reconciler) setAdmin(ctx context.Context, p podstore.Pod, l podstore.Link, up, remote bool) (changed bool, err error) {
	err = rc.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
		cur, err := readInterfaces(n.links, l.LocalIntf)
		if err != nil {
			return false, err
		}
		if _, ok := cur[l.LocalIntf]; !ok {
			return false, status.Errorf(codes.NotFound, "pod %s: no interface %s in its network namespace", p.Key(), l.LocalIntf)
		}
		c, failed := changeAdmins(n, st, cur, map[string]bool{l.LocalIntf: up})
		if err := failed[l.LocalIntf]; err != nil {
			return false, err
		}
		changed = len(c) > 0
		rc.logChange(changed, "link admin state set", p, "link", l.LocalIntf, "up", up)
		return changed, nil
	})
	if err != nil || !remote || l.Kind != v1beta1.LinkKindVXLAN {
		return changed, err
	}
	if err := rc.remote.SetRemoteStates(ctx, p.Key(), []RemoteState{{Link: l, Up: up}})[0].Err; err != nil {
		code := status.Code(err)
		if code == codes.Unknown || code == codes.OK {
			code = codes.Unavailable
		}
		return changed, status.Errorf(code, "pod %s link %s: this end is set, but setting the peer's end (pod %s on node %s) failed: %v",
			p.Key(), l.LocalIntf, l.PeerPod, l.PeerNodeIP, err)
	}
	return changed, nil
}

// SetLinkState implements meshnetv1.LinkServiceServer.
func (s linkServer) SetLinkState(ctx context.Context, req *meshnetv1.SetLinkStateRequest) (*meshnetv1.SetLinkStateResponse, error) {
	rc := s.rc
	ls, err := rc.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(),
		func(v *violations) { v.state("state", req.GetState()) },
		func(p podstore.Pod, l podstore.Link) error {
			if err := rc.needRemote(p, l); err != nil {
				return err
			}
			_, err := rc.setAdmin(ctx, p, l, isUp(req.GetState()), true)
			return err
		})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetLinkStateResponse{Link: ls}, nil
}

func (rc *Reconciler) needRemote(p podstore.Pod, l podstore.Link) error {
	if l.Kind == "vxlan" && rc.remote == nil {
		return status.Errorf(codes.FailedPrecondition, "pod %s link %s is VXLAN and this meshnetd has no peer client to set the remote end", p.Key(), l.LocalIntf)
	}
	return nil
}

// SetEndStates sets ends of a pod on this node up (true) or down, and
// nothing else: what PeerService.SetRemoteStates does for a peer node's
// meshnetd. The pod is locked, read and saved once for all of them; its
// last apply takes the states, which a restart re-applies. Each end has
// its own result: changed when it was not in that state already, or why
// it was not set.
func (rc *Reconciler) SetEndStates(ctx context.Context, pod podstore.Key, states map[string]bool) map[string]EndResult {
	out := make(map[string]EndResult, len(states))
	failAll := func(err error) map[string]EndResult {
		for intf := range states {
			out[intf] = EndResult{Err: err}
		}
		return out
	}
	var v violations
	v.namespace(pod.Namespace)
	v.pod("pod", pod.Name)
	if err := v.err(); err != nil {
		return failAll(err)
	}
	p, err := rc.lookup(pod.Namespace, pod.Name)
	if err != nil {
		return failAll(err)
	}
	want := map[string]bool{}
	for intf, up := range states {
		var v violations
		v.ifname("interface", intf)
		if err := v.err(); err != nil {
			out[intf] = EndResult{Err: err}
			continue
		}
		if _, ok := linkOf(p, intf); !ok {
			out[intf] = EndResult{Err: status.Errorf(codes.NotFound, "pod %s has no meshnet link %s", p.Key(), intf)}
			continue
		}
		want[intf] = up
	}
	if len(want) == 0 {
		return out
	}
	if err := ctx.Err(); err != nil {
		return failAll(status.FromContextError(err).Err())
	}
	var failed map[string]error
	err = rc.withPod(p, nil, func(n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		if err := rc.recordAdminAhead(p, st, devs, want); err != nil {
			return false, err
		}
		var changed []string
		changed, failed = changeAdmins(n, st, devs, want)
		for _, intf := range changed {
			out[intf] = EndResult{Changed: true}
			rc.log.Info("link admin state set", "pod", p.Key().String(), "link", intf, "up", want[intf])
		}
		return len(changed) > 0, nil
	})
	for intf := range want {
		switch {
		case err != nil:
			out[intf] = EndResult{Err: err}
		case failed[intf] != nil:
			out[intf] = EndResult{Err: kernelErr(failed[intf])}
		case !out[intf].Changed:
			out[intf] = EndResult{}
		}
	}
	return out
}

// recordAdminAhead writes the admin states about to be set (up by
// interface) into the pod's last apply and saves it before the kernel is
// changed: the kernel keeps what it was given across a daemon restart, and
// a daemon killed between the kernel's change and the record's re-applied
// the older state at its restart, taking a held link up for a moment. Only
// the states the kernel does not have yet are written, and only when the
// last apply does not have them either.
func (rc *Reconciler) recordAdminAhead(p podstore.Pod, st *podRecord, devs map[string]links.Interface, up map[string]bool) error {
	ahead, err := st.followAdmin(notInKernel(devs, up))
	if err != nil {
		// A last apply that does not decode is replaced by the next
		// apply that converges; the states are set all the same.
		rc.log.Warn("last apply not updated with the links' states", "pod", p.Key().String(), "error", err)
		return nil
	}
	if !ahead {
		return nil
	}
	return rc.saveRecord(p, *st)
}

// notInKernel are the states of up (by interface) the kernel's interfaces
// devs do not have yet.
func notInKernel(devs map[string]links.Interface, up map[string]bool) map[string]bool {
	changing := maps.Clone(up)
	maps.DeleteFunc(changing, func(intf string, u bool) bool { d, ok := devs[intf]; return ok && d.AdminUp == u })
	return changing
}

// SetEndState is SetEndStates for one end, which it reads back: what
// PeerService.SetRemoteState does, for peers that send one end per call.
func (rc *Reconciler) SetEndState(ctx context.Context, pod podstore.Key, intf string, up bool) (_ *meshnetv1.LinkStatus, changed bool, err error) {
	r := rc.SetEndStates(ctx, pod, map[string]bool{intf: up})[intf]
	if r.Err != nil {
		return nil, false, r.Err
	}
	p, err := rc.lookup(pod.Namespace, pod.Name)
	if err != nil {
		return nil, false, err
	}
	ls, err := rc.readLink(p, intf)
	return ls, r.Changed, err
}

// recordAdminEarly writes the admin states of an ApplyPod sent ahead of its
// moment (a LinkFault's edge) into the pod's last apply while the call
// waits, so that no record is written at the moment itself: written there,
// it came before each edge's kernel change and made the edges 3 ms later.
// putBack writes back what the kernel has, for a call called off before
// its moment; a meshnetd that stops while the call waits re-applies the
// edge at its restart, early by at most the call's wait.
func (rc *Reconciler) recordAdminEarly(p podstore.Pod, plans []linkPlan) (putBack func(), err error) {
	admin := adminStates(plans)
	if len(admin) == 0 {
		return func() {}, nil
	}
	var wrote map[string]bool
	err = rc.withPod(p, nil, func(_ *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		wrote = notInKernel(devs, admin)
		return st.followAdmin(wrote)
	})
	if err != nil {
		return nil, err
	}
	return func() {
		err := rc.withPod(p, nil, func(_ *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
			kernel := map[string]bool{}
			for intf := range wrote {
				if d, ok := devs[intf]; ok {
					kernel[intf] = d.AdminUp
				}
			}
			return st.followAdmin(kernel)
		})
		if err != nil {
			rc.log.Warn("last apply not put back after a call called off", "pod", p.Key().String(), "error", err)
		}
	}, nil
}
