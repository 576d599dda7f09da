// Package podlinks is the one owner of the links of the pods on a meshnetd's
// node: it makes them at CNI ADD, removes them at DEL, makes the far ends
// other nodes ask for, changes running links (admin state, netem, MTU,
// routes, ApplyPod) and reads them back from the kernel. The CNIService,
// PeerService and LinkService are its fronts: each validates a call and
// hands it to the Reconciler, which changes the kernel.
//
// A pod is one that a CNI ADD on this node recorded in the pod store, with
// a Topology or not (yet); calls name it by namespace and name, never by
// netns path. A pod's links come from its Topology, made at the ADD or, for
// a Topology that comes later, at its first pass (SyncLinks). A sandbox
// whose ADD failed or was cut off is not wired: nothing reports it or
// changes it (wiredPod). Each end of a link is made by the daemon of the node
// that holds it: a veth (both pods on this node) by whichever pod's ADD
// comes second; a VXLAN end by each node for its own pod, and by the peer's
// ADD (through PeerService) when this pod's ADD could not know the peer's
// node yet; a physical peer's VXLAN and a macvlan by the pod's node alone.
// The pod is recorded in the pod store before any link is made, so of two
// concurrent ADDs the one that takes a link's lock second always sees the
// first and completes the link.
//
// Every runtime request is validated whole before anything changes
// (InvalidArgument naming each bad field); then the pod and its links are
// locked (internal/meshnetd/linklock) while the kernel is changed, and the
// answer is read back from the kernel. One record a pod, in the pod store,
// keeps what the kernel does not: the links made, and in its runtime part
// what the kernel forgets on admin down (static routes, IPv6 addresses),
// the meshnet-managed routes, each end's last error and the last ApplyPod,
// which a restarted meshnetd converges the pod back to (Reapply).
package podlinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/linkwatch"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/meshnetd/underlay"
)

// Config is what a Reconciler needs from the daemon.
type Config struct {
	// NodeName is this node's name, reported in LinkStatus.node.
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
	// Remote reaches the far ends of VXLAN links on other nodes; nil is
	// through Peers (the peer node's PeerService). With neither, a state
	// change of a VXLAN link fails with FailedPrecondition rather than
	// half-happen.
	Remote RemoteEnds

	// Store is the node's pod store: one record a pod.
	Store *podstore.Store
	// Locks serialises work per link; nil makes one.
	Locks *linklock.Locks
	// Topologies serves the Topologies of the pods wired on this node
	// (topotrack.Tracker follows the store); a miss is confirmed with
	// Client. It is read with client.UnsafeDisableDeepCopy, which a
	// Getter may honour by sharing its cached object: the Reconciler never
	// changes a Topology it reads. nil (a test of runtime calls alone)
	// leaves the set of a pod's links as it is recorded.
	Topologies Getter
	// Pods serves pods of this node's pods' namespaces, for the nodes of
	// their peers; a miss is confirmed with Client.
	Pods Getter
	// Client reads what Topologies and Pods do not hold (Nodes, objects
	// not seen yet) and writes Topology status.
	Client client.Client
	// UnderlayGuard installs the node's underlay guard (internal/meshnetd/
	// underlay): a VXLAN end's VNI is taken from its far end only, and the
	// node forwards nothing to the links' ports. Off, anyone who reaches
	// the node's VXLAN port can write into its links.
	UnderlayGuard bool
	// Log receives a record per change; nil discards them.
	Log *slog.Logger
}

// Reconciler converges the kernel to the links of the pods on its node.
type Reconciler struct {
	cfg       Config
	log       *slog.Logger
	nodeNetns *links.Netns
	remote    RemoteEnds
	// guard is the node's underlay guard; nil guards nothing.
	guard *underlay.Guard
	// srcPorts are the source ports of the node's VXLAN ends.
	srcPorts *srcPorts
	// watch follows the kernel state of the pods for WatchLinks.
	watch *linkwatch.Watcher
	// applying lets one ApplyPod at a time work on a pod.
	applying gate

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
	// unwired holds the pods whose Topology was deleted, whose links go
	// (TopologyDeleted).
	unwired workqueue.TypedRateLimitingInterface[podstore.Key]

	// toPeers bounds the calls in flight to each other node's meshnetd.
	toPeers peerQueues
}

