package podlinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

type cniServer struct {
	meshnetv1.UnimplementedCNIServiceServer
	rc *Reconciler
}

func podKey(ref *meshnetv1.PodRef) (podstore.Key, error) {
	if ref.GetNamespace() == "" || ref.GetName() == "" {
		return podstore.Key{}, status.Error(codes.InvalidArgument, "pod namespace and name are required (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME)")
	}
	return podstore.Key{Namespace: ref.GetNamespace(), Name: ref.GetName()}, nil
}

// SetupPod is CNI ADD: it records the pod's sandbox, then makes each of its
// links. A pod with no Topology (yet) is recorded with none: its Topology
// may come later (Helm and Argo CD apply custom resources after Pods), and
// the pass that converges it then (SyncLinks) makes them in this sandbox.
func (s cniServer) SetupPod(ctx context.Context, req *meshnetv1.SetupPodRequest) (*meshnetv1.SetupPodResponse, error) {
	rc := s.rc
	k, err := podKey(req.GetPod())
	if err != nil {
		return nil, err
	}
	cni := req.GetCni()
	if cni.GetContainerId() == "" || cni.GetNetns() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "pod %s: container id and netns are required", k)
	}
	log := rc.log.With("pod", k.String(), "container_id", cni.GetContainerId())
	topo, err := rc.topology(ctx, k)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "pod %s: %v", k, err)
	}
	same, err := sameFile(cni.GetNetns(), rc.cfg.NodeNetns)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pod %s: netns %s: %v", k, cni.GetNetns(), err)
	}
	if same {
		return nil, status.Errorf(codes.InvalidArgument, "pod %s: netns %s is the node's own network namespace", k, cni.GetNetns())
	}
	sandbox := podstore.Pod{Namespace: k.Namespace, Name: k.Name, ContainerID: cni.GetContainerId(), Netns: cni.GetNetns(), Network: cni.GetNetwork()}
	if topo == nil || len(topo.Spec.Links) == 0 {
		defer rc.setAdding(cni.GetContainerId())()
		if err := rc.putRecord(sandbox); err != nil {
			return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
		}
		if topo != nil {
			rc.status.Add(k) // the sandbox fields
		}
		log.Info("pod recorded with no links: its Topology has none yet")
		return &meshnetv1.SetupPodResponse{}, nil
	}
	ns, err := links.OpenNetns(cni.GetNetns())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pod %s: %v", k, err)
	}
	defer ns.Close()

	recLinks := make([]podstore.Link, len(topo.Spec.Links))
	for i, l := range topo.Spec.Links {
		recLinks[i] = podstore.Link{UID: l.UID, LocalIntf: l.LocalIntf, Kind: kindOf(l), PeerPod: l.PeerPod, PeerIntf: l.PeerIntf}
	}
	defer rc.enterCNI(k)()
	defer rc.watch.Hold(k)()
	// Released before the watcher's hold: the read at its release finds a
	// sandbox whose ADD failed abandoned already, and reports nothing of it.
	defer rc.setAdding(cni.GetContainerId())()
	sandbox.Adding, sandbox.Links, sandbox.Bridge = true, recLinks, topo.BridgeName()
	if err := rc.putRecord(sandbox); err != nil {
		return nil, status.Errorf(codes.Internal, "pod %s: %v", k, err)
	}

	p := pod{key: k, ns: ns, topo: topo}
	ws := rc.wireLinks(ctx, p, topo.Spec.Links, log)
	resp := &meshnetv1.SetupPodResponse{Links: ws.results}
	failed, remotes, done := ws.failed, ws.remotes, ws.records
	if err := rc.updateRecord(k, func(pp *podstore.Pod) {
		if pp.ContainerID != cni.GetContainerId() {
			return
		}
		for i := range pp.Links {
			if r, ok := done[pp.Links[i].UID]; ok {
				pp.Links[i] = r
			}
		}
		// Wired once every link of the sandbox is made; a link that
		// failed fails the ADD, and the runtime throws the sandbox away.
		pp.Adding = len(failed) > 0
	}); err != nil {
		failed = append(failed, err)
	}
	if err := rc.settleFarEnds(k, cni.GetContainerId(), rc.createRemoteEnds(ctx, k, remotes)); err != nil {
		failed = append(failed, err)
	}
	rc.status.Add(k) // the sandbox fields
	if len(failed) > 0 {
		err := utilerrors.NewAggregate(failed)
		return nil, status.Errorf(linkErrorCode(err), "pod %s: %d of %d links failed: %v", k, len(failed), len(topo.Spec.Links), err)
	}
	log.Info("pod wired", "links", len(resp.Links))
	return resp, nil
}

