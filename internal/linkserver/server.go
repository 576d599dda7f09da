// Package linkserver is meshnetd's LinkService: runtime control of the links
// of the pods this node hosts (admin state, netem, routes, MTU, ApplyPod) and
// their read-back from the kernel.
//
// A pod is one that a CNI ADD on this node recorded in the pod store; calls
// name it by namespace and name, never by netns path. Every request is
// validated whole before anything changes (InvalidArgument naming each bad
// field), then the pod and its links are locked (internal/linklock, shared
// with the wiring) while the kernel is changed, and the answer is read back
// from the kernel. What the kernel forgets on admin down (static routes, IPv6
// addresses) and the meshnet-managed route set are kept in a state file per
// pod, so they survive a daemon restart.
package linkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/linklock"
	"github.com/meshnet/meshnet/internal/links"
	"github.com/meshnet/meshnet/internal/linkwatch"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/podstore"
	"github.com/meshnet/meshnet/internal/shaping"
)

// RemoteEnds reaches the far end of a cross-node VXLAN link, which only the
// peer's node can change: VXLAN carries no carrier, so a cable pull takes
// both nodes. The wiring's PeerService client satisfies it.
type RemoteEnds interface {
	// SetRemoteStates sets the admin state of the peer's ends of links,
	// VXLAN links of pod on this node: one call per peer node, however
	// many links. It returns one result per end, in order.
	SetRemoteStates(ctx context.Context, pod podstore.Key, ends []RemoteState) []EndResult
}

// RemoteState is the admin state wanted for the far end of Link.
type RemoteState struct {
	Link podstore.Link
	Up   bool
}

// EndResult is what became of one link end set to an admin state, here
// (SetEndStates) or on the peer's node (RemoteEnds): Changed when it was
// not in that state already, or why it was not set.
type EndResult struct {
	Changed bool
	Err     error
}

// Config is what a Server works on.
type Config struct {
	// Pods is the node's pod store (written by CNI ADD).
	Pods *podstore.Store
	// StateDir holds a state file per pod (see package doc).
	StateDir string
	// Locks serialises work per link; share it with the wiring.
	Locks *linklock.Locks
	// Remote sets the far end of VXLAN links; nil makes state changes of
	// VXLAN links fail with FailedPrecondition rather than half-happen.
	Remote RemoteEnds
	// Links makes and removes a pod's links when its Topology adds or drops
	// them (internal/wiring); nil leaves the set of links as CNI ADD made it.
	Links LinkSyncer
	// Node is this node's name, reported in LinkStatus.node; NodeIP its
	// address, the local VTEP of its VXLAN links.
	Node   string
	NodeIP netip.Addr
	// Log receives a record per change; nil discards them.
	Log *slog.Logger
}

// Server implements meshnetv1.LinkServiceServer.
type Server struct {
	meshnetv1.UnimplementedLinkServiceServer
	pods    *podstore.Store
	records *recordStore
	locks   *linklock.Locks
	remote  RemoteEnds
	wirer   LinkSyncer
	watch   *linkwatch.Watcher
	// applying lets one ApplyPod at a time work on a pod.
	applying gate
	node     string
	nodeIP   netip.Addr
	log      *slog.Logger
}

