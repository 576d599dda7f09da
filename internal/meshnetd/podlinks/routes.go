package podlinks

import (
	"context"
	"slices"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// routesIn reads back the managed routes st.Routes from the kernel, each as
// the kernel has it (dev resolved); routes through a link meshnet took down
// are not in the kernel until it comes up.
func routesIn(n *podNetns, st *podRecord, devs map[string]links.Interface) ([]*meshnetv1.Route, error) {
	if len(st.Routes) == 0 {
		return nil, nil
	}
	byDev, err := links.StaticRoutesOf(n.links, devs)
	if err != nil {
		return nil, err
	}
	var kernel []route
	for dev, rs := range byDev {
		if dev == "lo" {
			continue
		}
		for _, r := range rs {
			kernel = append(kernel, fromLinksRoute(r))
		}
	}
	var out []*meshnetv1.Route
	for _, want := range st.Routes {
		for _, k := range kernel {
			if !k.sameDst(want) || (want.Gw.IsValid() && k.Gw != want.Gw) || (want.Dev != "" && k.Dev != want.Dev) {
				continue
			}
			r := &meshnetv1.Route{Dst: k.Dst.String(), Dev: k.Dev}
			if k.Gw.IsValid() {
				r.Gw = k.Gw.String()
			}
			out = append(out, r)
			break
		}
	}
	return out, nil
}

// convergeRoutes makes want the managed route set: managed routes not in
// want are deleted, the others added or replaced. A route through a link
// meshnet took down is kept with that link's saved routes, for its up.
func convergeRoutes(n *podNetns, st *podRecord, want []route) (bool, error) {
	changed := false
	for _, old := range st.Routes {
		if slices.ContainsFunc(want, old.sameDst) {
			continue
		}
		for dev, sv := range st.Down {
			sv.Routes = slices.DeleteFunc(sv.Routes, old.sameDst)
			st.Down[dev] = sv
		}
		if err := links.DeleteRoute(n.links, old.links()); err != nil {
			return changed, err
		}
		changed = true
	}
	have := map[string][]route{} // static routes per dev, listed once
	for _, r := range want {
		if sv, down := st.Down[r.Dev]; down && r.Dev != "" {
			sv.Routes = append(slices.DeleteFunc(sv.Routes, r.sameDst), r)
			st.Down[r.Dev] = sv
			changed = true
			continue
		}
		if r.Dev != "" {
			rs, listed := have[r.Dev]
			if !listed {
				kernel, err := links.StaticRoutes(n.links, r.Dev)
				if err != nil {
					return changed, err
				}
				rs = make([]route, 0, len(kernel))
				for _, k := range kernel {
					rs = append(rs, fromLinksRoute(k))
				}
				have[r.Dev] = rs
			}
			if slices.ContainsFunc(rs, func(k route) bool { return k.sameDst(r) && k.Gw == r.Gw }) {
				continue
			}
		}
		if err := links.ReplaceRoute(n.links, r.links()); err != nil {
			return changed, err
		}
		changed = true
	}
	if !slices.Equal(st.Routes, want) {
		st.Routes = want
		changed = true
	}
	return changed, nil
}

// SetRoutes implements meshnetv1.LinkServiceServer.
func (s linkServer) SetRoutes(ctx context.Context, req *meshnetv1.SetRoutesRequest) (*meshnetv1.SetRoutesResponse, error) {
	rc := s.rc
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.most("routes", len(req.GetRoutes()), v1beta1.MaxRoutes)
	if err := v.err(); err != nil {
		return nil, err
	}
	p, err := rc.lookup(req.GetNamespace(), req.GetPod())
	if err != nil {
		return nil, err
	}
	var out []*meshnetv1.Route
	err = rc.withPod(p, nil, func(n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		want := v.routes("routes", req.GetRoutes(), devs)
		if err := v.err(); err != nil {
			return false, err
		}
		changed, err := convergeRoutes(n, st, want)
		if err != nil {
			return changed, err
		}
		rc.logChange(changed, "routes set", p, "routes", len(want))
		out, err = routesIn(n, st, devs)
		return changed, err
	})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetRoutesResponse{Routes: out}, nil
}
