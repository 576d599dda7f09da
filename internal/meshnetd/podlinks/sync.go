package podlinks

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// SyncLinks converges the set of links of a pod wired on this node to its
// Topology, while the pod runs: a link the Topology lists and the pod's
// record lacks is wired as CNI ADD wires it (both ends of a veth, this end
// and then the peer node's end of a VXLAN, a physical peer, a macvlan); a
// recorded link the Topology no longer lists is removed as CNI DEL removes
// it, with its remote end. A link whose interface or peer changed is
// removed and wired again; every other link is left alone. ApplyPod calls
// it before it converges the links' state, netem and routes.
//
// generation is the Topology generation the caller converges to: a cached
// Topology older than that is read again from the API server.
func (rc *Reconciler) SyncLinks(ctx context.Context, k podstore.Key, generation int64) error {
	rec, ok := rc.wiredPod(k)
	if !ok || rc.isDeleting(k) || rc.isAdding(rec.ContainerID) {
		// Not wired here, or ADD or DEL is at work on it and does the job.
		return nil
	}
	topo, err := rc.topologyAt(ctx, k, generation)
	if err != nil {
		return err
	}
	var want []v1beta1.Link
	if topo != nil {
		want = topo.Spec.Links
		if topo.Status.ContainerID != rec.ContainerID {
			// A Topology created after its pod's ADD (or created again)
			// does not name the sandbox yet, which its peers wait for.
			rc.status.Add(k)
		}
	}
	log := rc.log.With("pod", k.String(), "container_id", rec.ContainerID)
	ns, err := links.OpenNetns(rec.Netns)
	if err != nil {
		return fmt.Errorf("pod %s: %w", k, err)
	}
	defer ns.Close()
	if n, err := rc.dropOrphanEnds(ctx, k, ns, rec, log); err != nil {
		return err
	} else if n > 0 {
		if rec, ok = rc.wiredPod(k); !ok {
			return nil
		}
	}
	names, err := links.Names(ns)
	if err != nil {
		return fmt.Errorf("pod %s: %w", k, err)
	}
	if err := rc.syncBridge(k, ns, rec, topo.BridgeName(), log); err != nil {
		return fmt.Errorf("pod %s: %w", k, err)
	}
	add, drop, lost, owed := linkChanges(rec.Links, want, names)
	for _, l := range lost {
		log.Warn("link lost from the pod's network namespace: wiring it again", "link", l.UID, "intf", l.LocalIntf, "peer", l.PeerPod)
	}
	owedEnds := rc.owedFarEnds(k, rec, owed, log)
	if len(add) == 0 && len(drop) == 0 && len(owedEnds) == 0 {
		return nil
	}

	// Removals first: a link moved to another peer may keep its interface.
	dropped, failed := rc.unwireLinks(ctx, k, ns, drop, log)
	ws := rc.wireLinks(ctx, pod{key: k, ns: ns, topo: topo}, add, log)
	failed = append(failed, ws.failed...)
	wiredLinks := ws.records
	for _, l := range add {
		if r, ok := wiredLinks[l.UID]; ok {
			log.Info("link added to a running pod", "link", l.UID, "intf", l.LocalIntf, "peer", l.PeerPod, "kind", r.Kind)
		}
	}
	// A far end is owed until its node made it: recorded before asking, so
	// that a crash in between leaves it owed, not forgotten.
	for _, r := range ws.remotes {
		if l, ok := wiredLinks[int(r.result.Uid)]; ok {
			l.FarEndOwed = true
			wiredLinks[l.UID] = l
		}
	}
	// A pass that only asks for far ends owed changes the record once
	// they are made (settleFarEnds).
	if len(add)+len(drop) > 0 {
		if err := rc.updateRecord(k, func(pp *podstore.Pod) {
			if pp.ContainerID != rec.ContainerID {
				return
			}
			kept := pp.Links[:0]
			for _, l := range pp.Links {
				if _, rewired := wiredLinks[l.UID]; !dropped[l.UID] && !rewired {
					kept = append(kept, l)
				}
			}
			pp.Links = kept
			for _, l := range add {
				if r, ok := wiredLinks[l.UID]; ok {
					pp.Links = append(pp.Links, r)
				}
			}
		}); err != nil {
			failed = append(failed, err)
		}
	}
	if err := rc.settleFarEnds(k, rec.ContainerID, rc.createRemoteEnds(ctx, k, append(ws.remotes, owedEnds...))); err != nil {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("pod %s: %d of %d link changes failed: %w", k, len(failed), len(add)+len(drop), utilerrors.NewAggregate(failed))
	}
	return nil
}

