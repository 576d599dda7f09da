// Package wiring is meshnetd's part of pod creation and deletion: the
// CNIService the plugin calls on the node's unix socket, and the PeerService
// other nodes' meshnetds call for the remote end of a cross-node link.
//
// A pod's links come from its Topology. Each end of a link is made by the
// daemon of the node that holds it: a veth (both pods on this node) by
// whichever pod's ADD comes second; a VXLAN end by each node for its own pod,
// and by the peer's ADD (through PeerService) when this pod's ADD could not
// know the peer's node yet; a physical peer's VXLAN and a macvlan by the
// pod's node alone. The pod is recorded in the pod store before any link is
// made, so of two concurrent ADDs the one that takes a link's lock second
// always sees the first and completes the link.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/shaping"
)

// Config is what a Wirer needs from the daemon.
type Config struct {
	NodeName string
	// NodeIP is this node's address: the VTEP of its VXLAN ends and the
	// Topology status src_ip.
	NodeIP netip.Addr
	// NodeNetns is the node's network namespace (/proc/self/ns/net for a
	// hostNetwork daemon).
	NodeNetns string
	// MacvlanParents are NICs of the node a cluster admin trusts as
	// macvlan parents whatever their kind (links.Macvlan.Trusted).
	MacvlanParents []string
	// PeerPort is the gRPC port of every node's meshnetd.
	PeerPort int
	// Peers holds the connections to other nodes' meshnetd, which carry
	// this daemon's token.
	Peers *daemonclient.Pool

	Store *podstore.Store
	// Locks is shared with everything else in meshnetd that changes links.
	Locks *linklock.Locks
	// Topologies serves the Topologies of the pods wired on this node
	// (topotrack.Tracker follows the store); a miss is confirmed with
	// Client. It is read with client.UnsafeDisableDeepCopy, which a
	// Getter may honour by sharing its cached object: the Wirer never
	// changes a Topology it reads.
	Topologies Getter
	// Pods serves pods of this node's pods' namespaces, for the nodes of
	// their peers; a miss is confirmed with Client.
	Pods Getter
	// Client reads what Topologies and Pods do not hold (Nodes, objects
	// not seen yet) and writes Topology status.
	Client client.Client
	// Hold defers the link watcher's reads of a pod until release, while
	// ADD or DEL changes its links: read whole again and again half done,
	// a pod of thousands of links costs more than its wiring. nil holds
	// nothing.
	Hold func(podstore.Key) (release func())
	// Wired is told how the ends of a pod's links were made (CNI ADD, a
	// link added to a running pod, a far end made for a peer), by
	// interface: shape has the ends made, each with its egress shaping
	// (nil: none), errs why each other end is not as its Topology wants.
	// It shapes the ends made and keeps each end's last error
	// (linkserver.Server.Wired: the one path netem takes into the kernel,
	// the one record of a link's last error), and returns why each end it
	// could not shape was not. nil shapes and records nothing.
	Wired func(pod podstore.Key, shape map[string]*shaping.Spec, errs map[string]string) map[string]error
	Log   *slog.Logger
}

// Getter reads one object, NotFound when it does not hold it; a
// client.Reader is one.
type Getter interface {
	Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error
}

// Wirer creates and removes the links of the pods on one node.
type Wirer struct {
	cfg  Config
	log  *slog.Logger
	node *links.Netns

	// recMu serialises read-modify-write of pod records.
	recMu linklock.Locks
	// records gathers the changes waiting for a pod's record (updateRecord).
	records recordQueue

	mu       sync.Mutex
	deleting map[podstore.Key]bool
	// adding holds the container ids whose ADD is in flight, which GC
	// leaves alone: the runtime may have listed its attachments before.
	adding map[string]bool
	// inCNI counts the ADDs and DELs (or GC's teardowns) of a pod in flight.
	inCNI map[podstore.Key]int

	status workqueue.TypedRateLimitingInterface[podstore.Key]
	// owed holds the pods whose record says a far end is owed, asked for
	// again by this daemon (askOwed), 5 s after it was not made and at
	// most 30 s apart: no controller's pass is needed, nor a controller.
	owed workqueue.TypedRateLimitingInterface[podstore.Key]

	// toPeers bounds the calls in flight to each other node's meshnetd.
	toPeers peerQueues
}

