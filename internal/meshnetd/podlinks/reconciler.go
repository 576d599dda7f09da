package podlinks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// Getter reads one object, NotFound when it does not hold it; a
// client.Reader is one.
type Getter interface {
	Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error
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
func (rc *Reconciler) topology(ctx context.Context, k podstore.Key) (*v1beta1.Topology, error) {
	t := &v1beta1.Topology{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
	err := rc.cfg.Topologies.Get(ctx, key, t, client.UnsafeDisableDeepCopy)
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
	if err := rc.cfg.Client.List(ctx, &list, client.InNamespace(k.Namespace), client.MatchingFields{"metadata.name": k.Name}); err != nil {
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
func (rc *Reconciler) peerNode(ctx context.Context, k podstore.Key) (peerPlace, error) {
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
	err := rc.cfg.Pods.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = rc.cfg.Client.Get(ctx, key, pod)
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
	if err := rc.cfg.Client.Get(ctx, client.ObjectKey{Name: at.node}, n); err != nil {
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
func (rc *Reconciler) peerClient(ip netip.Addr) (meshnetv1.PeerServiceClient, error) {
	c, err := rc.cfg.Peers.Conn(net.JoinHostPort(ip.String(), strconv.Itoa(rc.cfg.PeerPort)))
	if err != nil {
		return nil, err
	}
	return meshnetv1.NewPeerServiceClient(c), nil
}

// callPeer makes a call to the meshnetd of the node at ip, in its turn
// among this daemon's calls to that node (toPeers), within timeout of
// getting it.
func (rc *Reconciler) callPeer(ctx context.Context, ip netip.Addr, timeout time.Duration, call func(context.Context, meshnetv1.PeerServiceClient) error) error {
	c, err := rc.peerClient(ip)
	if err != nil {
		return err
	}
	return rc.toPeers.do(ctx, ip, func() error {
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
func (rc *Reconciler) updateRecord(k podstore.Key, change func(*podstore.Pod)) error {
	b, leader := rc.records.join(k, change)
	if !leader {
		<-b.done
		return b.err
	}
	unlock := rc.recMu.Lock(linklock.Key{Namespace: k.Namespace, Pod: k.Name})
	changes := rc.records.take(k, b)
	b.err = func() error {
		p, ok := rc.cfg.Store.Get(k)
		if !ok {
			return nil
		}
		p.Links = append([]podstore.Link(nil), p.Links...)
		for _, c := range changes {
			c(&p)
		}
		return rc.cfg.Store.Put(p)
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

func (rc *Reconciler) isDeleting(k podstore.Key) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.deleting[k]
}

func (rc *Reconciler) setDeleting(k podstore.Key, on bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if on {
		rc.deleting[k] = true
	} else {
		delete(rc.deleting, k)
	}
}

// InCNI tells whether pod k's CNI ADD or DEL is making or removing its
// links on this node right now: the links are the ADD's or DEL's until it
// ends, and a runtime change or a read of all of them meanwhile (an
// ApplyPod) would only contend with it. A 10,000-link ADD beside the
// controller's ApplyPods, each reading the pod whole until a read was not
// interrupted by the ADD's changes, outlasted CNI's 2 minutes.
func (rc *Reconciler) InCNI(k podstore.Key) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.inCNI[k] > 0
}

// enterCNI marks pod k's ADD or DEL in flight until the returned func is
// called.
func (rc *Reconciler) enterCNI(k podstore.Key) func() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.inCNI[k]++
	return sync.OnceFunc(func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.inCNI[k]--; rc.inCNI[k] <= 0 {
			delete(rc.inCNI, k)
		}
	})
}

// setAdding marks a sandbox's ADD in flight until the returned func is
// called.
func (rc *Reconciler) setAdding(containerID string) func() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.adding[containerID] = true
	return func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		delete(rc.adding, containerID)
	}
}

func (rc *Reconciler) isAdding(containerID string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.adding[containerID]
}

// abandoned reports whether rec is a sandbox whose CNI ADD failed or was
// cut off (podstore.Pod.Adding with no ADD of it at work): the runtime
// throws such a sandbox away and makes another, so it is never reported,
// never wired by a runtime call, and never named in the Topology status.
func (rc *Reconciler) abandoned(rec podstore.Pod) bool {
	return rec.Adding && !rc.isAdding(rec.ContainerID)
}

// wiredPod returns pod k's record if k is wired on this node: recorded by a
// CNI ADD that succeeded, or that is still at work. It is how every caller
// but the CNI's own ADD, DEL and GC finds a pod.
func (rc *Reconciler) wiredPod(k podstore.Key) (podstore.Pod, bool) {
	rec, ok := rc.cfg.Store.Get(k)
	if !ok || rc.abandoned(rec) {
		return podstore.Pod{}, false
	}
	return rec, true
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
