package podlinks

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/shaping"
)

// violations collects every invalid field of a request, so that one answer
// names them all and nothing is changed.
type violations []*errdetails.BadRequest_FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// err is the InvalidArgument status for v, or nil; its message names every
// field, its details carry a BadRequest.
func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	msgs := make([]string, len(v))
	for i, f := range v {
		msgs[i] = f.Field + ": " + f.Description
	}
	st := status.New(codes.InvalidArgument, strings.Join(msgs, "; "))
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v}); err == nil {
		st = d
	}
	return st.Err()
}

func (v *violations) namespace(ns string) {
	if ns == "" {
		v.add("namespace", "required")
	} else if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		v.add("namespace", "%q is not a namespace name: %s", ns, strings.Join(errs, ", "))
	}
}

func (v *violations) pod(field, pod string) {
	if pod == "" {
		v.add(field, "required")
	} else if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		v.add(field, "%q is not a pod name: %s", pod, strings.Join(errs, ", "))
	}
}

// maxIfname is the longest interface name the kernel takes (IFNAMSIZ-1).
const maxIfname = 15

func (v *violations) ifname(field, name string) {
	switch {
	case name == "":
		v.add(field, "required")
	case len(name) > maxIfname:
		v.add(field, "%q is longer than %d bytes", name, maxIfname)
	case name == "." || name == "..":
		v.add(field, "%q is not an interface name", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '/' || r == ':' || r >= 0x7f }):
		v.add(field, "%q holds a character interface names cannot (space, '/', ':', control or non-ASCII)", name)
	}
}

// most refuses a list longer than the Topology CRD admits: meshnetd works
// on no more than a Topology can ask of it.
func (v *violations) most(field string, n, max int) {
	if n > max {
		v.add(field, "%d items; a Topology has at most %d", n, max)
	}
}

// applyAt checks that a change is asked for no further ahead than
// meshnetv1.MaxApplyAhead: what a caller sends cannot hold a call open.
func (v *violations) applyAt(field string, at *timestamppb.Timestamp, node string) {
	if at == nil {
		return
	}
	if err := at.CheckValid(); err != nil {
		v.add(field, "%v", err)
		return
	}
	if ahead := time.Until(at.AsTime()); ahead > meshnetv1.MaxApplyAhead {
		v.add(field, "%s is %v ahead of node %s's clock; at most %v", at.AsTime().Format(time.RFC3339Nano), ahead.Round(time.Millisecond), node, meshnetv1.MaxApplyAhead)
	}
}

func (v *violations) state(field string, s meshnetv1.LinkState) {
	if s != meshnetv1.LinkState_LINK_STATE_UP && s != meshnetv1.LinkState_LINK_STATE_DOWN {
		v.add(field, "%v is not LINK_STATE_UP or LINK_STATE_DOWN", s)
	}
}

// Limits of LinkSpec.mtu.
const (
	minMTU = 68
	maxMTU = 65535
)

func (v *violations) mtu(field string, mtu uint32) {
	if mtu < minMTU || mtu > maxMTU {
		v.add(field, "%d is outside %d..%d", mtu, minMTU, maxMTU)
	}
}

// netemSpec converts and validates an API NetemSpec; field is its path in
// the request ("netem", "links[0].netem").
func (v *violations) netemSpec(field string, p *meshnetv1.NetemSpec) shaping.Spec {
	s, err := netemconv.FromProto(p)
	for _, fe := range netemconv.Fields(err) {
		if fe.Field != "" {
			v.add(field+"."+fe.Field, "%s", fe.Reason)
		} else {
			v.add(field, "%s", fe.Reason)
		}
	}
	return s
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// routes converts and validates a route list; devs are the interfaces of
// the pod's netns, which a route's dev must name.
func (v *violations) routes(field string, rs []*meshnetv1.Route, devs map[string]links.Interface) []route {
	out := make([]route, 0, len(rs))
	var at []int // index in rs of each out
	for i, r := range rs {
		f := fmt.Sprintf("%s[%d]", field, i)
		dst, err := netip.ParsePrefix(r.GetDst())
		if err != nil {
			v.add(f+".dst", "%q is not a CIDR prefix", r.GetDst())
			continue
		}
		rt := route{Dst: dst.Masked(), Dev: r.GetDev()}
		if r.GetGw() != "" {
			gw, err := netip.ParseAddr(r.GetGw())
			switch {
			case err != nil:
				v.add(f+".gw", "%q is not an IP address", r.GetGw())
				continue
			case gw.Unmap().Is4() != dst.Addr().Unmap().Is4():
				v.add(f+".gw", "%s and dst %s differ in address family", gw, dst)
				continue
			}
			rt.Gw = gw.Unmap()
		}
		if rt.Dev != "" {
			n := len(*v)
			v.ifname(f+".dev", rt.Dev)
			if len(*v) > n {
				continue
			}
			if _, ok := devs[rt.Dev]; !ok {
				v.add(f+".dev", "pod has no interface %s", rt.Dev)
				continue
			}
		} else if !rt.Gw.IsValid() {
			v.add(f, "needs gw or dev")
			continue
		}
		for j, o := range out {
			if o.sameDst(rt) {
				v.add(f+".dst", "%s is also %s[%d]'s destination", rt.Dst, field, at[j])
			}
		}
		out = append(out, rt)
		at = append(at, i)
	}
	return out
}