// topologyAt returns pod k's Topology (nil when it has none) at generation
// or later: a cached Topology older than that is waited for, then read from
// the API server.
func (rc *Reconciler) topologyAt(ctx context.Context, k podstore.Key, generation int64) (*v1beta1.Topology, error) {
	topo, err := rc.topology(ctx, k)
	if err == nil && topo != nil && topo.Generation < generation {
		// The cache lags the edit this call converges to, by the few
		// milliseconds its watch event takes: wait for it rather than
		// read the whole Topology from the API server again; read it if
		// the cache has not caught up in a second.
		fresh := &v1beta1.Topology{}
		werr := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Second, true, func(ctx context.Context) (bool, error) {
			return rc.cfg.Topologies.Get(ctx, client.ObjectKeyFromObject(topo), fresh, client.UnsafeDisableDeepCopy) == nil && fresh.Generation >= generation, nil
		})
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case werr != nil:
			// A new object: decoding into fresh would write into the
			// links it shares with the cache.
			fresh = &v1beta1.Topology{}
			err = rc.cfg.Client.Get(ctx, client.ObjectKeyFromObject(topo), fresh)
		}
		if err == nil {
			topo = fresh
		}
	}
	return topo, err
}

// linkChanges compares a pod's recorded links with its Topology's and
// with the interfaces its namespace holds (names): the links to wire (new,
// changed in interface or peer, or wired once and lost since: a crash
// between the kernel's change and the record's, or an ip link delete) and
// the recorded links to remove (gone, or changed). lost are those of add
// that were lost.
func linkChanges(have []podstore.Link, want []v1beta1.Link, names map[string]bool) (add []v1beta1.Link, drop []podstore.Link, lost, owed []v1beta1.Link) {
	byUID := map[int]v1beta1.Link{}
	for _, l := range want {
		byUID[l.UID] = l
	}
	recorded := map[int]podstore.Link{}
	for _, h := range have {
		recorded[h.UID] = h
		if l, ok := byUID[h.UID]; !ok || !same(h, l) {
			drop = append(drop, h)
		}
	}
	for _, l := range want {
		h, ok := recorded[l.UID]
		switch {
		case !ok || !same(h, l):
			add = append(add, l)
		case h.Kind != "" && !names[l.LocalIntf]:
			// Wired once (a link waiting for its peer has no kind, and
			// no interface yet), gone since.
			add, lost = append(add, l), append(lost, l)
		case farEndOwed(h):
			// This end is there, as it is: only its far end is asked
			// for again (owedFarEnds).
			owed = append(owed, l)
		}
	}
	return add, drop, lost, owed
}

// farEndOwed tells whether recorded link h is a VXLAN whose far end its
// peer's node has not made yet.
func farEndOwed(h podstore.Link) bool {
	return h.Kind == v1beta1.LinkKindVXLAN && h.FarEndOwed
}

// same tells whether recorded link h is l as the Topology has it now.
func same(h podstore.Link, l v1beta1.Link) bool {
	return h.LocalIntf == l.LocalIntf && h.PeerPod == l.PeerPod && h.PeerIntf == l.PeerIntf
}