// LinkSyncer is the wiring, which makes and removes links: ApplyPod has it
// converge the set of links of a pod to its Topology before it converges
// the links' state, and a link's status carries why wiring it failed.
type LinkSyncer interface {
	SyncLinks(ctx context.Context, pod podstore.Key, generation int64) error
	LastError(pod podstore.Key, uid int) string
	// InCNI tells whether the pod's CNI ADD or DEL is in flight here.
	InCNI(pod podstore.Key) bool
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Pods == nil || cfg.Locks == nil {
		return nil, errors.New("linkserver: needs a pod store and locks")
	}
	records, err := openRecordStore(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("linkserver: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{pods: cfg.Pods, records: records, locks: cfg.Locks, remote: cfg.Remote, wirer: cfg.Links, node: cfg.Node, nodeIP: cfg.NodeIP, log: log}
	s.watch = linkwatch.New(linkwatch.Config{Pods: cfg.Pods, Read: s.snapshot, Log: log})
	// Before any call is served: a record of a pod the pod store no
	// longer has is left from a DEL cut short by a crash.
	gone, err := records.sweep(func(k podstore.Key) bool { _, ok := cfg.Pods.Get(k); return ok })
	for _, k := range gone {
		log.Info("record of a pod no longer wired here removed", "pod", k.String(), "node", cfg.Node)
	}
	if err != nil {
		return nil, fmt.Errorf("linkserver: %w", err)
	}
	return s, nil
}

// Run follows the kernel state of the node's pods for WatchLinks until ctx
// ends.
func (s *Server) Run(ctx context.Context) { s.watch.Run(ctx) }

// ReadPod reads a pod's links back from the kernel, ordered by interface:
// the one reader of kernel state into the API, which WatchLinks, ApplyPod,
// ListLinks and the Prometheus collector share. A link that could not be
// read has no counters and says why in last_error.
func (s *Server) ReadPod(p podstore.Pod) ([]*meshnetv1.LinkStatus, error) { return s.readPod(p, "") }

// Touch tells WatchLinks that something of a pod the kernel does not report
// changed (the wiring's last error of a link).
func (s *Server) Touch(pod podstore.Key) { s.watch.Touch(pod) }

// Hold defers the link watcher's reads of pod until release, while CNI ADD
// or DEL changes many of its links (linkwatch.Watcher.Hold).
func (s *Server) Hold(pod podstore.Key) (release func()) { return s.watch.Hold(pod) }

// lastError is why converging a link last failed: the wiring's reason and
// the runtime calls'.
func (s *Server) lastError(p podstore.Pod, l podstore.Link, st podRecord) string {
	msg := st.LastError[l.LocalIntf]
	if s.wirer != nil {
		msg = joinMsg(s.wirer.LastError(p.Key(), l.UID), msg)
	}
	return msg
}

// snapshot is a pod as the kernel has it: the one read the link watcher,
// and so WatchLinks and ApplyPod's answer, are made of.
func (s *Server) snapshot(p podstore.Pod) (linkwatch.Snapshot, error) {
	ls, routes, err := s.read(p, "", true)
	return linkwatch.Snapshot{Links: ls, Routes: routes}, err
}

// lookup finds a pod this node hosts.
func (s *Server) lookup(namespace, pod string) (podstore.Pod, error) {
	p, ok := s.pods.Get(podstore.Key{Namespace: namespace, Name: pod})
	if !ok {
		return podstore.Pod{}, status.Errorf(codes.NotFound, "pod %s/%s is not wired on node %s", namespace, pod, s.node)
	}
	return p, nil
}

func (s *Server) lookupLink(namespace, pod, intf string) (podstore.Pod, podstore.Link, error) {
	p, err := s.lookup(namespace, pod)
	if err != nil {
		return podstore.Pod{}, podstore.Link{}, err
	}
	l, ok := linkOf(p, intf)
	if !ok {
		return podstore.Pod{}, podstore.Link{}, status.Errorf(codes.NotFound, "pod %s has no meshnet link %s", p.Key(), intf)
	}
	return p, l, nil
}

// linkOf finds a wired link of p; a link recorded without a kind waits for
// its peer and is not wired yet.
func linkOf(p podstore.Pod, intf string) (podstore.Link, bool) {
	for _, l := range p.Links {
		if l.LocalIntf == intf && l.Kind != "" {
			return l, true
		}
	}
	return podstore.Link{}, false
}

// lockPod locks the pod (its state file and routes), the given interfaces
// of it and any extra link keys (a veth peer's end).
func (s *Server) lockPod(k podstore.Key, intfs []string, extra ...linklock.Key) (unlock func()) {
	keys := []linklock.Key{{Namespace: k.Namespace, Pod: k.Name}}
	for _, i := range intfs {
		keys = append(keys, linklock.Key{Namespace: k.Namespace, Pod: k.Name, Interface: i})
	}
	return s.locks.Lock(append(keys, extra...)...)
}

func intfsOf(p podstore.Pod) []string {
	out := make([]string, len(p.Links))
	for i, l := range p.Links {
		out[i] = l.LocalIntf
	}
	return out
}

// podNetns is a pod's network namespace opened for links and for netem.
type podNetns struct {
	links  *links.Netns
	handle netns.NsHandle
}

func openPod(p podstore.Pod) (*podNetns, error) {
	n, err := links.OpenNetns(p.Netns)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: its network namespace is gone: %v", p.Key(), err)
	}
	h, err := netns.GetFromPath(p.Netns)
	if err != nil {
		n.Close()
		return nil, status.Errorf(codes.FailedPrecondition, "pod %s: its network namespace is gone: %v", p.Key(), err)
	}
	return &podNetns{links: n, handle: h}, nil
}

func (n *podNetns) Close() {
	n.links.Close()
	n.handle.Close()
}

// kernelErr turns a failed kernel change into a status: FailedPrecondition
// for what the caller can fix on the node (no sch_netem, a foreign qdisc),
// Internal otherwise.
func kernelErr(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, netem.ErrNoNetem) || errors.Is(err, netem.ErrForeignQdisc) {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	if errors.Is(err, unix.ENETUNREACH) {
		// A route's gateway on no subnet of a link that is up: the
		// caller's route, or a link taken down, not meshnetd's fault.
		return status.Error(codes.FailedPrecondition, err.Error()+" (from the pod: is a route's gateway on no subnet of a link that is up?)")
	}
	return status.Error(codes.Internal, err.Error())
}

// changeAdmins sets each interface of want up (true) or down, from its
// state in cur, keeping what down flushes in st for the up: one batch in
// the kernel, however many interfaces. changed lists the interfaces it
// changed, failed those it could not; the caller saves st.
func changeAdmins(n *podNetns, st *podRecord, cur map[string]links.Interface, want map[string]bool) (changed []string, failed map[string]error) {
	var down []string
	up := map[string]links.Saved{}
	for intf, u := range want {
		saved, wasDown := st.Down[intf]
		switch adminUp := cur[intf].AdminUp; {
		case !u && adminUp:
			down = append(down, intf)
		case !u, adminUp && !wasDown:
			// Already so; a down keeps what the first down saved.
		default:
			up[intf] = saved.links()
		}
	}
	failed = map[string]error{}
	if len(down) > 0 {
		r := links.SetAdminDown(n.links, cur, down...)
		for intf, sv := range r.Saved {
			st.Down[intf] = fromSaved(sv)
			changed = append(changed, intf)
		}
		maps.Copy(failed, r.Failed)
	}
	if len(up) > 0 {
		r := links.SetAdminUp(n.links, cur, up)
		for intf := range up {
			if err, bad := r.Failed[intf]; bad {
				failed[intf] = err
				continue
			}
			delete(st.Down, intf)
			changed = append(changed, intf)
		}
	}
	slices.Sort(changed)
	return changed, failed
}

// setAdmin changes a link's admin state on this node and, when remote is
// set and the link is VXLAN, its far end. The far end is called after the
// local locks are released, so that two nodes changing both ends of one link
// at once cannot wait on each other. changed is whether this node's end
// changed.
func (s *Server) setAdmin(ctx context.Context, p podstore.Pod, l podstore.Link, up, remote bool) (changed bool, err error) {
	err = func() error {
		defer s.lockPod(p.Key(), []string{l.LocalIntf})()
		st, err := s.records.load(p)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		n, err := openPod(p)
		if err != nil {
			return err
		}
		defer n.Close()
		cur, err := readInterfaces(n.links, l.LocalIntf)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if _, ok := cur[l.LocalIntf]; !ok {
			return status.Errorf(codes.NotFound, "pod %s: no interface %s in its network namespace", p.Key(), l.LocalIntf)
		}
		c, failed := changeAdmins(n, &st, cur, map[string]bool{l.LocalIntf: up})
		if err := failed[l.LocalIntf]; err != nil {
			return kernelErr(err)
		}
		if changed = len(c) > 0; changed {
			s.log.Info("link admin state set", "pod", p.Key().String(), "link", l.LocalIntf, "node", s.node, "up", up)
			if err := s.saveRecord(p, st); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		return nil
	}()
	if err != nil || !remote || l.Kind != v1beta1.LinkKindVXLAN {
		return changed, err
	}
	if err := s.remote.SetRemoteStates(ctx, p.Key(), []RemoteState{{Link: l, Up: up}})[0].Err; err != nil {
		code := status.Code(err)
		if code == codes.Unknown || code == codes.OK {
			code = codes.Unavailable
		}
		return changed, status.Errorf(code, "pod %s link %s: this end is set, but setting the peer's end (pod %s on node %s) failed: %v",
			p.Key(), l.LocalIntf, l.PeerPod, l.PeerNodeIP, err)
	}
	return changed, nil
}

// SetLinkState implements meshnetv1.LinkServiceServer.
func (s *Server) SetLinkState(ctx context.Context, req *meshnetv1.SetLinkStateRequest) (*meshnetv1.SetLinkStateResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.ifname("interface", req.GetInterface())
	v.state("state", req.GetState())
	if err := v.err(); err != nil {
		return nil, err
	}
	p, l, err := s.lookupLink(req.GetNamespace(), req.GetPod(), req.GetInterface())
	if err != nil {
		return nil, err
	}
	if err := s.needRemote(p, l); err != nil {
		return nil, err
	}
	if _, err := s.setAdmin(ctx, p, l, req.GetState() == meshnetv1.LinkState_LINK_STATE_UP, true); err != nil {
		return nil, err
	}
	ls, err := s.readLink(p, l.LocalIntf)
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetLinkStateResponse{Link: ls}, nil
}

func (s *Server) needRemote(p podstore.Pod, l podstore.Link) error {
	if l.Kind == "vxlan" && s.remote == nil {
		return status.Errorf(codes.FailedPrecondition, "pod %s link %s is VXLAN and this meshnetd has no peer client to set the remote end", p.Key(), l.LocalIntf)
	}
	return nil
}

// SetEndStates sets the admin state of ends of a pod on this node and
// nothing else: what PeerService.SetRemoteStates does for a peer node's
// meshnetd. The pod is locked, read and saved once for all of them. Each
// end has its own result: changed when it was not in that state already,
// or why it was not set.
func (s *Server) SetEndStates(ctx context.Context, pod podstore.Key, states map[string]meshnetv1.LinkState) map[string]EndResult {
	out := make(map[string]EndResult, len(states))
	failAll := func(err error) map[string]EndResult {
		for intf := range states {
			out[intf] = EndResult{Err: err}
		}
		return out
	}
	var v violations
	v.namespace(pod.Namespace)
	v.pod("pod", pod.Name)
	if err := v.err(); err != nil {
		return failAll(err)
	}
	p, err := s.lookup(pod.Namespace, pod.Name)
	if err != nil {
		return failAll(err)
	}
	want := map[string]bool{}
	for intf, state := range states {
		var v violations
		v.ifname("interface", intf)
		v.state("state", state)
		if err := v.err(); err != nil {
			out[intf] = EndResult{Err: err}
			continue
		}
		if _, ok := linkOf(p, intf); !ok {
			out[intf] = EndResult{Err: status.Errorf(codes.NotFound, "pod %s has no meshnet link %s", p.Key(), intf)}
			continue
		}
		want[intf] = state == meshnetv1.LinkState_LINK_STATE_UP
	}
	if len(want) == 0 {
		return out
	}
	if err := ctx.Err(); err != nil {
		return failAll(status.FromContextError(err).Err())
	}
	var failed map[string]error
	err = s.withPod(p, nil, func(n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		var changed []string
		changed, failed = changeAdmins(n, st, devs, want)
		for _, intf := range changed {
			out[intf] = EndResult{Changed: true}
			s.log.Info("link admin state set", "pod", p.Key().String(), "link", intf, "node", s.node, "up", want[intf])
		}
		return len(changed) > 0, nil
	})
	for intf := range want {
		switch {
		case err != nil:
			out[intf] = EndResult{Err: err}
		case failed[intf] != nil:
			out[intf] = EndResult{Err: kernelErr(failed[intf])}
		case !out[intf].Changed:
			out[intf] = EndResult{}
		}
	}
	return out
}

// SetEndState is SetEndStates for one end, which it reads back: what
// PeerService.SetRemoteState does, for peers that send one end per call.
func (s *Server) SetEndState(ctx context.Context, pod podstore.Key, intf string, state meshnetv1.LinkState) (_ *meshnetv1.LinkStatus, changed bool, err error) {
	r := s.SetEndStates(ctx, pod, map[string]meshnetv1.LinkState{intf: state})[intf]
	if r.Err != nil {
		return nil, false, r.Err
	}
	p, err := s.lookup(pod.Namespace, pod.Name)
	if err != nil {
		return nil, false, err
	}
	ls, err := s.readLink(p, intf)
	return ls, r.Changed, err
}

// SetNetem implements meshnetv1.LinkServiceServer.
func (s *Server) SetNetem(ctx context.Context, req *meshnetv1.SetNetemRequest) (*meshnetv1.SetNetemResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.ifname("interface", req.GetInterface())
	var spec shaping.Spec
	if req.GetNetem() == nil {
		v.add("netem", "required (ClearNetem removes shaping)")
	} else {
		spec = v.netemSpec("netem", req.GetNetem())
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	p, l, err := s.lookupLink(req.GetNamespace(), req.GetPod(), req.GetInterface())
	if err != nil {
		return nil, err
	}
	if err := s.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
		return s.applyNetem(n, st, p, l.LocalIntf, spec, false)
	}); err != nil {
		return nil, err
	}
	ls, err := s.readLink(p, l.LocalIntf)
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetNetemResponse{Link: ls}, nil
}

// ClearNetem implements meshnetv1.LinkServiceServer.
func (s *Server) ClearNetem(ctx context.Context, req *meshnetv1.ClearNetemRequest) (*meshnetv1.ClearNetemResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.ifname("interface", req.GetInterface())
	if err := v.err(); err != nil {
		return nil, err
	}
	p, l, err := s.lookupLink(req.GetNamespace(), req.GetPod(), req.GetInterface())
	if err != nil {
		return nil, err
	}
	if err := s.withLink(p, l.LocalIntf, func(n *podNetns, st *podRecord) (bool, error) {
		return s.clearNetem(n, st, p, l.LocalIntf)
	}); err != nil {
		return nil, err
	}
	ls, err := s.readLink(p, l.LocalIntf)
	if err != nil {
		return nil, err
	}
	return &meshnetv1.ClearNetemResponse{Link: ls}, nil
}

// withLink runs change with the pod and intf locked, the pod's netns open
// and its state loaded, and saves the state when change says it changed.
func (s *Server) withLink(p podstore.Pod, intf string, change func(*podNetns, *podRecord) (bool, error)) error {
	defer s.lockPod(p.Key(), []string{intf})()
	st, err := s.records.load(p)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	n, err := openPod(p)
	if err != nil {
		return err
	}
	defer n.Close()
	changed, err := change(n, &st)
	if err != nil {
		return kernelErr(err)
	}
	if changed {
		if err := s.saveRecord(p, st); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}

// applyNetem makes spec intf's shaping. With skipSame, a qdisc that already
// reads back as spec is not touched (ApplyPod's idempotence).
func (s *Server) applyNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string, spec shaping.Spec, skipSame bool) (bool, error) {
	if skipSame {
		cur, err := netem.Get(n.handle, intf)
		if err == nil && cur.Owner == netem.OwnerMeshnet && cur.Undecoded == nil &&
			sameNetem(cur.Spec, spec) && st.Distribution[intf] == string(spec.Distribution) {
			return false, nil
		}
	}
	if err := netem.Apply(n.handle, intf, spec); err != nil {
		return false, err
	}
	st.Distribution[intf] = string(spec.Distribution)
	s.log.Info("netem set", "pod", p.Key().String(), "link", intf, "node", s.node, "spec", fmt.Sprintf("%+v", spec))
	return true, nil
}

func (s *Server) clearNetem(n *podNetns, st *podRecord, p podstore.Pod, intf string) (bool, error) {
	cur, err := netem.Get(n.handle, intf)
	if err != nil {
		return false, err
	}
	if cur.Owner == netem.OwnerNone {
		delete(st.Distribution, intf)
		return false, nil
	}
	if err := netem.Clear(n.handle, intf); err != nil {
		return false, err
	}
	delete(st.Distribution, intf)
	s.log.Info("netem cleared", "pod", p.Key().String(), "link", intf, "node", s.node)
	return true, nil
}

// sameNetem reports whether the kernel's read-back got equals the effective
// form of want (defaults resolved as Apply resolves them; the kernel does not
// report the distribution).
func sameNetem(got, want shaping.Spec) bool {
	if want.Limit == 0 {
		want.Limit = shaping.DefaultLimit(want)
	}
	if want.Reorder > 0 && want.Gap == 0 {
		want.Gap = 1
	}
	want.Distribution, got.Distribution = "", ""
	return got == want
}

// GetLink implements meshnetv1.LinkServiceServer.
func (s *Server) GetLink(ctx context.Context, req *meshnetv1.GetLinkRequest) (*meshnetv1.GetLinkResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.ifname("interface", req.GetInterface())
	if err := v.err(); err != nil {
		return nil, err
	}
	p, l, err := s.lookupLink(req.GetNamespace(), req.GetPod(), req.GetInterface())
	if err != nil {
		return nil, err
	}
	ls, err := s.readLink(p, l.LocalIntf)
	if err != nil {
		return nil, err
	}
	return &meshnetv1.GetLinkResponse{Link: ls}, nil
}

// ListLinks implements meshnetv1.LinkServiceServer.
func (s *Server) ListLinks(ctx context.Context, req *meshnetv1.ListLinksRequest) (*meshnetv1.ListLinksResponse, error) {
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
		p, err := s.lookup(req.GetNamespace(), req.GetPod())
		if err != nil {
			return nil, err
		}
		pods = []podstore.Pod{p}
	} else {
		for _, p := range s.pods.List() {
			if p.Namespace == req.GetNamespace() {
				pods = append(pods, p)
			}
		}
	}
	resp := &meshnetv1.ListLinksResponse{}
	for _, p := range pods {
		ls, err := s.readPod(p, "")
		if err != nil {
			return nil, err
		}
		resp.Links = append(resp.Links, ls...)
	}
	return resp, nil
}

