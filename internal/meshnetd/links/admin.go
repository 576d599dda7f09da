package links

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Saved is what the kernel forgets when an interface goes administratively
// down: every IPv4 and IPv6 route through it, and its IPv6 addresses (with
// the default net.ipv6.conf.*.keep_addr_on_down=0). IPv4 addresses stay.
type Saved struct {
	Routes []Route        // static routes (see StaticRoutes)
	Addrs  []netip.Prefix // global IPv6 addresses
}

// AdminResult is what SetAdminDown or SetAdminUp did with each interface
// it was given.
type AdminResult struct {
	// Saved is, for SetAdminDown, what the kernel flushed from each
	// interface it took down, for SetAdminUp.
	Saved map[string]Saved
	// Failed is why an interface was not changed (or, for SetAdminUp, not
	// fully restored).
	Failed map[string]error
}

// Err joins the failures, ordered by interface; nil when none failed.
func (r AdminResult) Err() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(r.Failed)) {
		errs = append(errs, r.Failed[name])
	}
	return errors.Join(errs...)
}

func (r *AdminResult) fail(name string, err error) {
	if r.Failed == nil {
		r.Failed = map[string]error{}
	}
	r.Failed[name] = err
}

// SetAdminDown takes the named interfaces in ns down, as pulling a cable
// would (a veth's peer loses carrier too; a vxlan's remote end does not,
// its node must take it down), and saves for each what the kernel flushes,
// for SetAdminUp. The routes and addresses of all of them are read in one
// dump each, so that taking N interfaces down costs O(N), not O(N²).
// known is ns as read earlier under the same lock (ReadAll), or nil: the
// indexes it holds spare a lookup per interface.
func SetAdminDown(ns *Netns, known map[string]Interface, names ...string) AdminResult {
	r := AdminResult{Saved: map[string]Saved{}}
	byIndex := map[int]string{}
	found := map[string]netlink.Link{}
	for _, name := range names {
		l, err := ns.linkRef(known, name)
		switch {
		case err != nil:
			r.fail(name, fmt.Errorf("set down: %w", err))
		case l == nil:
			r.fail(name, fmt.Errorf("set down: no interface %s in netns %s", name, ns.path))
		default:
			found[name], byIndex[l.Attrs().Index] = l, name
		}
	}
	if len(found) == 0 {
		return r
	}
	routes, err := staticRoutes(ns, byIndex)
	if err == nil {
		var addrs []netlink.Addr
		addrs, err = retryDump(ns, func() ([]netlink.Addr, error) { return ns.h.AddrList(nil, netlink.FAMILY_V6) })
		for _, a := range addrs {
			if name, ok := byIndex[a.LinkIndex]; ok {
				if p, ok := prefixOf(a.IPNet); ok && a.Scope == unix.RT_SCOPE_UNIVERSE {
					sv := r.Saved[name]
					sv.Addrs = append(sv.Addrs, p)
					r.Saved[name] = sv
				}
			}
		}
		if err != nil {
			err = fmt.Errorf("list addresses in netns %s: %w", ns.path, err)
		}
	}
	for name, l := range found {
		if err != nil {
			r.fail(name, fmt.Errorf("set %s down: %w", name, err))
			continue
		}
		if err := ns.h.LinkSetDown(l); err != nil {
			r.fail(name, fmt.Errorf("set %s down in netns %s: %w", name, ns.path, err))
			delete(r.Saved, name)
			continue
		}
		sv := r.Saved[name]
		sv.Routes = routes[name]
		r.Saved[name] = sv
	}
	for name := range r.Failed {
		delete(r.Saved, name)
	}
	return r
}

// SetAdminUp brings each interface of saved up in ns and restores what
// SetAdminDown saved of it (the zero Saved restores nothing). It waits for
// the kernel to act on the carrier of all of them at once, not one by one:
// the kernel's link watch runs at most once a second for some kinds.
// known is as for SetAdminDown.
func SetAdminUp(ns *Netns, known map[string]Interface, saved map[string]Saved) AdminResult {
	var r AdminResult
	up := map[string]netlink.Link{}
	for name := range saved {
		l, err := ns.linkRef(known, name)
		switch {
		case err != nil:
			r.fail(name, fmt.Errorf("set up: %w", err))
		case l == nil:
			r.fail(name, fmt.Errorf("set up: no interface %s in netns %s", name, ns.path))
		default:
			if err := ns.h.LinkSetUp(l); err != nil {
				r.fail(name, fmt.Errorf("set %s up in netns %s: %w", name, ns.path, err))
				continue
			}
			up[name] = l
		}
	}
	for name, err := range settleAll(ns, slices.Collect(maps.Keys(up))) {
		r.fail(name, fmt.Errorf("set up: %w", err))
		delete(up, name)
	}
	for name, l := range up {
		s := saved[name]
		for _, p := range s.Addrs {
			if err := ns.h.AddrReplace(l, nlAddr(p)); err != nil {
				r.fail(name, fmt.Errorf("set up: restore address %v on %s in netns %s: %w", p, name, ns.path, err))
				break
			}
		}
		for _, rt := range s.Routes {
			if err := ReplaceRoute(ns, rt); err != nil {
				r.fail(name, fmt.Errorf("set up: restore: %w", err))
				break
			}
		}
	}
	return r
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
func settle(ns *Netns, name string) error { return settleAll(ns, []string{name})[name] }

// settleAll is settle for many interfaces, with one read of ns per poll:
// it returns the interfaces still pending at the deadline, or whose read
// failed.
func settleAll(ns *Netns, names []string) map[string]error {
	failed := map[string]error{}
	if len(names) == 0 {
		return failed
	}
	deadline := time.Now().Add(settleTimeout)
	pending := slices.Clone(names)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		attrs, err := linkAttrs(ns, pending)
		if err != nil {
			for _, name := range pending {
				failed[name] = err
			}
			return failed
		}
		pending = slices.DeleteFunc(pending, func(name string) bool {
			a, ok := attrs[name]
			return !ok || !(a.RawFlags&unix.IFF_LOWER_UP != 0 &&
				(a.OperState == netlink.OperDown || a.OperState == netlink.OperLowerLayerDown))
		})
		if len(pending) == 0 {
			return failed
		}
		if time.Now().After(deadline) {
			for _, name := range pending {
				failed[name] = fmt.Errorf("%s in netns %s has carrier but is still oper %s after %v", name, ns.path, attrs[name].OperState, settleTimeout)
			}
			return failed
		}
		time.Sleep(pause)
	}
}

// linkAttrs reads the named interfaces of ns: one request each when they
// are few, one dump when they are many. An interface gone is left out.
func linkAttrs(ns *Netns, names []string) (map[string]*netlink.LinkAttrs, error) {
	out := make(map[string]*netlink.LinkAttrs, len(names))
	if len(names) <= 8 {
		for _, name := range names {
			l, err := ns.linkByName(name)
			if err != nil {
				return nil, err
			}
			if l != nil {
				out[name] = l.Attrs()
			}
		}
		return out, nil
	}
	all, err := retryDump(ns, ns.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links in netns %s: %w", ns.path, err)
	}
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	for _, l := range all {
		if want[l.Attrs().Name] {
			out[l.Attrs().Name] = l.Attrs()
		}
	}
	return out, nil
}
