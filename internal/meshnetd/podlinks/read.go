package podlinks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/shaping"
)

// ReadPod reads a pod's links back from the kernel, ordered by interface:
// the one reader of kernel state into the API, which WatchLinks, ApplyPod,
// ListLinks and the Prometheus collector share. A link that could not be
// read has no counters and says why in last_error.
func (rc *Reconciler) ReadPod(p podstore.Pod) ([]*meshnetv1.LinkStatus, error) {
	return rc.readPod(p, "")
}

// GetLink implements meshnetv1.LinkServiceServer.
func (s linkServer) GetLink(ctx context.Context, req *meshnetv1.GetLinkRequest) (*meshnetv1.GetLinkResponse, error) {
	rc := s.rc
	ls, err := rc.oneLink(req.GetNamespace(), req.GetPod(), req.GetInterface(), nil, nil)
	if err != nil {
		return nil, err
	}
	return &meshnetv1.GetLinkResponse{Link: ls}, nil
}

// ListLinks implements meshnetv1.LinkServiceServer.
func (s linkServer) ListLinks(ctx context.Context, req *meshnetv1.ListLinksRequest) (*meshnetv1.ListLinksResponse, error) {
	rc := s.rc
	var v violations
	v.namespace(req.GetNamespace())
	if req.GetPod() != "" {
		v.pod("pod", req.GetPod())
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	var pods []podstore.Pod
	if req.GetPod() != "" {
		p, err := rc.lookup(req.GetNamespace(), req.GetPod())
		if err != nil {
			return nil, err
		}
		pods = []podstore.Pod{p}
	} else {
		for _, p := range rc.cfg.Store.List() {
			if p.Namespace == req.GetNamespace() && !rc.abandoned(p) {
				pods = append(pods, p)
			}
		}
	}
	resp := &meshnetv1.ListLinksResponse{}
	for _, p := range pods {
		ls, err := rc.readPod(p, "")
		if err != nil {
			return nil, err
		}
		resp.Links = append(resp.Links, ls...)
	}
	return resp, nil
}

func (rc *Reconciler) readLink(p podstore.Pod, intf string) (*meshnetv1.LinkStatus, error) {
	ls, err := rc.readPod(p, intf)
	if err != nil {
		return nil, err
	}
	if len(ls) != 1 {
		return nil, status.Errorf(codes.NotFound, "pod %s has no meshnet link %s", p.Key(), intf)
	}
	return ls[0], nil
}

// readPod reads the pod's links (only the one named only, when set) back
// from the kernel, ordered by interface: one dump each of links, addresses
// and qdiscs for the pod, and a netem read of the links whose root qdisc is
// not the kernel's default.
func (rc *Reconciler) readPod(p podstore.Pod, only string) ([]*meshnetv1.LinkStatus, error) {
	ls, _, err := rc.read(p, only, false)
	return ls, err
}

// read is readPod, and with withRoutes the pod's managed routes too, from
// the same namespace handle, state and interface dump.
func (rc *Reconciler) read(p podstore.Pod, only string, withRoutes bool) ([]*meshnetv1.LinkStatus, []*meshnetv1.Route, error) {
	if rc.abandoned(p) || (len(p.Links) == 0 && len(p.Runtime) == 0) {
		// A sandbox whose ADD failed or was cut off has nothing to
		// report: its links are the runtime's to throw away with it. Nor
		// has a pod meshnet never wired nor changed, as most of a node's are.
		return nil, nil, nil
	}
	st, err := rc.load(p)
	if err != nil {
		return nil, nil, status.Error(codes.Internal, err.Error())
	}
	now := timestamppb.Now()
	var out []*meshnetv1.LinkStatus
	n, err := openPod(p)
	if err != nil {
		// The sandbox is gone (or going): report the links, not a failure,
		// so that a listing of the namespace still shows the other pods.
		for _, l := range p.Links {
			if l.Kind != "" && (only == "" || l.LocalIntf == only) {
				ls := rc.baseStatus(p, l)
				ls.ReadTime, ls.LastError = now, joinMsg(st.LastError[l.LocalIntf], status.Convert(err).Message())
				out = append(out, ls)
			}
		}
		return out, nil, nil // the sandbox is gone: its links say so
	}
	defer n.Close()
	ifaces, err := readInterfaces(n.links, only)
	if err != nil {
		return nil, nil, kernelErr(err)
	}
	var conn *netem.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for _, l := range p.Links {
		if l.Kind == "" || (only != "" && l.LocalIntf != only) {
			continue // waiting for its peer: not in the kernel yet
		}
		ls := rc.baseStatus(p, l)
		ls.ReadTime = now
		ls.LastError = st.LastError[l.LocalIntf]
		out = append(out, ls)
		k, ok := ifaces[l.LocalIntf]
		if !ok {
			ls.LastError = joinMsg(ls.LastError, "interface missing from the pod's network namespace")
			continue
		}
		fillKernel(ls, k.Reading)
		if k.RootHandle == 0 {
			ls.QdiscOwner, ls.QdiscKind = meshnetv1.QdiscOwner_QDISC_OWNER_NONE, k.RootQdisc
			continue
		}
		if conn == nil {
			if conn, err = netem.Open(n.handle); err != nil {
				return nil, nil, status.Error(codes.Internal, err.Error())
			}
		}
		q, err := conn.Get(l.LocalIntf)
		if err != nil {
			ls.LastError = joinMsg(ls.LastError, err.Error())
			continue
		}
		fillQdisc(ls, q, shaping.Distribution(st.Distribution[l.LocalIntf]))
	}
	slices.SortFunc(out, func(a, b *meshnetv1.LinkStatus) int { return strings.Compare(a.Interface, b.Interface) })
	if !withRoutes || only != "" {
		return out, nil, nil
	}
	routes, err := routesIn(n, &st, ifaces)
	if err != nil {
		return nil, nil, fmt.Errorf("read routes of pod %s: %w", p.Key(), err)
	}
	return out, routes, nil
}

// readInterfaces reads every interface of ns, or only the one named only.
func readInterfaces(ns *links.Netns, only string) (map[string]links.Interface, error) {
	if only == "" {
		return links.ReadAll(ns)
	}
	i, ok, err := links.Read(ns, only)
	if err != nil || !ok {
		return nil, err
	}
	return map[string]links.Interface{only: i}, nil
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// baseStatus is what the pod store knows of a link.
func (rc *Reconciler) baseStatus(p podstore.Pod, l podstore.Link) *meshnetv1.LinkStatus {
	ls := &meshnetv1.LinkStatus{
		Pod:       &meshnetv1.PodRef{Namespace: p.Namespace, Name: p.Name},
		Interface: l.LocalIntf,
		Uid:       uint32(l.UID),
		Kind:      l.Kind.Proto(),
		Node:      rc.cfg.NodeName,
		Peer:      peerOf(p, l),
	}
	if l.Kind == v1beta1.LinkKindVXLAN || l.Kind == v1beta1.LinkKindPhy {
		ls.Vxlan = &meshnetv1.Vxlan{Vni: l.VNI, LocalVtep: rc.localVTEP(), RemoteVtep: l.PeerNodeIP, UdpPort: uint32(l.Port()),
			SrcPort: uint32(l.SrcPort), RemoteSrcPort: uint32(l.PeerSrcPort)}
	}
	return ls
}

// localVTEP is this node's address, empty when the server was not told it.
func (rc *Reconciler) localVTEP() string {
	if !rc.cfg.NodeIP.IsValid() {
		return ""
	}
	return rc.cfg.NodeIP.String()
}

func peerOf(p podstore.Pod, l podstore.Link) *meshnetv1.Peer {
	switch l.Kind {
	case "macvlan":
		return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Host{Host: &meshnetv1.HostPeer{Parent: l.PeerIntf}}}
	case "phy":
		return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Physical{Physical: &meshnetv1.PhysicalPeer{Name: l.PeerPod, Interface: l.PeerIntf}}}
	}
	return &meshnetv1.Peer{Peer: &meshnetv1.Peer_Pod{Pod: &meshnetv1.PodPeer{
		Pod: &meshnetv1.PodRef{Namespace: p.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf,
	}}}
}

func fillKernel(ls *meshnetv1.LinkStatus, k links.Reading) {
	ls.AdminState = apiState(k.AdminUp)
	ls.Carrier = k.Carrier
	ls.Mtu = uint32(k.MTU)
	ls.Bridge = k.Master
	for _, a := range k.Addrs {
		if !links.Configured(a.Addr()) {
			continue
		}
		ls.Addresses = append(ls.Addresses, a.String())
	}
	c := k.Counters
	ls.Counters = &meshnetv1.LinkCounters{
		RxBytes: c.RxBytes, TxBytes: c.TxBytes, RxPackets: c.RxPackets, TxPackets: c.TxPackets,
		RxDrops: c.RxDropped, TxDrops: c.TxDropped, RxErrors: c.RxErrors, TxErrors: c.TxErrors,
		CarrierChanges: c.CarrierChanges,
	}
}

// fillQdisc adds the root qdisc; dist is the distribution meshnet last
// applied, which the kernel does not report.
func fillQdisc(ls *meshnetv1.LinkStatus, q netem.State, dist shaping.Distribution) {
	ls.QdiscOwner = owners[q.Owner]
	ls.QdiscKind = q.Kind
	ls.QdiscDrops = uint64(q.Stats.Drops)
	if q.Kind != "netem" || q.Undecoded != nil {
		return
	}
	if q.Owner != netem.OwnerMeshnet {
		dist = ""
	}
	spec := q.Spec
	spec.Distribution = dist
	ls.Netem = netemconv.ToProto(spec)
}