func (s *Server) readLink(p podstore.Pod, intf string) (*meshnetv1.LinkStatus, error) {
	ls, err := s.readPod(p, intf)
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
func (s *Server) readPod(p podstore.Pod, only string) ([]*meshnetv1.LinkStatus, error) {
	ls, _, err := s.read(p, only, false)
	return ls, err
}

// read is readPod, and with withRoutes the pod's managed routes too, from
// the same namespace handle, state and interface dump.
func (s *Server) read(p podstore.Pod, only string, withRoutes bool) ([]*meshnetv1.LinkStatus, []*meshnetv1.Route, error) {
	st, err := s.records.load(p)
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
				ls := s.baseStatus(p, l)
				ls.ReadTime, ls.LastError = now, joinMsg(s.lastError(p, l, st), status.Convert(err).Message())
				out = append(out, ls)
			}
		}
		return out, nil, nil // the sandbox is gone: its links say so
	}
	defer n.Close()
	ifaces, err := readInterfaces(n.links, only)
	if err != nil {
		return nil, nil, status.Error(codes.Internal, err.Error())
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
		ls := s.baseStatus(p, l)
		ls.ReadTime = now
		ls.LastError = s.lastError(p, l, st)
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
func (s *Server) baseStatus(p podstore.Pod, l podstore.Link) *meshnetv1.LinkStatus {
	ls := &meshnetv1.LinkStatus{
		Pod:       &meshnetv1.PodRef{Namespace: p.Namespace, Name: p.Name},
		Interface: l.LocalIntf,
		Uid:       uint32(l.UID),
		Kind:      l.Kind.Proto(),
		Node:      s.node,
		Peer:      peerOf(p, l),
	}
	if l.Kind == v1beta1.LinkKindVXLAN || l.Kind == v1beta1.LinkKindPhy {
		port := uint32(v1beta1.DefaultVXLANPort)
		if l.UDPPort != 0 {
			port = uint32(l.UDPPort)
		}
		ls.Vxlan = &meshnetv1.Vxlan{Vni: l.VNI, LocalVtep: s.localVTEP(), RemoteVtep: l.PeerNodeIP, UdpPort: port}
	}
	return ls
}

// localVTEP is this node's address, empty when the server was not told it.
func (s *Server) localVTEP() string {
	if !s.nodeIP.IsValid() {
		return ""
	}
	return s.nodeIP.String()
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
	ls.AdminState = meshnetv1.LinkState_LINK_STATE_DOWN
	if k.AdminUp {
		ls.AdminState = meshnetv1.LinkState_LINK_STATE_UP
	}
	ls.Carrier = k.Carrier
	ls.Mtu = uint32(k.MTU)
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
	}
}