// linkErrorCode is the gRPC code of the failure of some of a pod's links:
// the caller's own deadline or cancellation, else the kernel's (kernelCode).
func linkErrorCode(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return kernelCode(err)
}

// wiredSet is what wiring some of a pod's links did: each wired link's
// record, the results, the remote ends to ask the peers' nodes for, and the
// failures.
type wiredSet struct {
	records map[int]podstore.Link
	results []*meshnetv1.LinkResult
	remotes []wired
	failed  []error
}

// wireLinks wires each of ls for p (wireLink), going on past a failure,
// which it records for the pod's status. The records of the veths' peers
// on this node are written once each, after the links are made: a write
// for each link wrote a peer's whole record n times for its n veths.
func (rc *Reconciler) wireLinks(ctx context.Context, p pod, ls []v1beta1.Link, log *slog.Logger) wiredSet {
	s := wiredSet{records: map[int]podstore.Link{}}
	vethPeers := map[podstore.Key]map[int]bool{}
	var ends []endMade
	for i, l := range ls {
		if ctx.Err() != nil {
			// The caller is gone (the plugin's 2 minutes are up, or the
			// runtime gave the sandbox up): the rest would be made for
			// nobody, beside the pods still being served; the sandbox's DEL
			// removes what was made.
			log.Warn("ADD given up by its caller: links left unmade", "link", l.UID, "intf", l.LocalIntf, "error", context.Cause(ctx))
			s.failed = append(s.failed, fmt.Errorf("link %d and the %d after it not made: %w", l.UID, len(ls)-i-1, context.Cause(ctx)))
			break
		}
		wd, err := rc.wireLink(ctx, p, l)
		if err != nil {
			log.Error("link failed", "link", l.UID, "intf", l.LocalIntf, "error", err)
			ends = append(ends, endMade{pod: p.key, link: l, err: err.Error()})
			s.failed = append(s.failed, err)
			continue
		}
		s.records[l.UID] = wd.record
		s.results = append(s.results, wd.result)
		ends = append(ends, wd.ends...)
		if wd.remote != nil {
			s.remotes = append(s.remotes, wd)
		}
		if peer := wd.vethPeer; peer != nil {
			if vethPeers[*peer] == nil {
				vethPeers[*peer] = map[int]bool{}
			}
			vethPeers[*peer][l.UID] = true
		}
	}
	rc.settleEnds(ends)
	for peer, uids := range vethPeers {
		if err := rc.updateRecord(peer, func(pp *podstore.Pod) {
			for i := range pp.Links {
				if uids[pp.Links[i].UID] {
					pp.Links[i].Kind = v1beta1.LinkKindVeth
				}
			}
		}); err != nil {
			s.failed = append(s.failed, fmt.Errorf("record of pod %s: %w", peer, err))
		}
	}
	return s
}

func (rc *Reconciler) putRecord(p podstore.Pod) error {
	defer rc.recMu.Lock(endKey(p.Key(), ""))()
	return rc.cfg.Store.Put(p)
}

// remoteCallsInFlight bounds the far-end calls of one pod's ADD or sync
// that are in flight at once, and all of this daemon's calls to one other
// node's (Reconciler.toPeers). Each holds a goroutine and its buffers here,
// and a handler, its netlink buffers (64 KiB a request) and its kernel
// work on the peer's node: a pod of n links had all n in flight, which
// took both meshnetds of a 1,024-link pod to 140 and 200 MiB, where 32 at
// a time peak at 91 and 84 MiB in the same time, the kernel work being
// done by a few processors anyway. The calls in flight share the peer
// node's record writes (updateRecord), so there are enough of them for a
// write to cover many.
const remoteCallsInFlight = 32

// farEnds is what createRemoteEnds learned, by link uid: whether each far
// end is still owed, and the source port of each made.
type farEnds struct {
	owed  map[int]bool
	ports map[int]uint16
}

