package podlinks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/shaping"
)

// SetNetem implements meshnetv1.LinkServiceServer.
func (s linkServer) SetNetem(ctx context.Context, req *meshnetv1.SetNetemRequest) (*meshnetv1.SetNetemResponse, error) {
	rc := s.rc
	var spec shaping.Spec
	ls, err := rc.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(),
		func(v *violations) {
			if req.GetNetem() == nil {
				v.add("netem", "required (ClearNetem removes shaping)")
				return
			}
			spec = v.netemSpec("netem", req.GetNetem())
		},
		func(p podstore.Pod, l podstore.Link) error {
			return rc.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
				return rc.applyNetem(n, st, p, l.LocalIntf, spec, false)
			})
		})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetNetemResponse{Link: ls}, nil
}

// ClearNetem implements meshnetv1.LinkServiceServer.
func (s linkServer) ClearNetem(ctx context.Context, req *meshnetv1.ClearNetemRequest) (*meshnetv1.ClearNetemResponse, error) {
	rc := s.rc
	ls, err := rc.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(), nil,
		func(p podstore.Pod, l podstore.Link) error {
			return rc.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
				return rc.clearNetem(n, st, p, l.LocalIntf)
			})
		})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.ClearNetemResponse{Link: ls}, nil
}

// Wired is told how ends of pod k were made (at CNI ADD, adding a
// link to a running pod, making a far end for a peer), by interface: shape
// holds the ends made, each with its egress shaping (nil: none), errs why
// each other end is not as its Topology wants. The ends made are shaped on
// the path SetNetem and ApplyPod take: a qdisc that reads back as its spec
// is left alone, and the distribution, which the kernel does not report,
// is recorded whoever shaped the link. Each end's last error in the pod's
// record becomes why it failed, or none: the one record of a link's last
// error, written once for all of the ends. It returns why each end it
// could not shape was not.
func (rc *Reconciler) Wired(k podstore.Key, shape map[string]*shaping.Spec, errs map[string]string) map[string]error {
	failed := map[string]error{}
	fail := func(err error) map[string]error {
		for intf, spec := range shape {
			if spec != nil {
				failed[intf] = err
			}
		}
		return failed
	}
	p, ok := rc.cfg.Store.Get(k)
	if !ok {
		return fail(fmt.Errorf("pod %s is not wired on node %s", k, rc.cfg.NodeName))
	}
	intfs := slices.Sorted(maps.Keys(shape))
	for intf := range errs {
		if _, ok := shape[intf]; !ok {
			intfs = append(intfs, intf)
		}
	}
	defer rc.lockPod(k, intfs)()
	st, err := rc.load(p)
	if err != nil {
		return fail(err)
	}
	var n *podNetns
	defer func() {
		if n != nil {
			n.Close()
		}
	}()
	changed := false
	for _, intf := range intfs {
		msg := errs[intf]
		if spec := shape[intf]; spec != nil && msg == "" {
			var err error
			if n == nil {
				if n, err = openPod(p); err != nil {
					return fail(errors.New(status.Convert(err).Message()))
				}
			}
			c, err := rc.applyNetem(n, &st, p, intf, *spec, true)
			changed = changed || c
			if err != nil {
				failed[intf], msg = err, err.Error()
			}
		}
		if old, had := st.LastError[intf]; msg == "" && had {
			delete(st.LastError, intf)
			changed = true
		} else if msg != "" && old != msg {
			st.LastError[intf] = msg
			changed = true
		}
	}
	if changed {
		if err := rc.saveRecord(p, st); err != nil {
			return fail(err)
		}
	}
	return failed
}

// applyNetem makes spec intf's shaping. With skipSame, a qdisc that already
// reads back as spec is not touched (ApplyPod's idempotence).
func (rc *Reconciler) applyNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string, spec shaping.Spec, skipSame bool) (bool, error) {
	if skipSame {
		cur, err := netem.Get(n.handle, intf)
		if err == nil && cur.Owner == netem.OwnerMeshnet && cur.Undecoded == nil &&
			sameNetem(cur.Spec, spec) && st.Distribution[intf] == string(spec.Distribution) {
			return false, nil
		}
	}
	if err := netem.Apply(n.handle, intf, spec); err != nil {
		return false, err
	}
	st.Distribution[intf] = string(spec.Distribution)
	rc.log.Info("netem set", "pod", p.Key().String(), "link", intf, "spec", fmt.Sprintf("%+v", spec))
	return true, nil
}

func (rc *Reconciler) clearNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string) (bool, error) {
	cur, err := netem.Get(n.handle, intf)
	if err != nil {
		return false, err
	}
	if cur.Owner == netem.OwnerNone {
		delete(st.Distribution, intf)
		return false, nil
	}
	if err := netem.Clear(n.handle, intf); err != nil {
		return false, err
	}
	delete(st.Distribution, intf)
	rc.log.Info("netem cleared", "pod", p.Key().String(), "link", intf)
	return true, nil
}

// sameNetem reports whether the kernel's read-back got equals the effective
// form of want (defaults resolved as Apply resolves them; the kernel does not
// report the distribution).
func sameNetem(got, want shaping.Spec) bool {
	if want.Limit == 0 {
		want.Limit = shaping.DefaultLimit(want)
	}
	if want.Reorder > 0 && want.Gap == 0 {
		want.Gap = 1
	}
	want.Distribution, got.Distribution = "", ""
	return got == want
}