var owners = map[netem.Owner]meshnetv1.QdiscOwner{
	netem.OwnerNone: meshnetv1.QdiscOwner_QDISC_OWNER_NONE, netem.OwnerMeshnet: meshnetv1.QdiscOwner_QDISC_OWNER_MESHNET,
	netem.OwnerForeign: meshnetv1.QdiscOwner_QDISC_OWNER_FOREIGN,
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

// routesIn reads back the managed routes st.Routes from the kernel, each as
// the kernel has it (dev resolved); routes through a link meshnet took down
// are not in the kernel until it comes up.
func routesIn(n *podNetns, st *podRecord, devs map[string]links.Interface) ([]*meshnetv1.Route, error) {
	if len(st.Routes) == 0 {
		return nil, nil
	}
	byDev, err := links.StaticRoutesOf(n.links, devs)
	if err != nil {
		return nil, err
	}
	var kernel []route
	for dev, rs := range byDev {
		if dev == "lo" {
			continue
		}
		for _, r := range rs {
			kernel = append(kernel, fromLinksRoute(r))
		}
	}
	var out []*meshnetv1.Route
	for _, want := range st.Routes {
		for _, k := range kernel {
			if !k.sameDst(want) || (want.Gw.IsValid() && k.Gw != want.Gw) || (want.Dev != "" && k.Dev != want.Dev) {
				continue
			}
			r := &meshnetv1.Route{Dst: k.Dst.String(), Dev: k.Dev}
			if k.Gw.IsValid() {
				r.Gw = k.Gw.String()
			}
			out = append(out, r)
			break
		}
	}
	return out, nil
}

// convergeRoutes makes want the managed route set: managed routes not in
// want are deleted, the others added or replaced. A route through a link
// meshnet took down is kept with that link's saved routes, for its up.
func convergeRoutes(n *podNetns, st *podRecord, want []route) (bool, error) {
	changed := false
	for _, old := range st.Routes {
		if slices.ContainsFunc(want, old.sameDst) {
			continue
		}
		for dev, sv := range st.Down {
			sv.Routes = slices.DeleteFunc(sv.Routes, old.sameDst)
			st.Down[dev] = sv
		}
		if err := links.DeleteRoute(n.links, old.links()); err != nil {
			return changed, err
		}
		changed = true
	}
	have := map[string][]route{} // static routes per dev, listed once
	for _, r := range want {
		if sv, down := st.Down[r.Dev]; down && r.Dev != "" {
			sv.Routes = append(slices.DeleteFunc(sv.Routes, r.sameDst), r)
			st.Down[r.Dev] = sv
			changed = true
			continue
		}
		if r.Dev != "" {
			rs, listed := have[r.Dev]
			if !listed {
				kernel, err := links.StaticRoutes(n.links, r.Dev)
				if err != nil {
					return changed, err
				}
				rs = make([]route, 0, len(kernel))
				for _, k := range kernel {
					rs = append(rs, fromLinksRoute(k))
				}
				have[r.Dev] = rs
			}
			if slices.ContainsFunc(rs, func(k route) bool { return k.sameDst(r) && k.Gw == r.Gw }) {
				continue
			}
		}
		if err := links.ReplaceRoute(n.links, r.links()); err != nil {
			return changed, err
		}
		changed = true
	}
	if !slices.Equal(st.Routes, want) {
		st.Routes = want
		changed = true
	}
	return changed, nil
}

// SetRoutes implements meshnetv1.LinkServiceServer.
func (s *Server) SetRoutes(ctx context.Context, req *meshnetv1.SetRoutesRequest) (*meshnetv1.SetRoutesResponse, error) {
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.most("routes", len(req.GetRoutes()), v1beta1.MaxRoutes)
	if err := v.err(); err != nil {
		return nil, err
	}
	p, err := s.lookup(req.GetNamespace(), req.GetPod())
	if err != nil {
		return nil, err
	}
	var out []*meshnetv1.Route
	err = s.withPod(p, nil, func(n *podNetns, st *podRecord, devs map[string]links.Interface) (bool, error) {
		want := v.routes("routes", req.GetRoutes(), devs)
		if err := v.err(); err != nil {
			return false, err
		}
		changed, err := convergeRoutes(n, st, want)
		if err != nil {
			return changed, err
		}
		s.logChange(changed, "routes set", p, "routes", len(want))
		out, err = routesIn(n, st, devs)
		return changed, err
	})
	if err != nil {
		return nil, err
	}
	return &meshnetv1.SetRoutesResponse{Routes: out}, nil
}

func (s *Server) logChange(changed bool, msg string, p podstore.Pod, args ...any) {
	if changed {
		s.log.Info(msg, append([]any{"pod", p.Key().String(), "node", s.node}, args...)...)
	}
}

// withPod runs change with the pod, all its links and the extra keys
// locked, its netns open, its state loaded and the interfaces in its netns
// read; the state is saved when change reports a change, even when
// it fails part way.
func (s *Server) withPod(p podstore.Pod, extra []linklock.Key, change func(*podNetns, *podRecord, map[string]links.Interface) (bool, error)) error {
	defer s.lockPod(p.Key(), intfsOf(p), extra...)()
	// The watcher reads the pod once this change is done, not half way.
	defer s.watch.Hold(p.Key())()
	st, err := s.records.load(p)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	n, err := openPod(p)
	if err != nil {
		return err
	}
	defer n.Close()
	all, err := links.ReadAll(n.links)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	changed, cerr := change(n, &st, all)
	if changed {
		// What the kernel does not tell (a last error, a distribution)
		// changed too: have the watchers told.
		defer s.watch.Touch(p.Key())
		if err := s.saveRecord(p, st); err != nil {
			return status.Error(codes.Internal, errors.Join(cerr, err).Error())
		}
	}
	if cerr != nil {
		return kernelErr(cerr)
	}
	return nil
}

// WatchLinks implements meshnetv1.LinkServiceServer.
func (s *Server) WatchLinks(req *meshnetv1.WatchLinksRequest, stream grpc.ServerStreamingServer[meshnetv1.WatchLinksResponse]) error {
	var v violations
	if req.GetNamespace() != "" {
		v.namespace(req.GetNamespace())
	}
	if req.GetPod() != "" {
		if req.GetNamespace() == "" {
			v.add("pod", "needs a namespace")
		}
		v.pod("pod", req.GetPod())
	}
	if err := v.err(); err != nil {
		return err
	}
	w := s.watch.Watch(req.GetNamespace(), req.GetPod())
	defer w.Stop()
	for {
		ev, err := w.Next(stream.Context())
		switch {
		case errors.Is(err, linkwatch.ErrTooSlow):
			return status.Error(codes.ResourceExhausted, "watch ended: the client fell too far behind; watch again")
		case err != nil:
			return status.FromContextError(err).Err()
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
}
