package podlinks

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/meshnetd/underlay"
)

// The underlay guard (Config.UnderlayGuard) holds an entry per VXLAN end of
// the node: an end's far end is admitted before the end is made, and
// released once it is removed. What a missed release leaves (an end gone
// with its pod's namespace) is mended from the records every
// guardResyncEvery.
const (
	guardResyncEvery = 30 * time.Second
	// guardGrace keeps, at a resync, the entries admitted this recently
	// that no record names yet: an ADD's record is written when its links
	// are made.
	guardGrace = 2 * time.Minute
)

// guardOwner names pod k's end intf in the underlay guard.
func guardOwner(k podstore.Key, intf string) string {
	return k.Namespace + "/" + k.Name + "/" + intf
}

// ensureVXLAN makes VXLAN end x of pod k, sending from a source port of
// its own, which it returns; its far end, sending from farPort (0: not
// known, any), is admitted by the underlay guard first: its first frames
// pass, nobody else's do.
func (rc *Reconciler) ensureVXLAN(k podstore.Key, x links.VXLAN, farPort uint16) (links.Result, uint16, error) {
	owner := guardOwner(k, x.End.Name)
	x.SrcPort = rc.srcPorts.get(owner)
	if err := rc.guard.Admit(owner, tunnel(x.Remote, x.DstPort(), x.VNI, farPort)); err != nil {
		return 0, 0, err
	}
	r, err := links.EnsureVXLAN(x)
	if errors.Is(err, links.ErrVNIInUse) {
		// The VNI is another end's: this owner holds nothing. On any
		// other failure the entry stays: the end may exist already
		// (a transient failure of its change), and must not go unguarded
		// until the next resync; one for an end not made is dropped by
		// that resync, from the records.
		if rerr := rc.guard.Release(owner); rerr != nil {
			rc.log.Warn("underlay guard entry not released", "pod", k.String(), "intf", x.End.Name, "error", rerr)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	return r, x.SrcPort, nil
}

// tunnel is the guard's entry for a far end at remote sending from
// srcPort (0: any) to port with vni.
func tunnel(remote netip.Addr, port uint16, vni uint32, srcPort uint16) underlay.Tunnel {
	return underlay.Tunnel{Remote: remote, Port: port, VNI: vni, SrcPort: srcPort}
}

// admitFarPort admits, for pod k's VXLAN end l, its far end's source port
// as the far end's node told it; settleFarEnds records it, with the
// pod's other far ends, in one write.
func (rc *Reconciler) admitFarPort(k podstore.Key, l podstore.Link, port uint16) error {
	remote, err := netip.ParseAddr(l.PeerNodeIP)
	if port == 0 || err != nil || l.PeerSrcPort == port {
		return nil
	}
	return rc.guard.Admit(guardOwner(k, l.LocalIntf), tunnel(remote, l.Port(), l.VNI, port))
}

// The node's VXLAN ends take their source ports in [minSrcPort,
// maxSrcPort]: 32,767 ends a node pinned, the rest left the kernel's
// range (and told from other ends by address only).
const (
	minSrcPort = 32768
	maxSrcPort = 65534
)

// srcPorts gives each VXLAN end of the node, by guard owner, a source
// port no other end of the node has. It is safe for concurrent use.
type srcPorts struct {
	mu    sync.Mutex
	owner map[string]uint16
	used  map[uint16]string
}

func newSrcPorts() *srcPorts {
	return &srcPorts{owner: map[string]uint16{}, used: map[uint16]string{}}
}

// get is owner's port: the one it has, else the first free from a start
// its name picks (so a name keeps its port across restarts when free); 0
// when every port is taken.
func (s *srcPorts) get(owner string) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.owner[owner]; ok {
		return p
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	span := uint32(maxSrcPort - minSrcPort + 1)
	start := h.Sum32() % span
	for i := range span {
		p := uint16(minSrcPort + (start+i)%span)
		if _, taken := s.used[p]; !taken {
			s.owner[owner], s.used[p] = p, owner
			return p
		}
	}
	return 0
}

// keep gives owner port, as a record says it had, unless another has it.
func (s *srcPorts) keep(owner string, port uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := s.used[port]; taken || port < minSrcPort || port > maxSrcPort {
		return
	}
	if old, ok := s.owner[owner]; ok {
		delete(s.used, old)
	}
	s.owner[owner], s.used[port] = port, owner
}

// release frees owner's port.
func (s *srcPorts) release(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.owner[owner]; ok {
		delete(s.owner, owner)
		delete(s.used, p)
	}
}

// deleteEnd removes pod k's end intf (none, when ns is nil: the namespace
// is gone with it) and its underlay guard entry.
func (rc *Reconciler) deleteEnd(k podstore.Key, ns *links.Netns, intf string) error {
	if ns != nil {
		if err := links.Delete(ns, intf); err != nil {
			return err
		}
	}
	owner := guardOwner(k, intf)
	rc.srcPorts.release(owner)
	if err := rc.guard.Release(owner); err != nil {
		rc.log.Warn("underlay guard entry not released", "pod", k.String(), "intf", intf, "error", err)
	}
	return nil
}

// underlayTunnels are the tunnels of the VXLAN ends the pod store records,
// by guard owner.
func (rc *Reconciler) underlayTunnels() map[string]underlay.Tunnel {
	out := map[string]underlay.Tunnel{}
	for _, p := range rc.cfg.Store.List() {
		for _, l := range p.Links {
			if (l.Kind != v1beta1.LinkKindVXLAN && l.Kind != v1beta1.LinkKindPhy) || l.VNI == 0 {
				continue
			}
			remote, err := netip.ParseAddr(l.PeerNodeIP)
			if err != nil {
				continue
			}
			out[guardOwner(p.Key(), l.LocalIntf)] = tunnel(remote, l.Port(), l.VNI, l.PeerSrcPort)
		}
	}
	return out
}

// openGuard installs the node's underlay guard with the records' tunnels.
func (rc *Reconciler) openGuard() error {
	g, err := underlay.Open(rc.cfg.NodeNetns, rc.underlayTunnels())
	if err != nil {
		return fmt.Errorf("podlinks: %w", err)
	}
	rc.guard = g
	return nil
}

// resyncGuard mends the guard from the records every guardResyncEvery
// until ctx ends.
func (rc *Reconciler) resyncGuard(ctx context.Context) {
	if rc.guard == nil {
		return
	}
	t := time.NewTicker(guardResyncEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := rc.guard.Replace(rc.underlayTunnels(), guardGrace); err != nil {
			rc.log.Warn("underlay guard not resynced", "error", err)
		}
	}
}

// UnderlayGuard is the node's underlay guard, nil without one.
func (rc *Reconciler) UnderlayGuard() *underlay.Guard { return rc.guard }