// New opens the node's namespace; Run must be called to write statuses and
// follow the kernel.
func New(cfg Config) (*Reconciler, error) {
	if cfg.NodeName == "" || !cfg.NodeIP.IsValid() {
		return nil, errors.New("podlinks: node name and node IP are required")
	}
	if cfg.Store == nil {
		return nil, errors.New("podlinks: needs a pod store")
	}
	if cfg.NodeNetns == "" {
		cfg.NodeNetns = "/proc/self/ns/net"
	}
	if cfg.Locks == nil {
		cfg.Locks = &linklock.Locks{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	node, err := links.OpenNetns(cfg.NodeNetns)
	if err != nil {
		return nil, fmt.Errorf("podlinks: %w", err)
	}
	rc := &Reconciler{
		cfg:       cfg,
		log:       cfg.Log.With("node", cfg.NodeName),
		nodeNetns: node,
		remote:    cfg.Remote,
		deleting:  map[podstore.Key]bool{},
		adding:    map[string]bool{},
		inCNI:     map[podstore.Key]int{},
		toPeers:   peerQueues{size: remoteCallsInFlight},
		status: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[podstore.Key](),
			workqueue.TypedRateLimitingQueueConfig[podstore.Key]{Name: "topology-status"}),
		owed: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[podstore.Key](owedRetry, owedRetryMax),
			workqueue.TypedRateLimitingQueueConfig[podstore.Key]{Name: "far-ends-owed"}),
		unwired: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[podstore.Key](),
			workqueue.TypedRateLimitingQueueConfig[podstore.Key]{Name: "topology-deleted"}),
	}
	if rc.remote == nil && cfg.Peers != nil {
		rc.remote = rc
	}
	rc.watch = linkwatch.New(linkwatch.Config{Pods: cfg.Store, Read: rc.snapshot, Log: rc.log})
	rc.srcPorts = newSrcPorts()
	for _, p := range cfg.Store.List() {
		for _, l := range p.Links {
			if l.SrcPort != 0 {
				rc.srcPorts.keep(guardOwner(p.Key(), l.LocalIntf), l.SrcPort)
			}
		}
	}
	if cfg.UnderlayGuard {
		if err := rc.openGuard(); err != nil {
			node.Close()
			return nil, err
		}
	}
	return rc, nil
}

// Run follows the kernel state of the node's pods for WatchLinks, writes
// the sandbox fields of the Topology status of pods wired or torn down
// here, and asks for the far ends owed to them, until ctx ends.
func (rc *Reconciler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { rc.watch.Run(ctx) })
	wg.Go(func() { rc.resyncGuard(ctx) })
	rc.runQueues(ctx)
	wg.Wait()
}

// Close releases the node namespace and the guard's socket; the guard's
// table stays for the links, which outlive meshnetd.
func (rc *Reconciler) Close() error { return errors.Join(rc.guard.Close(), rc.nodeNetns.Close()) }

// CNIServer is the CNIService to serve on the unix socket.
func (rc *Reconciler) CNIServer() meshnetv1.CNIServiceServer { return cniServer{rc: rc} }

// PeerServer is the PeerService to serve to other meshnetds.
func (rc *Reconciler) PeerServer() meshnetv1.PeerServiceServer { return peerServer{rc: rc} }

// LinkServer is the LinkService to serve on meshnetd's gRPC port.
func (rc *Reconciler) LinkServer() meshnetv1.LinkServiceServer { return linkServer{rc: rc} }

// linkServer is the LinkService: each call is validated whole, then handed
// to the Reconciler.
type linkServer struct {
	meshnetv1.UnimplementedLinkServiceServer
	rc *Reconciler
}
