package v1beta1

import meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"

// The one mapping of a link kind between the Topology's spelling and the
// gRPC API's, and to the kernel's link type.

var protoLinkKinds = map[LinkKind]meshnetv1.LinkKind{
	LinkKindVeth:    meshnetv1.LinkKind_LINK_KIND_VETH,
	LinkKindVXLAN:   meshnetv1.LinkKind_LINK_KIND_VXLAN,
	LinkKindPhy:     meshnetv1.LinkKind_LINK_KIND_PHYSICAL,
	LinkKindMacvlan: meshnetv1.LinkKind_LINK_KIND_MACVLAN,
}

// Proto is k in the gRPC API's terms; UNSPECIFIED for a link not wired yet
// (no kind).
func (k LinkKind) Proto() meshnetv1.LinkKind { return protoLinkKinds[k] }

// LinkKindOf is the Topology's spelling of the API's kind; "" for
// UNSPECIFIED.
func LinkKindOf(p meshnetv1.LinkKind) LinkKind {
	for k, v := range protoLinkKinds {
		if v == p {
			return k
		}
	}
	return ""
}

// Kernel is the kernel's link type that realises k ("veth", "vxlan",
// "macvlan"); "" for no kind.
func (k LinkKind) Kernel() string {
	switch k {
	case LinkKindVeth:
		return "veth"
	case LinkKindVXLAN, LinkKindPhy:
		return "vxlan"
	case LinkKindMacvlan:
		return "macvlan"
	}
	return ""
}
