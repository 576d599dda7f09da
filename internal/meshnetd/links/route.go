package links

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Route is a unicast route in a pod's netns.
type Route struct {
	Dst    netip.Prefix
	Gw     netip.Addr // zero: Dst is directly reachable through Dev
	Dev    string     // zero: the kernel picks the device towards Gw
	Metric int
	Table  int // 0: main
}

func (r Route) String() string {
	s := r.Dst.String()
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	if r.Table != 0 && r.Table != unix.RT_TABLE_MAIN {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	return s
}

// routeProtocol marks routes this package installs. RTPROT_STATIC means
// "installed by an administrator"; routing daemons use their own protocol
// numbers and reinstall their routes themselves.
const routeProtocol = unix.RTPROT_STATIC

// AddRoute adds r to ns; it fails when the route exists.
func AddRoute(ns *Netns, r Route) error {
	nr, err := ns.nlRoute(r)
	if err == nil {
		err = ns.h.RouteAdd(nr)
	}
	if err != nil {
		return fmt.Errorf("add route %s in netns %s: %w", r, ns.path, err)
	}
	return nil
}

// ReplaceRoute adds r to ns or replaces the route to the same destination.
func ReplaceRoute(ns *Netns, r Route) error {
	nr, err := ns.nlRoute(r)
	if err == nil {
		err = ns.h.RouteReplace(nr)
	}
	if err != nil {
		return fmt.Errorf("replace route %s in netns %s: %w", r, ns.path, err)
	}
	return nil
}

// DeleteRoute removes r from ns; a missing route (or device) is not an error.
func DeleteRoute(ns *Netns, r Route) error {
	nr, err := ns.nlRoute(r)
	if err == nil {
		err = ns.h.RouteDel(nr)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, errNoDev) {
		return fmt.Errorf("delete route %s in netns %s: %w", r, ns.path, err)
	}
	return nil
}

var errNoDev = errors.New("no such device")

func (ns *Netns) nlRoute(r Route) (*netlink.Route, error) {
	if !r.Dst.IsValid() {
		return nil, errors.New("no destination")
	}
	nr := &netlink.Route{
		Dst:      ipNet(r.Dst.Masked()),
		Priority: r.Metric,
		Table:    r.Table,
		Protocol: routeProtocol,
	}
	if r.Gw.IsValid() {
		if r.Gw.Is4() != r.Dst.Addr().Is4() {
			return nil, fmt.Errorf("gateway %s and destination differ in family", r.Gw)
		}
		nr.Gw = r.Gw.AsSlice()
	} else {
		nr.Scope = netlink.SCOPE_LINK
	}
	if r.Dev != "" {
		l, err := ns.linkByName(r.Dev)
		if err != nil {
			return nil, err
		}
		if l == nil {
			return nil, fmt.Errorf("%w: %s", errNoDev, r.Dev)
		}
		nr.LinkIndex = l.Attrs().Index
	} else if !r.Gw.IsValid() {
		return nil, errors.New("neither gateway nor device")
	}
	return nr, nil
}

// StaticRoutes lists the routes through dev in ns that an administrator (or
// this package) installed, in every table: RTPROT_STATIC and RTPROT_BOOT
// (ip route's default). Routes of routing daemons and the kernel's connected
// routes are left out: their owners put them back. Multipath routes are not
// listed.
func StaticRoutes(ns *Netns, dev string) ([]Route, error) {
	l, err := ns.linkByName(dev)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("list routes: no interface %s in netns %s", dev, ns.path)
	}
	rs, err := staticRoutes(ns, map[int]string{l.Attrs().Index: dev})
	return rs[dev], err
}

// StaticRoutesOf is StaticRoutes for every interface of known, a read of
// ns (ReadAll), by interface name: one dump of ns's routes, where a call of
// StaticRoutes per interface dumps them once per interface.
func StaticRoutesOf(ns *Netns, known map[string]Interface) (map[string][]Route, error) {
	devs := make(map[int]string, len(known))
	for name, i := range known {
		devs[i.Index] = name
	}
	return staticRoutes(ns, devs)
}

// isStatic reports whether a route of this protocol and type is one that
// StaticRoutes reports: set by someone (ip route, meshnet), not by the
// kernel (connected, local, multicast) or by router advertisements.
func isStatic(protocol, typ uint8) bool {
	return (protocol == unix.RTPROT_STATIC || protocol == unix.RTPROT_BOOT) && typ == unix.RTN_UNICAST
}

// staticRoutes is StaticRoutes for the interfaces of devs (name by index),
// by name: one dump of ns's routes for one interface or many.
func staticRoutes(ns *Netns, devs map[int]string) (map[string][]Route, error) {
	filter, mask := &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, uint64(netlink.RT_FILTER_TABLE)
	if len(devs) == 1 {
		for index := range devs {
			filter.LinkIndex, mask = index, mask|netlink.RT_FILTER_OIF
		}
	}
	nrs, err := retryDump(ns, func() ([]netlink.Route, error) {
		return ns.h.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
	})
	if err != nil {
		return nil, fmt.Errorf("list routes in netns %s: %w", ns.path, err)
	}
	out := map[string][]Route{}
	for _, nr := range nrs {
		dev, ok := devs[nr.LinkIndex]
		if !ok || !isStatic(uint8(nr.Protocol), uint8(nr.Type)) {
			continue
		}
		dst, ok := prefixOf(nr.Dst)
		if !ok {
			continue
		}
		r := Route{Dst: dst, Dev: dev, Metric: nr.Priority, Table: nr.Table}
		if gw, ok := netip.AddrFromSlice(nr.Gw); ok {
			r.Gw = gw.Unmap()
		}
		out[dev] = append(out[dev], r)
	}
	return out, nil
}
