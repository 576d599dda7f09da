// Package kernelstatus writes what a node's kernel reports of a link end
// (meshnetd's LinkStatus) in the Topology status's words: the one mapping
// that the controller's status and kubectl meshnet watch both use.
package kernelstatus

import (
	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
)

// Fill sets ls's kernel fields (kind, node, state, carrier, MTU, netem,
// last error, bridge, a physical peer's VXLAN) from k; the rest of ls is left.
func Fill(ls *v1beta1.LinkStatus, k *meshnetv1.LinkStatus) {
	ls.Kind = v1beta1.LinkKindOf(k.GetKind())
	if n := k.GetNode(); n != "" {
		ls.Node = n
	}
	ls.State = v1beta1.LinkStateOf(k.GetAdminState())
	ls.Carrier = k.GetCarrier()
	ls.MTU = int32(k.GetMtu())
	s, _ := netemconv.FromProto(k.GetNetem()) // the kernel's: converted even where a spec would be refused
	ls.Netem = netemconv.ToTopology(s)
	ls.LastError = k.GetLastError()
	ls.Bridge = k.GetBridge()
	if v := k.GetVxlan(); v != nil && k.GetKind() == meshnetv1.LinkKind_LINK_KIND_PHYSICAL {
		ls.Physical = &v1beta1.PhysicalPeer{
			VNI: int32(v.GetVni()), LocalVTEP: v.GetLocalVtep(), RemoteVTEP: v.GetRemoteVtep(), UDPPort: int32(v.GetUdpPort()),
		}
	}
}