// unwireLinks removes a pod's ends of recorded links and, for VXLANs, the
// peers' ends on their nodes, remoteCallsInFlight calls at a time as DEL
// removes them (a Topology deleted before its 1,024-link pod took 30 s
// one call at a time); a veth's peer end goes with it. It returns the
// links removed, and the failures: a peer node that does not answer fails its link, with
// the link still recorded, so that the next pass tries again.
func (rc *Reconciler) unwireLinks(ctx context.Context, k podstore.Key, ns *links.Netns, ls []podstore.Link, log *slog.Logger) (dropped map[int]bool, failed []error) {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		slots = make(chan struct{}, remoteCallsInFlight)
	)
	dropped = map[int]bool{}
	done := func(l podstore.Link, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, err)
			return
		}
		dropped[l.UID] = true
		log.Info("link removed from a running pod", "link", l.UID, "intf", l.LocalIntf, "peer", l.PeerPod)
	}
	for _, l := range ls {
		remote, err := rc.deleteLocalEnd(k, ns, l)
		if err != nil || !remote {
			done(l, err)
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := rc.deleteRemoteEnd(ctx, k, l); err != nil {
				done(l, fmt.Errorf("link %d (%s): its peer's end: %w", l.UID, l.LocalIntf, err))
				return
			}
			done(l, nil)
		})
	}
	wg.Wait()
	return dropped, failed
}

// deleteLocalEnd removes a pod's end of a recorded link (a veth's peer end
// goes with it) under the locks of both ends; ns nil means the pod's
// namespace, and its interfaces, are gone already. It returns whether the
// peer's end lives on another node and must be removed there (a VXLAN, or a
// link still pending).
func (rc *Reconciler) deleteLocalEnd(k podstore.Key, ns *links.Netns, l podstore.Link) (remote bool, err error) {
	peerKey := podstore.Key{Namespace: k.Namespace, Name: l.PeerPod}
	_, peerLocal := rc.cfg.Store.Get(peerKey)
	lockKeys := []linklock.Key{endKey(k, l.LocalIntf)}
	if peerLocal && l.Kind != v1beta1.LinkKindPhy && l.Kind != v1beta1.LinkKindMacvlan {
		lockKeys = append(lockKeys, endKey(peerKey, l.PeerIntf))
	}
	unlock := rc.cfg.Locks.Lock(lockKeys...)
	err = rc.deleteEnd(k, ns, l.LocalIntf)
	unlock()
	if err != nil {
		return false, fmt.Errorf("link %d (%s): %w", l.UID, l.LocalIntf, err)
	}
	remote = !peerLocal && (l.Kind == v1beta1.LinkKindVXLAN || l.Kind == "")
	return remote, nil
}

// dropOrphanEnds removes the pod's VXLAN ends whose peer pod is gone, and
// returns how many. The peer's DEL removes its far end through this node
// (DeleteRemoteEnd), but not when this node did not answer then (meshnetd
// restarting, the node unreachable), and nothing else would: the end would
// stay, with carrier, pointing at a pod that is gone. A peer the namespace
// cache has, in any state, keeps its end; a miss is confirmed with the API
// server under the end's lock, which a new peer pod's ADD takes too
// (CreateRemoteEnd) and which only comes once that pod exists, so an end
// made for a new peer is never removed. The link then waits for its peer's
// next pod, as DeleteRemoteEnd leaves it.
func (rc *Reconciler) dropOrphanEnds(ctx context.Context, k podstore.Key, ns *links.Netns, rec podstore.Pod, log *slog.Logger) (int, error) {
	dropped := 0
	// Whether each peer pod may be gone: a pod's many links share a few.
	mayBeGone := map[string]bool{}
	for _, l := range rec.Links {
		if l.Kind != v1beta1.LinkKindVXLAN {
			continue
		}
		peer := client.ObjectKey{Namespace: k.Namespace, Name: l.PeerPod}
		gone, seen := mayBeGone[l.PeerPod]
		if !seen {
			_, local := rc.cfg.Store.Get(podstore.Key{Namespace: peer.Namespace, Name: peer.Name})
			// A peer the cache has (in any state), or an error: not
			// known for sure to be gone.
			gone = !local && apierrors.IsNotFound(rc.cfg.Pods.Get(ctx, peer, &corev1.Pod{}, client.UnsafeDisableDeepCopy))
			mayBeGone[l.PeerPod] = gone
		}
		if !gone {
			continue
		}
		gone, err := rc.dropIfPeerGone(ctx, k, ns, l, peer)
		if err != nil {
			return dropped, fmt.Errorf("pod %s: link %d (%s) to pod %s: %w", k, l.UID, l.LocalIntf, l.PeerPod, err)
		}
		if gone {
			dropped++
			log.Info("far end of a pod that is gone removed: the link waits for its peer's next pod", "link", l.UID, "intf", l.LocalIntf, "peer", l.PeerPod, "vni", l.VNI)
		}
	}
	return dropped, nil
}

