package v1beta1

import meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"

// The one mapping of a link's admin state between the Topology's spelling
// and the gRPC API's.

// Proto is s in the gRPC API's terms: down, or up for anything else.
func (s LinkState) Proto() meshnetv1.LinkState {
	if s == LinkDown {
		return meshnetv1.LinkState_LINK_STATE_DOWN
	}
	return meshnetv1.LinkState_LINK_STATE_UP
}

// LinkStateOf is the Topology's spelling of the API's state: down, or up
// for anything else.
func LinkStateOf(p meshnetv1.LinkState) LinkState {
	if p == meshnetv1.LinkState_LINK_STATE_DOWN {
		return LinkDown
	}
	return LinkUp
}