// createRemoteEnds asks the peers' nodes, remoteCallsInFlight calls at a
// time, for their ends of this pod's VXLAN links, and returns, by link uid,
// whether each far end is still owed: a peer that is not wired on its node
// yet, or a node that does not answer, leaves the link pending, and the
// pod's next sync asks again (settleFarEnds records which). The underlay
// guard admits each far end made from the source port its node told.
func (rc *Reconciler) createRemoteEnds(ctx context.Context, k podstore.Key, remotes []wired) farEnds {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		owed = make(map[int]bool, len(remotes))
		far  = farEnds{owed: owed, ports: map[int]uint16{}}
	)
	slots := make(chan struct{}, remoteCallsInFlight)
	for _, r := range remotes {
		if ctx.Err() != nil {
			rc.log.Warn("far ends not asked for: the call was given up", "pod", k.String(), "links", len(remotes), "error", context.Cause(ctx))
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			res := r.result
			var resp *meshnetv1.CreateRemoteEndResponse
			err := rc.callPeer(ctx, r.peerIP, peerCallTimeout, func(ctx context.Context, c meshnetv1.PeerServiceClient) error {
				var err error
				resp, err = c.CreateRemoteEnd(ctx, r.remote)
				return err
			})
			var port uint16
			if err == nil {
				port = uint16(resp.GetLink().GetVxlan().GetSrcPort())
				if lerr := rc.admitFarPort(k, r.record, port); lerr != nil {
					rc.log.Warn("far end's source port not admitted", "pod", k.String(), "link", res.Uid, "error", lerr)
				}
			}
			mu.Lock()
			owed[int(res.Uid)] = err != nil
			if port != 0 {
				far.ports[int(res.Uid)] = port
			}
			mu.Unlock()
			switch st := status.Convert(err); {
			case err == nil:
				res.Phase = meshnetv1.LinkPhase_LINK_PHASE_READY
			case st.Code() == codes.FailedPrecondition:
				res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, st.Message()
			default:
				res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, fmt.Sprintf("meshnetd at %s: %s", r.peerIP, st.Message())
				rc.log.Warn("remote end not created", "pod", k.String(), "link", res.Uid, "peer_node_ip", r.peerIP, "error", st.Message())
			}
		})
	}
	wg.Wait()
	return far
}

// settleFarEnds records, in the record of pod k's sandbox containerID,
// which far ends are still owed (createRemoteEnds) and the source ports of
// those made, and has the owed asked for again later (askOwed); a record
// that already says so for each is not written again.
func (rc *Reconciler) settleFarEnds(k podstore.Key, containerID string, far farEnds) error {
	owed := far.owed
	rec, ok := rc.cfg.Store.Get(k)
	if !ok || rec.ContainerID != containerID {
		return nil
	}
	if slices.ContainsFunc(slices.Collect(maps.Values(owed)), func(o bool) bool { return o }) {
		rc.owed.AddRateLimited(k) // askOwed, later
	} else {
		rc.owed.Forget(k)
	}
	if !slices.ContainsFunc(rec.Links, func(l podstore.Link) bool {
		o, asked := owed[l.UID]
		port, told := far.ports[l.UID]
		return asked && l.FarEndOwed != o || told && l.PeerSrcPort != port
	}) {
		return nil
	}
	return rc.updateRecord(k, func(p *podstore.Pod) {
		if p.ContainerID != containerID {
			return
		}
		for i, l := range p.Links {
			if o, asked := owed[l.UID]; asked && l.Kind == v1beta1.LinkKindVXLAN {
				p.Links[i].FarEndOwed = o
			}
			if port, told := far.ports[l.UID]; told && l.Kind == v1beta1.LinkKindVXLAN {
				p.Links[i].PeerSrcPort = port
			}
		}
	})
}

// askOwed asks the peers' nodes again for the far ends pod k's record says
// are owed, as a pass of the pod does (SyncLinks), and nothing else: this
// end is left as it is, and a link the Topology changed or dropped is the
// pass's. Called by Run for the pods settleFarEnds left owing.
func (rc *Reconciler) askOwed(ctx context.Context, k podstore.Key) error {
	rec, ok := rc.wiredPod(k)
	if !ok || rc.isDeleting(k) || rc.isAdding(rec.ContainerID) || !slices.ContainsFunc(rec.Links, farEndOwed) {
		// Gone, or ADD or DEL at work on it; or made since.
		return nil
	}
	topo, err := rc.topology(ctx, k)
	if err != nil || topo == nil {
		return err
	}
	var owed []v1beta1.Link
	for _, h := range rec.Links {
		if l := topo.Link(h.UID); farEndOwed(h) && l != nil && same(h, *l) {
			owed = append(owed, *l)
		}
	}
	log := rc.log.With("pod", k.String(), "container_id", rec.ContainerID)
	return rc.settleFarEnds(k, rec.ContainerID, rc.createRemoteEnds(ctx, k, rc.owedFarEnds(k, rec, owed, log)))
}

