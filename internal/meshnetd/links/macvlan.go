package links

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
)

// Macvlan is a pod's end of a link to a NIC of the node (meshnet's peer_pod
// "localhost", peer_intf naming the NIC), in bridge mode so that several pods
// on one NIC also reach each other.
type Macvlan struct {
	Node   *Netns // the node's netns, which holds Parent
	Parent string // the node's NIC
	// Trusted are NICs a cluster admin allows as parents whatever their
	// kind (meshnetd's --macvlan-parents), such as a kind node's eth0, a
	// veth. Any other parent must be a NIC of the node's own (CheckParent).
	Trusted []string
	End     End
}

// CheckParent refuses a macvlan parent that is not a NIC of the node's
// own, unless trusted names it: a veth (a pod's host end, or a cable to
// another namespace), a bridge (a pod network's), or a port of a bridge or
// bond. A macvlan there would put a pod on another pod's or the pod
// network's wire, past NetworkPolicy.
func CheckParent(parent netlink.Link, trusted []string) error {
	a := parent.Attrs()
	if slices.Contains(trusted, a.Name) {
		return nil
	}
	var what string
	switch {
	case parent.Type() == "veth":
		what = "a veth (a pod's end or a cable to another namespace)"
	case parent.Type() == "bridge":
		what = "a bridge (a pod network's)"
	case a.MasterIndex != 0:
		what = "a port of a bridge or bond"
	default:
		return nil
	}
	return &ParentError{Parent: a.Name, What: what}
}

// ErrUntrustedParent matches a ParentError (errors.Is): the node refuses
// what a Topology asks, which no retry mends.
var ErrUntrustedParent = errors.New("macvlan parent is not a NIC of the node")

// ParentError is CheckParent's refusal of a macvlan parent.
type ParentError struct {
	Parent string
	What   string // "a veth (...)", "a bridge (...)", ...
}

func (e *ParentError) Error() string {
	return fmt.Sprintf("parent %s is %s, not a NIC of the node: meshnetd takes it only when its --macvlan-parents names it", e.Parent, e.What)
}

// Is makes errors.Is(err, ErrUntrustedParent) true.
func (e *ParentError) Is(target error) bool { return target == ErrUntrustedParent }

func (m Macvlan) String() string { return fmt.Sprintf("macvlan %s on %s", m.End, m.Parent) }

// EnsureMacvlan makes the pod's macvlan end m, or brings an existing one to
// m's settings; an interface with End's name that is not a bridge-mode
// macvlan on Parent is replaced.
func EnsureMacvlan(m Macvlan) (Result, error) {
	res, err := ensureMacvlan(m)
	if err != nil {
		return 0, fmt.Errorf("ensure %s: %w", m, err)
	}
	return res, nil
}

func ensureMacvlan(m Macvlan) (Result, error) {
	if err := m.End.validate(); err != nil {
		return 0, err
	}
	if m.Node == nil {
		return 0, errors.New("no node netns")
	}
	parent, err := m.Node.linkByName(m.Parent)
	if err != nil {
		return 0, err
	}
	if parent == nil {
		return 0, fmt.Errorf("no interface %s in node netns %s", m.Parent, m.Node.path)
	}
	if err := CheckParent(parent, m.Trusted); err != nil {
		return 0, err
	}
	if m.End.MTU > parent.Attrs().MTU {
		return 0, fmt.Errorf("mtu %d exceeds parent %s mtu %d", m.End.MTU, m.Parent, parent.Attrs().MTU)
	}
	cur, err := m.End.NS.linkByName(m.End.Name)
	if err != nil {
		return 0, err
	}
	if cur != nil {
		ok, err := m.matches(cur, parent)
		if err != nil {
			return 0, err
		}
		if ok {
			changed, err := m.End.configure(cur)
			if err != nil || !changed {
				return Unchanged, err
			}
			return Updated, nil
		}
		if err := Delete(m.End.NS, m.End.Name); err != nil {
			return 0, err
		}
	}
	la := netlink.NewLinkAttrs()
	la.Name = m.End.Name
	la.MTU = m.End.MTU
	la.ParentIndex = parent.Attrs().Index
	la.Namespace = netlink.NsFd(int(m.End.NS.fd))
	dev := &netlink.Macvlan{LinkAttrs: la, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := m.Node.h.LinkAdd(dev); err != nil {
		return 0, fmt.Errorf("create in node netns %s: %w", m.Node.path, err)
	}
	return m.End.finish(cur != nil)
}

func (m Macvlan) matches(l netlink.Link, parent netlink.Link) (bool, error) {
	v, ok := l.(*netlink.Macvlan)
	if !ok || v.Mode != netlink.MACVLAN_MODE_BRIDGE || v.ParentIndex != parent.Attrs().Index {
		return false, nil
	}
	return m.End.NS.holdsLinkNet(l, m.Node)
}