// New opens the node's namespace; Run must be called to write statuses.
func New(cfg Config) (*Wirer, error) {
	if cfg.NodeName == "" || !cfg.NodeIP.IsValid() {
		return nil, errors.New("wiring: node name and node IP are required")
	}
	if cfg.NodeNetns == "" {
		cfg.NodeNetns = "/proc/self/ns/net"
	}
	if cfg.Locks == nil {
		cfg.Locks = &linklock.Locks{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	node, err := links.OpenNetns(cfg.NodeNetns)
	if err != nil {
		return nil, fmt.Errorf("wiring: %w", err)
	}
	return &Wirer{
		cfg:      cfg,
		log:      cfg.Log.With("node", cfg.NodeName),
		node:     node,
		deleting: map[podstore.Key]bool{},
		adding:   map[string]bool{},
		inCNI:    map[podstore.Key]int{},
		toPeers:  peerQueues{size: remoteCallsInFlight},
		status: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[podstore.Key](),
			workqueue.TypedRateLimitingQueueConfig[podstore.Key]{Name: "topology-status"}),
		owed: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[podstore.Key](owedRetry, owedRetryMax),
			workqueue.TypedRateLimitingQueueConfig[podstore.Key]{Name: "far-ends-owed"}),
	}, nil
}

// hold defers the link watcher's reads of pod k until release (Config.Hold).
func (w *Wirer) hold(k podstore.Key) (release func()) {
	if w.cfg.Hold == nil {
		return func() {}
	}
	return w.cfg.Hold(k)
}

// Close releases the node namespace.
func (w *Wirer) Close() error { return w.node.Close() }

// CNIServer is the CNIService to serve on the unix socket.
func (w *Wirer) CNIServer() meshnetv1.CNIServiceServer { return cniServer{w: w} }

// PeerServer is the PeerService to serve to other meshnetds.
func (w *Wirer) PeerServer(ends EndStates) meshnetv1.PeerServiceServer {
	return peerServer{w: w, ends: ends}
}

// topology returns the pod's Topology, nil when it has none. Topologies
// may not have seen a Topology created just before the pod, nor track a pod
// being added, so a miss is confirmed with the API server: a pod must never
// start without links it has.
//
// The Topology may share its links with Topologies' cache, so it is read
// only: every far-end call (CreateRemoteEnd) reads its pod's Topology for
// one link, and a pod of n links gets n of those at once, so a copy each
// made memory grow with n² (wireVeth too copied the peer's Topology once
// per link).
func (w *Wirer) topology(ctx context.Context, k podstore.Key) (*v1beta1.Topology, error) {
	t := &v1beta1.Topology{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
	err := w.cfg.Topologies.Get(ctx, key, t, client.UnsafeDisableDeepCopy)
	if err == nil {
		return t, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read Topology %s: %w", k, err)
	}
	// A List by name is consistent and served from the API server's watch
	// cache: one round trip whether the Topology exists or not, where a
	// Get from the watch cache needs a quorum Get after it to trust a miss.
	var list v1beta1.TopologyList
	if err := w.cfg.Client.List(ctx, &list, client.InNamespace(k.Namespace), client.MatchingFields{"metadata.name": k.Name}); err != nil {
		return nil, fmt.Errorf("read Topology %s: %w", k, err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// peerPlace is where a peer pod runs.
type peerPlace struct {
	// node is empty while the pod is not scheduled or does not exist.
	node string
	// ip is the pod's status.hostIP, else the node's InternalIP (the
	// kubelet may not have written hostIP yet).
	ip netip.Addr
	// leaving is set once the pod is deleted: its DEL comes, nothing is to
	// be wired to it any more, and its next pod's ADD wires both ends.
	leaving bool
}

// peerNode returns where a pod runs.
func (w *Wirer) peerNode(ctx context.Context, k podstore.Key) (peerPlace, error) {
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
	err := w.cfg.Pods.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = w.cfg.Client.Get(ctx, key, pod)
	}
	if apierrors.IsNotFound(err) {
		return peerPlace{}, nil
	}
	if err != nil {
		return peerPlace{}, fmt.Errorf("read pod %s: %w", k, err)
	}
	at := peerPlace{node: pod.Spec.NodeName, leaving: pod.DeletionTimestamp != nil}
	if at.node == "" {
		return at, nil
	}
	if ip, err := netip.ParseAddr(pod.Status.HostIP); err == nil {
		at.ip = ip
		return at, nil
	}
	n := &corev1.Node{}
	if err := w.cfg.Client.Get(ctx, client.ObjectKey{Name: at.node}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return at, nil
		}
		return peerPlace{}, fmt.Errorf("read node %s of pod %s: %w", at.node, k, err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				at.ip = ip
				return at, nil
			}
		}
	}
	return at, nil
}

// peerClient returns a PeerService client for the meshnetd at ip.
func (w *Wirer) peerClient(ip netip.Addr) (meshnetv1.PeerServiceClient, error) {
	c, err := w.cfg.Peers.Conn(net.JoinHostPort(ip.String(), strconv.Itoa(w.cfg.PeerPort)))
	if err != nil {
		return nil, err
	}
	return meshnetv1.NewPeerServiceClient(c), nil
}

// callPeer makes a call to the meshnetd of the node at ip, in its turn
// among this daemon's calls to that node (toPeers), within timeout of
// getting it.
func (w *Wirer) callPeer(ctx context.Context, ip netip.Addr, timeout time.Duration, call func(context.Context, meshnetv1.PeerServiceClient) error) error {
	c, err := w.peerClient(ip)
	if err != nil {
		return err
	}
	return w.toPeers.do(ctx, ip, func() error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return call(ctx, c)
	})
}

