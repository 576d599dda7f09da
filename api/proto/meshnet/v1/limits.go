package meshnetv1

import "time"

// Bounds of a message on meshnet's API, for servers and clients alike. The
// largest request is an ApplyPod for the largest Topology the CRD admits
// (v1beta1.MaxLinks links, v1beta1.MaxRoutes routes) with every field at its
// longest: 9.6 MB in protobuf, 15.4 MB as REST's JSON (TestLargestRequestFits).
// A server reads nothing larger, so a caller cannot make it hold more.
const (
	// MaxMessageBytes bounds a gRPC message, either way.
	MaxMessageBytes = 12 << 20
	// MaxRESTBodyBytes bounds a REST request's JSON body, with room for
	// indentation.
	MaxRESTBodyBytes = 24 << 20
)

// MaxApplyAhead bounds ApplyPodRequest.apply_at: how far ahead of a node's
// clock a change may be sent, so that no caller holds a call open longer.
// The controller sends a LinkFault's edges well within it.
const MaxApplyAhead = time.Second
