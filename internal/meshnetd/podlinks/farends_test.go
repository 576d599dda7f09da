package podlinks

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// oldPeer is a meshnetd from before SetRemoteStates: it sets one end per
// call, and fails for r9.
type oldPeer struct {
	meshnetv1.PeerServiceClient
	calls int
}

func (p *oldPeer) SetRemoteStates(context.Context, *meshnetv1.SetRemoteStatesRequest, ...grpc.CallOption) (*meshnetv1.SetRemoteStatesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method SetRemoteStates")
}

func (p *oldPeer) SetRemoteState(_ context.Context, req *meshnetv1.SetRemoteStateRequest, _ ...grpc.CallOption) (*meshnetv1.SetRemoteStateResponse, error) {
	p.calls++
	if req.GetEnd().GetPod().GetName() == "r9" {
		return nil, status.Error(codes.NotFound, "pod lab/r9 is not wired on node node-b")
	}
	return &meshnetv1.SetRemoteStateResponse{Changed: true}, nil
}

// TestSetRemoteStatesOnAnOlderPeer: during a rollout, a peer without
// SetRemoteStates gets one SetRemoteState per end, and each end's result
// is its own.
func TestSetRemoteStatesOnAnOlderPeer(t *testing.T) {
	end := func(pod string) *meshnetv1.SetRemoteStateRequest {
		return &meshnetv1.SetRemoteStateRequest{End: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: "lab", Name: pod}, Interface: "eth1", Uid: 1},
			State: meshnetv1.LinkState_LINK_STATE_DOWN}
	}
	peer := &oldPeer{}
	got, err := setRemoteStatesOn(context.Background(), peer, &meshnetv1.SetRemoteStatesRequest{Ends: []*meshnetv1.SetRemoteStateRequest{end("r2"), end("r9")}})
	if err != nil {
		t.Fatal(err)
	}
	if peer.calls != 2 || len(got) != 2 || !got[0].GetChanged() || got[0].GetError() != "" || got[1].GetChanged() || got[1].GetError() == "" {
		t.Fatalf("%d calls, results %v; want 2 calls, r2 changed and r9 failed", peer.calls, got)
	}
}