// dropIfPeerGone removes link l's end, under its lock, when the API server
// has no peer pod and the end is still the one recorded (its VNI).
func (rc *Reconciler) dropIfPeerGone(ctx context.Context, k podstore.Key, ns *links.Netns, l podstore.Link, peer client.ObjectKey) (bool, error) {
	defer rc.cfg.Locks.Lock(endKey(k, l.LocalIntf))()
	err := rc.cfg.Client.Get(ctx, peer, &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		return false, client.IgnoreNotFound(err)
	}
	d, ok, err := links.VXLANOf(rc.nodeNetns, ns, l.LocalIntf)
	if err != nil || !ok || (l.VNI != 0 && d.VNI != l.VNI) {
		return false, err
	}
	if err := rc.deleteEnd(k, ns, l.LocalIntf); err != nil {
		return false, err
	}
	return true, rc.endWaits(k, l.UID, l.LocalIntf, d.VNI)
}

// owedFarEnds are the requests for the far ends of the pod's links owed
// (linkChanges), to the node each end here points at, as recorded: only
// the far end is asked for again; this end, which is there, is left as it
// is (a runtime state on it, a LinkFault holding it down, stays).
func (rc *Reconciler) owedFarEnds(k podstore.Key, rec podstore.Pod, owed []v1beta1.Link, log *slog.Logger) []wired {
	var out []wired
	for _, l := range owed {
		i := slices.IndexFunc(rec.Links, func(h podstore.Link) bool { return h.UID == l.UID })
		peerIP, err := netip.ParseAddr(rec.Links[i].PeerNodeIP)
		if err != nil || rec.Links[i].VNI == 0 {
			continue // not wired as far as the record tells: a sync wires it
		}
		log.Info("far end not made by its node yet: asking again", "link", l.UID, "intf", l.LocalIntf, "peer", l.PeerPod, "peer_node_ip", peerIP)
		out = append(out, wired{
			result: &meshnetv1.LinkResult{Interface: l.LocalIntf, Uid: uint32(l.UID), Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN},
			record: rec.Links[i],
			remote: rc.remoteEnd(k, l, rec.Links[i].VNI, peerIP, rec.Links[i].SrcPort), peerIP: peerIP,
		})
	}
	return out
}

// syncBridge converges pod k's segment bridge to want, its Topology's
// (empty when the pod is not a segment): every recorded end a port of it
// (an end made by a peer's ADD before this pod's Topology said bridge is
// not yet, nor one someone took out of it), and a bridge the Topology no
// longer names removed, its ports left as plain interfaces. Ends made
// later join it as they are made (the end's Bridge).
func (rc *Reconciler) syncBridge(k podstore.Key, ns *links.Netns, rec podstore.Pod, want string, log *slog.Logger) error {
	if want == "" && rec.Bridge == "" {
		return nil
	}
	if rec.Bridge != "" && rec.Bridge != want {
		n, err := links.RemoveBridges(ns, want)
		if err != nil {
			return err
		}
		log.Info("bridge no longer in the Topology removed", "bridge", rec.Bridge, "removed", n)
	}
	if want != "" {
		var ports []string
		for _, l := range rec.Links {
			if l.Kind != "" {
				ports = append(ports, l.LocalIntf)
			}
		}
		moved, err := links.EnsurePorts(ns, want, ports)
		if err != nil {
			return err
		}
		if moved > 0 {
			log.Info("link ends made ports of the pod's bridge", "bridge", want, "moved", moved)
		}
	}
	if rec.Bridge == want {
		return nil
	}
	return rc.updateRecord(k, func(pp *podstore.Pod) {
		if pp.ContainerID == rec.ContainerID {
			pp.Bridge = want
		}
	})
}
