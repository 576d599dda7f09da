package podlinks

import (
	"context"
	"fmt"
	"net/netip"
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

// ensureVXLAN makes VXLAN end x of pod k, its far end admitted by the
// underlay guard first: its first frames pass, nobody else's do.
func (rc *Reconciler) ensureVXLAN(k podstore.Key, x links.VXLAN) (links.Result, error) {
	owner := guardOwner(k, x.End.Name)
	port := x.Port
	if port == 0 {
		port = v1beta1.DefaultVXLANPort
	}
	if err := rc.guard.Admit(owner, underlay.Tunnel{Remote: x.Remote, Port: port, VNI: x.VNI}); err != nil {
		return 0, err
	}
	r, err := links.EnsureVXLAN(x)
	if err != nil {
		// The entry may be another end's VNI (ErrVNIInUse): this owner
		// holds nothing.
		if rerr := rc.guard.Release(owner); rerr != nil {
			rc.log.Warn("underlay guard entry not released", "pod", k.String(), "intf", x.End.Name, "error", rerr)
		}
	}
	return r, err
}

// deleteEnd removes pod k's end intf (none, when ns is nil: the namespace
// is gone with it) and its underlay guard entry.
func (rc *Reconciler) deleteEnd(k podstore.Key, ns *links.Netns, intf string) error {
	if ns != nil {
		if err := links.Delete(ns, intf); err != nil {
			return err
		}
	}
	if err := rc.guard.Release(guardOwner(k, intf)); err != nil {
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
			port := l.UDPPort
			if port == 0 {
				port = v1beta1.DefaultVXLANPort
			}
			out[guardOwner(p.Key(), l.LocalIntf)] = underlay.Tunnel{Remote: remote, Port: port, VNI: l.VNI}
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
