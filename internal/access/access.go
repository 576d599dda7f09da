// Package access is meshnet's one table of who may call what on meshnetd:
// each gRPC method (REST calls reach them through the gateway) with the
// Kubernetes permission its caller needs. meshnetd enforces it
// (auth.UnaryInterceptor, auth.StreamInterceptor) and the controller's relay
// authorizes by it before relaying a user's call; a method missing from it
// is refused.
package access

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/auth"
)

// Policy is meshnetd's whole access policy:
//   - LinkService: every mutating call, and CaptureLink (a capture shows
//     the link's traffic), needs patch on topologies in the request's
//     namespace; reads (GetLink, ListLinks, WatchLinks) list there, or in
//     every namespace for a request that names none.
//   - DataService (the graph, the topology page): list on topologies in
//     the request's namespace.
//   - PeerService, for other daemons: patch on topologies/status in the
//     namespace of the pod whose end is asked for, which meshnetd's
//     ServiceAccount may and a pod's user may not.
//   - Health and reflection: open, so that grpcurl works with nothing but
//     the address.
//
// readOpen opens the reads (LinkService's and DataService's) to anyone.
func Policy(readOpen bool) auth.Policy {
	read := auth.Topologies("list")
	if readOpen {
		read = auth.Access{}
	}
	change := auth.Topologies("patch")
	p := auth.Policy{
		meshnetv1.LinkService_SetLinkState_FullMethodName: change,
		meshnetv1.LinkService_SetNetem_FullMethodName:     change,
		meshnetv1.LinkService_ClearNetem_FullMethodName:   change,
		meshnetv1.LinkService_SetRoutes_FullMethodName:    change,
		meshnetv1.LinkService_ApplyPod_FullMethodName:     change,
		meshnetv1.LinkService_CaptureLink_FullMethodName:  change,
		meshnetv1.LinkService_GetLink_FullMethodName:      read,
		meshnetv1.LinkService_ListLinks_FullMethodName:    read,
		meshnetv1.LinkService_WatchLinks_FullMethodName:   read,

		meshnetv1.DataService_ListTopologies_FullMethodName: read,
		meshnetv1.DataService_GetNodeGraph_FullMethodName:   read,
		meshnetv1.DataService_ListGraphNodes_FullMethodName: read,
		meshnetv1.DataService_ListGraphEdges_FullMethodName: read,
		meshnetv1.DataService_GetGraphEdge_FullMethodName:   read,

		meshnetv1.PeerService_CreateRemoteEnd_FullMethodName: peer(endNamespace),
		meshnetv1.PeerService_DeleteRemoteEnd_FullMethodName: peer(endNamespace),
		meshnetv1.PeerService_SetRemoteState_FullMethodName:  peer(endNamespace),
		meshnetv1.PeerService_SetRemoteStates_FullMethodName: peer(batchNamespace),
	}
	for _, m := range []string{
		healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName, healthpb.Health_List_FullMethodName,
		reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName,
		reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName,
	} {
		p[m] = auth.Access{}
	}
	return p
}

// peer is what PeerService's calls need, in the namespace ns tells.
func peer(ns func(any) string) auth.Access {
	return auth.Access{Verb: "patch", Group: v1beta1.GroupVersion.Group, Resource: "topologies", Subresource: "status", Namespace: ns}
}

// endNamespace is the namespace of the pod whose end a PeerService call
// asks for.
func endNamespace(req any) string {
	if r, ok := req.(interface{ GetEnd() *meshnetv1.LinkEnd }); ok {
		return r.GetEnd().GetPod().GetNamespace()
	}
	return ""
}

// batchNamespace is the one namespace of a batch's ends; ends of several
// namespaces ask for access in all of them (""), so that access in one
// cannot reach pods of another.
func batchNamespace(req any) string {
	r, ok := req.(*meshnetv1.SetRemoteStatesRequest)
	if !ok || len(r.GetEnds()) == 0 {
		return ""
	}
	ns := endNamespace(r.GetEnds()[0])
	for _, e := range r.GetEnds() {
		if endNamespace(e) != ns {
			return ""
		}
	}
	return ns
}
