package linkserver

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
func (s *Server) SetNetem(ctx context.Context, req *meshnetv1.SetNetemRequest) (*meshnetv1.SetNetemResponse, error) {
	var spec shaping.Spec
	ls, err := s.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(),
		func(v *violations) {
			if req.GetNetem() == nil {
				v.add("netem", "required (ClearNetem removes shaping)")
				return
			}
			spec = v.netemSpec("netem", req.GetNetem())
		},
		func(p podstore.Pod, l podstore.Link) error {
			return s.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
				return s.applyNetem(n, st, p, l.LocalIntf, spec, false)
			})
		})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetNetemResponse{Link: ls}, nil
}

// ClearNetem implements meshnetv1.LinkServiceServer.
func (s *Server) ClearNetem(ctx context.Context, req *meshnetv1.ClearNetemRequest) (*meshnetv1.ClearNetemResponse, error) {
	ls, err := s.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(), nil,
		func(p podstore.Pod, l podstore.Link) error {
			return s.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
				return s.clearNetem(n, st, p, l.LocalIntf)
			})
		})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.ClearNetemResponse{Link: ls}, nil
}

// Shape makes each spec the egress shaping of an interface of pod k, as the
// wiring shapes the links it makes (CNI ADD, a link added to a running
// pod, a far end): the path SetNetem and ApplyPod take, so the
// distribution, which the kernel does not report, is recorded whoever
// shaped the link, and one record write serves all of a pod's links. A
// qdisc that already reads back as its spec is left alone. It returns why
// each interface that failed was not shaped.
func (s *Server) Shape(k podstore.Key, specs map[string]shaping.Spec) map[string]error {
	errs := map[string]error{}
	fail := func(err error) map[string]error {
		for intf := range specs {
			errs[intf] = err
		}
		return errs
	}
	p, ok := s.pods.Get(k)
	if !ok {
		return fail(fmt.Errorf("pod %s is not wired on node %s", k, s.node))
	}
	intfs := slices.Sorted(maps.Keys(specs))
	defer s.lockPod(k, intfs)()
	st, err := s.load(p)
	if err != nil {
		return fail(err)
	}
	n, err := openPod(p)
	if err != nil {
		return fail(errors.New(status.Convert(err).Message()))
	}
	defer n.Close()
	changed := false
	for _, intf := range intfs {
		c, err := s.applyNetem(n, &st, p, intf, specs[intf], true)
		changed = changed || c
		if err != nil {
			errs[intf] = err
		}
	}
	if changed {
		if err := s.saveRecord(p, st); err != nil {
			return fail(err)
		}
	}
	return errs
}

// applyNetem makes spec intf's shaping. With skipSame, a qdisc that already
// reads back as spec is not touched (ApplyPod's idempotence).
func (s *Server) applyNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string, spec shaping.Spec, skipSame bool) (bool, error) {
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
	s.log.Info("netem set", "pod", p.Key().String(), "link", intf, "node", s.node, "spec", fmt.Sprintf("%+v", spec))
	return true, nil
}

func (s *Server) clearNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string) (bool, error) {
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
	s.log.Info("netem cleared", "pod", p.Key().String(), "link", intf, "node", s.node)
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
