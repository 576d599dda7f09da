package meshnetv1_test

import (
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

// largestApplyPod is the largest request meshnet's API admits: an ApplyPod
// of the CRD's most links and routes, every field at its longest.
func largestApplyPod() *meshnetv1.ApplyPodRequest {
	long := func(n int) string { return strings.Repeat("a", n) }
	const ip6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	req := &meshnetv1.ApplyPodRequest{Namespace: long(63), Pod: long(253), PodUid: long(36), Generation: 1 << 62, Prune: true, Routes: &meshnetv1.RouteSet{}}
	for range v1beta1.MaxLinks {
		state, mtu, d := meshnetv1.LinkState_LINK_STATE_DOWN, uint32(65535), durationpb.New(274*time.Second+time.Nanosecond)
		req.Links = append(req.Links, &meshnetv1.LinkSpec{
			Interface: long(15), State: &state, Mtu: &mtu,
			Wiring: &meshnetv1.LinkWiring{
				Uid: 1<<32 - 1, Kind: meshnetv1.LinkKind_LINK_KIND_PHYSICAL, LocalIp: ip6 + "/128", PeerIp: ip6 + "/128",
				Peer: &meshnetv1.Peer{Peer: &meshnetv1.Peer_Pod{Pod: &meshnetv1.PodPeer{
					Pod: &meshnetv1.PodRef{Namespace: long(63), Name: long(253)}, Interface: long(15), Node: long(253),
				}}},
				Vxlan: &meshnetv1.Vxlan{Vni: 1<<24 - 1, LocalVtep: ip6, RemoteVtep: ip6, UdpPort: 65535, Parent: long(15)},
			},
			Netem: &meshnetv1.NetemSpec{
				Delay: d, Jitter: d, Distribution: meshnetv1.NetemDistribution(1),
				DelayCorrelationPercent: 99.999999, LossPercent: 99.999999, LossCorrelationPercent: 99.999999,
				DuplicatePercent: 99.999999, DuplicateCorrelationPercent: 99.999999, CorruptPercent: 99.999999,
				CorruptCorrelationPercent: 99.999999, ReorderPercent: 99.999999, ReorderCorrelationPercent: 99.999999,
				Gap: 1<<32 - 1, RateBps: 1<<64 - 1, LimitPackets: 1<<32 - 1,
			},
		})
	}
	for range v1beta1.MaxRoutes {
		req.Routes.Routes = append(req.Routes.Routes, &meshnetv1.Route{Dst: ip6 + "/128", Gw: ip6, Dev: long(15)})
	}
	return req
}

// TestLargestRequestFits: the largest request the API admits fits the
// bounds servers read up to, as protobuf and as REST's JSON, indented.
func TestLargestRequestFits(t *testing.T) {
	req := largestApplyPod()
	if n := proto.Size(req); n > meshnetv1.MaxMessageBytes {
		t.Errorf("largest ApplyPod: %d bytes of protobuf, more than MaxMessageBytes %d", n, meshnetv1.MaxMessageBytes)
	}
	m := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true, Multiline: true, Indent: "  "}}
	body, err := m.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(body); n > meshnetv1.MaxRESTBodyBytes {
		t.Errorf("largest ApplyPod: %d bytes of indented JSON, more than MaxRESTBodyBytes %d", n, meshnetv1.MaxRESTBodyBytes)
	}
	t.Logf("largest ApplyPod: %d bytes of protobuf, %d of indented JSON", proto.Size(req), len(body))
}
