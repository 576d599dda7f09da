package linkserver

import (
	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/auth"
)

// Policy is LinkService's part of meshnetd's access policy: every mutating
// call, and CaptureLink (a capture shows the link's traffic), needs a token
// allowed to patch topologies in the request's namespace; read calls
// (GetLink, ListLinks, WatchLinks) one allowed to list them there, or in
// every namespace for a request that names none, unless readOpen.
func Policy(readOpen bool) auth.Policy {
	read := auth.Topologies("list")
	if readOpen {
		read = auth.Access{}
	}
	change := auth.Topologies("patch")
	return auth.Policy{
		meshnetv1.LinkService_SetLinkState_FullMethodName: change,
		meshnetv1.LinkService_SetNetem_FullMethodName:     change,
		meshnetv1.LinkService_ClearNetem_FullMethodName:   change,
		meshnetv1.LinkService_SetRoutes_FullMethodName:    change,
		meshnetv1.LinkService_ApplyPod_FullMethodName:     change,
		meshnetv1.LinkService_CaptureLink_FullMethodName:  change,
		meshnetv1.LinkService_GetLink_FullMethodName:      read,
		meshnetv1.LinkService_ListLinks_FullMethodName:    read,
		meshnetv1.LinkService_WatchLinks_FullMethodName:   read,
	}
}
