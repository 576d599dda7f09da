package linkserver

import (
	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/auth"
)

// topologies is what a mutating call needs: whoever may patch a pod's
// Topology may change its running links.
var topologies = auth.Access{
	Verb: "patch", Group: "networkop.co.uk", Resource: "topologies",
	Namespace: func(req any) string {
		if r, ok := req.(interface{ GetNamespace() string }); ok {
			return r.GetNamespace()
		}
		return ""
	},
}

// Policy is LinkService's part of meshnetd's access policy: every mutating
// call, and CaptureLink, needs a token allowed to patch topologies in the
// request's namespace;
// read calls (GetLink, ListLinks, WatchLinks) are open when readOpen, else need any
// valid token.
func Policy(readOpen bool) auth.Policy {
	read := auth.Access{Authenticated: !readOpen}
	return auth.Policy{
		meshnetv1.LinkService_SetLinkState_FullMethodName: topologies,
		meshnetv1.LinkService_SetNetem_FullMethodName:     topologies,
		meshnetv1.LinkService_ClearNetem_FullMethodName:   topologies,
		meshnetv1.LinkService_SetRoutes_FullMethodName:    topologies,
		meshnetv1.LinkService_ApplyPod_FullMethodName:     topologies,
		// A capture shows the link's traffic: the right of whoever may
		// change the link.
		meshnetv1.LinkService_CaptureLink_FullMethodName: topologies,
		meshnetv1.LinkService_GetLink_FullMethodName:     read,
		meshnetv1.LinkService_ListLinks_FullMethodName:   read,
		meshnetv1.LinkService_WatchLinks_FullMethodName:  read,
	}
}
