package links

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// State is an interface as the kernel reports it.
type State struct {
	Kind      string // "veth", "vxlan", "macvlan", ...
	AdminUp   bool   // IFF_UP: what SetAdminUp/SetAdminDown set
	Carrier   bool   // IFF_LOWER_UP: a veth loses it when either end is down
	OperState string // RFC 2863 state: "up", "down", "lowerlayerdown", ...
	MTU       int
	Addrs     []netip.Prefix
	Counters  Counters
}

// Counters are an interface's packet counters since it was made.
type Counters struct {
	RxBytes, TxBytes     uint64
	RxPackets, TxPackets uint64
	RxDropped, TxDropped uint64
	RxErrors, TxErrors   uint64
}

// ReadState reads interface name in ns.
func ReadState(ns *Netns, name string) (State, error) {
	l, err := ns.linkByName(name)
	if err != nil {
		return State{}, err
	}
	if l == nil {
		return State{}, fmt.Errorf("read state: no interface %s in netns %s", name, ns.path)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return ns.h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return State{}, fmt.Errorf("read state: list addresses of %s in netns %s: %w", name, ns.path, err)
	}
	s := stateOf(l)
	for _, ad := range addrs {
		if p, ok := prefixOf(ad.IPNet); ok {
			s.Addrs = append(s.Addrs, p)
		}
	}
	return s, nil
}

// Saved is what the kernel forgets when an interface goes administratively
// down: every IPv4 and IPv6 route through it, and its IPv6 addresses (with
// the default net.ipv6.conf.*.keep_addr_on_down=0). IPv4 addresses stay.
type Saved struct {
	Routes []Route        // static routes (see StaticRoutes)
	Addrs  []netip.Prefix // global IPv6 addresses
}

// SetAdminDown takes interface name in ns down, as pulling a cable would (a
// veth's peer loses carrier too; a vxlan's remote end does not, its node must
// take it down). It returns what the kernel flushes, for SetAdminUp.
func SetAdminDown(ns *Netns, name string) (Saved, error) {
	l, err := ns.linkByName(name)
	if err != nil {
		return Saved{}, err
	}
	if l == nil {
		return Saved{}, fmt.Errorf("set down: no interface %s in netns %s", name, ns.path)
	}
	var s Saved
	if s.Routes, err = StaticRoutes(ns, name); err != nil {
		return Saved{}, fmt.Errorf("set down: %w", err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return ns.h.AddrList(l, netlink.FAMILY_V6) })
	if err != nil {
		return Saved{}, fmt.Errorf("set down: list addresses of %s in netns %s: %w", name, ns.path, err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && a.Scope == unix.RT_SCOPE_UNIVERSE {
			s.Addrs = append(s.Addrs, p)
		}
	}
	if err := ns.h.LinkSetDown(l); err != nil {
		return Saved{}, fmt.Errorf("set %s down in netns %s: %w", name, ns.path, err)
	}
	return s, nil
}

// SetAdminUp brings interface name in ns up and restores s, from
// SetAdminDown (the zero Saved restores nothing).
func SetAdminUp(ns *Netns, name string, s Saved) error {
	l, err := ns.linkByName(name)
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("set up: no interface %s in netns %s", name, ns.path)
	}
	if err := ns.h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up in netns %s: %w", name, ns.path, err)
	}
	if err := settle(ns, name); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	for _, p := range s.Addrs {
		if err := ns.h.AddrReplace(l, nlAddr(p)); err != nil {
			return fmt.Errorf("set up: restore address %v on %s in netns %s: %w", p, name, ns.path, err)
		}
	}
	for _, r := range s.Routes {
		if err := ReplaceRoute(ns, r); err != nil {
			return fmt.Errorf("set up: restore: %w", err)
		}
	}
	return nil
}

// settleTimeout bounds the wait for the kernel's link watch (see settle).
const settleTimeout = 2 * time.Second

// settle waits until the kernel has acted on interface name gaining carrier.
// Carrier (IFF_LOWER_UP) is set at once, but the queueing discipline is only
// attached, and the oper state set, later by the link watch work; until then
// the interface drops what it sends. This bites the veth end brought up
// first: it gains carrier only when its peer comes up.
//
// The poll backs off from 5ms to 100ms: the link watch often acts within a
// few milliseconds, but runs for non-urgent events (veth and vxlan ends) at
// most once a second, and hundreds of ends waiting on it in a batch must not
// spin on netlink.
func settle(ns *Netns, name string) error {
	deadline := time.Now().Add(settleTimeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		l, err := ns.linkByName(name)
		if err != nil || l == nil {
			return err
		}
		a := l.Attrs()
		pending := a.RawFlags&unix.IFF_LOWER_UP != 0 &&
			(a.OperState == netlink.OperDown || a.OperState == netlink.OperLowerLayerDown)
		if !pending {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in netns %s has carrier but is still oper %s after %v", name, ns.path, a.OperState, settleTimeout)
		}
		time.Sleep(pause)
	}
}
