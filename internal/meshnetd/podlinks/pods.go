package podlinks

import (
	"errors"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/linkwatch"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netem"
)

// snapshot is a pod as the kernel has it: the one read the link watcher,
// and so WatchLinks and ApplyPod's answer, are made of.
func (rc *Reconciler) snapshot(p podstore.Pod) (linkwatch.Snapshot, error) {
	ls, routes, err := rc.read(p, "", true)
	return linkwatch.Snapshot{Links: ls, Routes: routes}, err
}

// lookup finds a pod wired on this node (wiredPod), NotFound saying why
// when there is none.
func (rc *Reconciler) lookup(namespace, pod string) (podstore.Pod, error) {
	k := podstore.Key{Namespace: namespace, Name: pod}
	p, ok := rc.wiredPod(k)
	if !ok {
		return podstore.Pod{}, rc.notWired(k)
	}
	return p, nil
}

// notWired is the NotFound of a runtime call on pod k, which is not wired
// on this node: never recorded, or a sandbox whose ADD failed or was cut
// off, whose links the runtime's next sandbox gets.
func (rc *Reconciler) notWired(k podstore.Key) error {
	if rec, ok := rc.cfg.Store.Get(k); ok && rc.abandoned(rec) {
		return status.Errorf(codes.NotFound, "pod %s is not wired on node %s: the CNI ADD of its sandbox %s failed or was cut off; the runtime's next sandbox gets its links", k, rc.cfg.NodeName, rec.ContainerID)
	}
	return status.Errorf(codes.NotFound, "pod %s is not wired on node %s", k, rc.cfg.NodeName)
}

func (rc *Reconciler) lookupLink(namespace, pod, intf string) (podstore.Pod, podstore.Link, error) {
	p, err := rc.lookup(namespace, pod)
	if err != nil {
		return podstore.Pod{}, podstore.Link{}, err
	}
	l, ok := linkOf(p, intf)
	if !ok {
		return podstore.Pod{}, podstore.Link{}, status.Errorf(codes.NotFound, "pod %s has no meshnet link %s", p.Key(), intf)
	}
	return p, l, nil
}

// oneLink is the path of every call on one link (GetLink, SetLinkState,
// SetNetem, ClearNetem): the namespace, pod and interface checked with the
// call's own fields (check, when not nil), the link looked up, change made
// (when not nil), and the link read back after it.
func (rc *Reconciler) oneLink(namespace, pod, intf string, check func(*violations), change func(podstore.Pod, podstore.Link) error) (*meshnetv1.LinkStatus, error) {
	var v violations
	v.namespace(namespace)
	v.pod("pod", pod)
	v.ifname("interface", intf)
	if check != nil {
		check(&v)
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	p, l, err := rc.lookupLink(namespace, pod, intf)
	if err != nil {
		return nil, err
	}
	if change != nil {
		if err := change(p, l); err != nil {
			return nil, err
		}
	}
	return rc.readLink(p, l.LocalIntf)
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
func (rc *Reconciler) lockPod(k podstore.Key, intfs []string, extra ...linklock.Key) (unlock func()) {
	keys := []linklock.Key{{Namespace: k.Namespace, Pod: k.Name}}
	for _, i := range intfs {
		keys = append(keys, linklock.Key{Namespace: k.Namespace, Pod: k.Name, Interface: i})
	}
	return rc.cfg.Locks.Lock(append(keys, extra...)...)
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

// kernelCode is the gRPC code of a failure on the kernel's side of a call,
// the one rule every front and the CNI share: FailedPrecondition for what
// the node lacks or refuses and a retry does not mend (no sch_netem, a
// root qdisc meshnet does not own, a macvlan parent not trusted, a route's
// gateway on no subnet of a link that is up); Unavailable for a kernel
// that was busy (links.IsTransient: a dump still interrupted after its
// retries, EBUSY, EAGAIN), which the caller's retry mends; Internal
// otherwise.
func kernelCode(err error) codes.Code {
	switch {
	case errors.Is(err, netem.ErrNoNetem), errors.Is(err, netem.ErrForeignQdisc), errors.Is(err, links.ErrUntrustedParent),
		errors.Is(err, unix.ENETUNREACH):
		return codes.FailedPrecondition
	case links.IsTransient(err):
		return codes.Unavailable
	}
	return codes.Internal
}

// kernelBusy adds to st, an UNAVAILABLE for a busy kernel, the ErrorInfo
// that tells a caller the daemon answered and its kernel was busy, not
// that the daemon was away.
func kernelBusy(st *status.Status) *status.Status {
	if busy, err := st.WithDetails(&errdetails.ErrorInfo{Domain: meshnetv1.ErrorDomain, Reason: meshnetv1.ReasonKernelBusy}); err == nil {
		return busy
	}
	return st
}

// kernelErr turns a failed kernel change into a status (kernelCode).
func kernelErr(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, unix.ENETUNREACH) {
		// The caller's route, or a link taken down, not meshnetd's fault.
		return status.Error(codes.FailedPrecondition, err.Error()+" (from the pod: is a route's gateway on no subnet of a link that is up?)")
	}
	if code := kernelCode(err); code != codes.Unavailable {
		return status.Error(code, err.Error())
	}
	return kernelBusy(status.New(codes.Unavailable, err.Error())).Err()
}

// withLink runs change with the pod and intf locked, the pod's netns open
// and its state loaded, and saves the state when change says it changed.
func (rc *Reconciler) withLink(p podstore.Pod, intf string, change func(*podNetns, *podRecord) (bool, error)) error {
	defer rc.lockPod(p.Key(), []string{intf})()
	st, err := rc.load(p)
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
		if err := rc.saveRecord(p, st); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}

var owners = map[netem.Owner]meshnetv1.QdiscOwner{
	netem.OwnerNone: meshnetv1.QdiscOwner_QDISC_OWNER_NONE, netem.OwnerMeshnet: meshnetv1.QdiscOwner_QDISC_OWNER_MESHNET,
	netem.OwnerForeign: meshnetv1.QdiscOwner_QDISC_OWNER_FOREIGN,
}

func (rc *Reconciler) logChange(changed bool, msg string, p podstore.Pod, args ...any) {
	if changed {
		rc.log.Info(msg, append([]any{"pod", p.Key().String()}, args...)...)
	}
}

// withPod runs change with the pod, all its links and the extra keys
// locked, its netns open, its state loaded and the interfaces in its netns
// read; the record is saved when change reports a change, even when
// it fails part way.
func (rc *Reconciler) withPod(p podstore.Pod, extra []linklock.Key, change func(*podNetns, *podRecord, map[string]links.Interface) (bool, error)) error {
	defer rc.lockPod(p.Key(), intfsOf(p), extra...)()
	// The watcher reads the pod once this change is done, not half way.
	defer rc.watch.Hold(p.Key())()
	st, err := rc.load(p)
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
		return kernelErr(err)
	}
	changed, cerr := change(n, &st, all)
	if changed {
		// What the kernel does not tell (a last error, a distribution)
		// may have changed too: the record's write tells the watchers.
		if err := rc.saveRecord(p, st); err != nil {
			return status.Error(codes.Internal, errors.Join(cerr, err).Error())
		}
	}
	if cerr != nil {
		return kernelErr(cerr)
	}
	return nil
}