// peerCallTimeout bounds one call to another node's meshnetd.
const peerCallTimeout = 10 * time.Second

// updateRecord changes a pod's record under its record lock, and returns
// once the record with the change is written; a pod with no record is left
// alone. The changes that arrive while the record is being written are
// applied and written together, in one Put (a group commit): a record is
// written whole, and a peer node making the far ends of a pod's 4,096
// VXLAN links, one call each, wrote its 4,096-link record 4,096 times.
func (w *Wirer) updateRecord(k podstore.Key, change func(*podstore.Pod)) error {
	b, leader := w.records.join(k, change)
	if !leader {
		<-b.done
		return b.err
	}
	unlock := w.recMu.Lock(linklock.Key{Namespace: k.Namespace, Pod: k.Name})
	changes := w.records.take(k, b)
	b.err = func() error {
		p, ok := w.cfg.Store.Get(k)
		if !ok {
			return nil
		}
		p.Links = append([]podstore.Link(nil), p.Links...)
		for _, c := range changes {
			c(&p)
		}
		return w.cfg.Store.Put(p)
	}()
	unlock()
	close(b.done)
	return b.err
}

// recordQueue holds, per pod, the record changes that wait to be written.
// The zero value is ready to use.
type recordQueue struct {
	mu      sync.Mutex
	pending map[podstore.Key]*recordBatch
}

// recordBatch is changes written in one Put; done is closed once it is.
type recordBatch struct {
	changes []func(*podstore.Pod)
	done    chan struct{}
	err     error
}

// join adds change to the pod's waiting batch, or starts one; leader is
// whether the caller started it and so writes it.
func (q *recordQueue) join(k podstore.Key, change func(*podstore.Pod)) (b *recordBatch, leader bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b = q.pending[k]; b == nil {
		if q.pending == nil {
			q.pending = map[podstore.Key]*recordBatch{}
		}
		b, leader = &recordBatch{done: make(chan struct{})}, true
		q.pending[k] = b
	}
	b.changes = append(b.changes, change)
	return b, leader
}

// take closes batch b to new changes, which start the next, and returns
// its changes.
func (q *recordQueue) take(k podstore.Key, b *recordBatch) []func(*podstore.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[k] == b {
		delete(q.pending, k)
	}
	return b.changes
}

func (w *Wirer) isDeleting(k podstore.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deleting[k]
}

func (w *Wirer) setDeleting(k podstore.Key, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.deleting[k] = true
	} else {
		delete(w.deleting, k)
	}
}

// InCNI tells whether pod k's CNI ADD or DEL is making or removing its
// links on this node right now: the links are the ADD's or DEL's until it
// ends, and a runtime change or a read of all of them meanwhile (an
// ApplyPod) would only contend with it. A 10,000-link ADD beside the
// controller's ApplyPods, each reading the pod whole until a read was not
// interrupted by the ADD's changes, outlasted CNI's 2 minutes.
func (w *Wirer) InCNI(k podstore.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inCNI[k] > 0
}

// enterCNI marks pod k's ADD or DEL in flight until the returned func is
// called.
func (w *Wirer) enterCNI(k podstore.Key) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inCNI[k]++
	return sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.inCNI[k]--; w.inCNI[k] <= 0 {
			delete(w.inCNI, k)
		}
	})
}

// setAdding marks a sandbox's ADD in flight until the returned func is
// called.
func (w *Wirer) setAdding(containerID string) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.adding[containerID] = true
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.adding, containerID)
	}
}

func (w *Wirer) isAdding(containerID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.adding[containerID]
}

// sameFile reports whether two paths name the same namespace inode.
func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	x, y := sa.Sys().(*syscall.Stat_t), sb.Sys().(*syscall.Stat_t)
	return x.Dev == y.Dev && x.Ino == y.Ino, nil
}