// TeardownPod is CNI DEL: it removes the pod's ends and the remote ends of
// its VXLAN links, from the pod's record alone, so it works when the
// Topology (the pod's or a peer's) is gone.
func (s cniServer) TeardownPod(ctx context.Context, req *meshnetv1.TeardownPodRequest) (*meshnetv1.TeardownPodResponse, error) {
	rc := s.rc
	k, err := podKey(req.GetPod())
	if err != nil {
		return nil, err
	}
	log := rc.log.With("pod", k.String(), "container_id", req.GetCni().GetContainerId())
	rec, ok := rc.cfg.Store.Get(k)
	if !ok {
		return &meshnetv1.TeardownPodResponse{}, nil
	}
	if id := req.GetCni().GetContainerId(); id != "" && id != rec.ContainerID {
		log.Info("DEL of an old sandbox: the pod's current links are left alone", "current_container_id", rec.ContainerID)
		return &meshnetv1.TeardownPodResponse{}, nil
	}
	removed, err := rc.teardown(ctx, rec, log)
	if err != nil {
		return nil, status.Error(kernelCode(err), err.Error())
	}
	return &meshnetv1.TeardownPodResponse{Links: removed}, nil
}

// teardown removes a recorded pod's ends and the remote ends of its VXLAN
// links, then its record: DEL and GC both unwire a pod through it. It
// returns the links removed.
func (rc *Reconciler) teardown(ctx context.Context, rec podstore.Pod, log *slog.Logger) ([]*meshnetv1.LinkResult, error) {
	k := rec.Key()
	rc.setDeleting(k, true)
	defer rc.setDeleting(k, false)
	defer rc.enterCNI(k)()
	defer rc.watch.Hold(k)()

	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		// The namespace is gone and its interfaces with it; the remote
		// ends remain to be removed.
		log.Info("pod netns already gone", "netns", rec.Netns, "error", err)
		ns = nil
	} else {
		defer ns.Close()
		// Every end meshnet made in the pod at once (a veth's peer goes
		// with it): one by one, each waits out an RCU grace period, and a
		// 4,096-link pod's DEL outlasted the plugin's 2 minutes. The loop
		// below finds them gone, and removes what an older meshnetd made
		// outside the group.
		if err := links.DeleteGroup(ns); err != nil {
			log.Warn("ends not removed as a group; removing them one by one", "error", err)
		}
	}
	var (
		removed []*meshnetv1.LinkResult
		failed  []error
		wg      sync.WaitGroup
		// The far ends go remoteCallsInFlight at a time, as they came:
		// all n at once took a 1,500-link pod's peer node past its limit.
		slots = make(chan struct{}, remoteCallsInFlight)
	)
	for _, l := range rec.Links {
		remote, err := rc.deleteLocalEnd(k, ns, l)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		removed = append(removed, &meshnetv1.LinkResult{
			Interface: l.LocalIntf, Uid: uint32(l.UID), Kind: l.Kind.Proto(), Phase: meshnetv1.LinkPhase_LINK_PHASE_DELETED,
		})
		if !remote {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := rc.deleteRemoteEnd(ctx, k, l); err != nil {
				log.Warn("remote end not removed; its pod's DEL removes it", "link", l.UID, "peer", l.PeerPod, "error", err)
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		return nil, fmt.Errorf("pod %s: %w", k, utilerrors.NewAggregate(failed))
	}
	if err := rc.cfg.Store.Delete(k, rec.ContainerID); err != nil {
		return nil, fmt.Errorf("pod %s: %w", k, err)
	}
	rc.status.Add(k) // the sandbox fields, now gone
	log.Info("pod unwired", "links", len(removed))
	return removed, nil
}

// deleteRemoteEnd removes the peer's end of a VXLAN link on its node.
func (rc *Reconciler) deleteRemoteEnd(ctx context.Context, k podstore.Key, l podstore.Link) error {
	ip, err := netip.ParseAddr(l.PeerNodeIP)
	if err != nil {
		at, err := rc.peerNode(ctx, podstore.Key{Namespace: k.Namespace, Name: l.PeerPod})
		if err != nil {
			return err
		}
		if at.node == "" || at.node == rc.cfg.NodeName || !at.ip.IsValid() {
			return nil
		}
		ip = at.ip
	}
	vni := l.VNI
	if vni == 0 {
		vni = links.VNI(k.Namespace, k.Name, l.PeerPod, l.UID)
	}
	err = rc.callPeer(ctx, ip, peerCallTimeout, func(ctx context.Context, c meshnetv1.PeerServiceClient) error {
		_, err := c.DeleteRemoteEnd(ctx, &meshnetv1.DeleteRemoteEndRequest{
			End: &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: k.Namespace, Name: l.PeerPod}, Interface: l.PeerIntf, Uid: uint32(l.UID)},
			Vni: vni,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("meshnetd at %s: %w", ip, err)
	}
	return nil
}

// CheckPod is CNI CHECK: every link end this node should have made must be
// there, of the right kind.
func (s cniServer) CheckPod(ctx context.Context, req *meshnetv1.CheckPodRequest) (*meshnetv1.CheckPodResponse, error) {
	rc := s.rc
	k, err := podKey(req.GetPod())
	if err != nil {
		return nil, err
	}
	topo, err := rc.topology(ctx, k)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "pod %s: %v", k, err)
	}
	if topo == nil || len(topo.Spec.Links) == 0 {
		return &meshnetv1.CheckPodResponse{}, nil
	}
	rec, ok := rc.cfg.Store.Get(k)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s has Topology links but was never wired on node %s", k, rc.cfg.NodeName)
	}
	if rc.abandoned(rec) {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: the CNI ADD of sandbox %s failed or was cut off", k, rec.ContainerID)
	}
	if id := req.GetCni().GetContainerId(); id != "" && id != rec.ContainerID {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: wired for sandbox %s, not %s", k, rec.ContainerID, id)
	}
	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: %v", k, err)
	}
	defer ns.Close()
	byUID := map[int]podstore.Link{}
	for _, l := range rec.Links {
		byUID[l.UID] = l
	}
	// The namespace read once (three dumps), not link by link: a read of
	// one interface dumps the addresses of all.
	kernel, err := links.ReadAll(ns)
	if err != nil {
		return nil, status.Errorf(kernelCode(err), "pod %s: %v", k, err)
	}
	resp := &meshnetv1.CheckPodResponse{}
	var problems []string
	for _, l := range topo.Spec.Links {
		r := byUID[l.UID]
		res := &meshnetv1.LinkResult{Interface: l.LocalIntf, Uid: uint32(l.UID), Kind: r.Kind.Proto(), Peer: protoPeer(k.Namespace, l, "")}
		if st, ok := kernel[l.LocalIntf]; ok {
			if want := r.Kind.Kernel(); want != "" && st.Kind != want {
				problems = append(problems, fmt.Sprintf("%s is a %s, want %s", l.LocalIntf, st.Kind, want))
				continue
			}
			res.Phase = meshnetv1.LinkPhase_LINK_PHASE_READY
			resp.Links = append(resp.Links, res)
			continue
		}
		_, peerLocal := rc.wiredPod(podstore.Key{Namespace: k.Namespace, Name: l.PeerPod})
		expected := r.Kind == v1beta1.LinkKindPhy || r.Kind == v1beta1.LinkKindMacvlan ||
			(r.Kind == v1beta1.LinkKindVeth && peerLocal) || (r.Kind == v1beta1.LinkKindVXLAN && r.PeerNodeIP != "")
		if expected {
			problems = append(problems, fmt.Sprintf("link %d: %s is missing", l.UID, l.LocalIntf))
			continue
		}
		res.Phase, res.Message = meshnetv1.LinkPhase_LINK_PHASE_PENDING, "waiting for peer "+l.PeerPod
		resp.Links = append(resp.Links, res)
	}
	if len(problems) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: %s", k, strings.Join(problems, "; "))
	}
	return resp, nil
}
