package links

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// ErrVNIInUse is returned when the node already has a vxlan device with the
// same VNI and UDP port. The kernel keeps one such device per (node netns,
// port, VNI) whatever the remote, counting devices moved into pods: see
// ListVXLANs to name the other user.
var ErrVNIInUse = errors.New("vni already in use on this node")

// VXLAN is a pod's end of a link carried over the node network to a peer
// node (or an external VTEP, e.g. a physical device).
type VXLAN struct {
	// Node is the node's netns. The device is made there, so its UDP socket
	// and underlay stay in the node, and then lives in End's pod.
	Node *Netns
	End  End
	VNI  uint32
	// Local is the node IP the tunnel is sourced from. Zero: the source
	// address the node's routing picks towards Remote.
	Local netip.Addr
	// Remote is the peer node's IP, or an external VTEP's.
	Remote netip.Addr
	// Port is the UDP port; 0 means v1beta1.DefaultVXLANPort.
	Port uint16
	// SrcPort pins the UDP source port of the end's datagrams, whatever
	// VNI or destination a pod with NET_ADMIN gives them (the kernel keeps
	// a device's source port range, and refuses to change it): the far
	// end's node tells this end's datagrams by it. 0 leaves the kernel's
	// range. At most 65534.
	SrcPort uint16
}

// DstPort is the UDP port the end sends to: Port, or
// v1beta1.DefaultVXLANPort when it is 0.
func (x VXLAN) DstPort() uint16 {
	if x.Port == 0 {
		return v1beta1.DefaultVXLANPort
	}
	return x.Port
}

func (x VXLAN) String() string {
	return fmt.Sprintf("vxlan %s vni %d to %s", x.End, x.VNI, x.Remote)
}

// VXLANOverhead is the encapsulation cost of VXLAN: outer Ethernet (14),
// outer IP (20 or 40), UDP (8) and VXLAN (8) headers.
func VXLANOverhead(ipv6Underlay bool) int {
	if ipv6Underlay {
		return 70
	}
	return 50
}

// minMTU is the smallest MTU the kernel accepts on an Ethernet device
// (ETH_MIN_MTU), and IPv4's minimum.
const minMTU = 68

// VXLANMTU returns the MTU of a vxlan device over a parent of parentMTU: the
// largest that fits when requested is 0, else requested if it fits.
func VXLANMTU(requested, parentMTU int, ipv6Underlay bool) (int, error) {
	limit := parentMTU - VXLANOverhead(ipv6Underlay)
	if limit < minMTU {
		return 0, fmt.Errorf("parent mtu %d leaves %d for vxlan, below the minimum %d", parentMTU, limit, minMTU)
	}
	switch {
	case requested == 0:
		return limit, nil
	case requested < minMTU:
		return 0, fmt.Errorf("mtu %d below the minimum %d", requested, minMTU)
	case requested > limit:
		return 0, fmt.Errorf("mtu %d exceeds parent mtu %d minus vxlan overhead %d (max %d)",
			requested, parentMTU, VXLANOverhead(ipv6Underlay), limit)
	}
	return requested, nil
}

// EnsureVXLAN makes the pod's vxlan end x, or brings an existing one to x's
// settings. The underlay (parent) device is the one this node routes Remote
// through, never a name given by the caller: nodes' NICs differ. Learning is
// off: the remote is fixed. An interface with End's name that differs in
// kind, VNI, port, local, remote, parent or node is replaced.
func EnsureVXLAN(x VXLAN) (Result, error) {
	res, err := ensureVXLAN(x)
	if err != nil {
		return 0, fmt.Errorf("ensure %s: %w", x, err)
	}
	return res, nil
}

func ensureVXLAN(x VXLAN) (Result, error) {
	if err := x.End.validate(); err != nil {
		return 0, err
	}
	if x.Node == nil {
		return 0, errors.New("no node netns")
	}
	if x.VNI == 0 || x.VNI > v1beta1.MaxVNI {
		return 0, fmt.Errorf("vni %d outside 1..%d", x.VNI, v1beta1.MaxVNI)
	}
	if !x.Remote.IsValid() {
		return 0, errors.New("no remote vtep")
	}
	if x.SrcPort == 65535 {
		return 0, errors.New("source port 65535 leaves no range (at most 65534)")
	}
	x.Remote = x.Remote.Unmap()
	x.Port = x.DstPort()
	parent, local, err := x.Node.underlays.find(x.Node, x.Local.Unmap(), x.Remote)
	if err != nil {
		return 0, err
	}
	x.Local = local
	mtu, err := VXLANMTU(x.End.MTU, parent.Attrs().MTU, x.Remote.Is6())
	if err != nil {
		return 0, fmt.Errorf("underlay %s: %w", parent.Attrs().Name, err)
	}
	x.End.MTU = mtu

	cur, err := x.End.NS.linkByName(x.End.Name)
	if err != nil {
		return 0, err
	}
	if cur != nil {
		ok, err := x.matches(cur, parent)
		if err != nil {
			return 0, err
		}
		if ok {
			changed, err := x.End.configure(cur)
			if err != nil || !changed {
				return Unchanged, err
			}
			return Updated, nil
		}
		if err := Delete(x.End.NS, x.End.Name); err != nil {
			return 0, err
		}
	}
	la := netlink.NewLinkAttrs()
	la.Name = x.End.Name
	la.MTU = mtu
	// Made through the node's socket but directly inside the pod: the
	// kernel binds the device's underlay to the requesting socket's netns.
	la.Namespace = netlink.NsFd(int(x.End.NS.fd))
	dev := &netlink.Vxlan{
		LinkAttrs:    la,
		VxlanId:      int(x.VNI),
		VtepDevIndex: parent.Attrs().Index,
		SrcAddr:      x.Local.AsSlice(),
		Group:        x.Remote.AsSlice(),
		Port:         int(x.Port),
		Learning:     false,
	}
	dev.PortLow, dev.PortHigh = x.srcPortRange()
	if err := x.Node.h.LinkAdd(dev); err != nil {
		if errors.Is(err, unix.EEXIST) {
			// The name was free a moment ago, so the kernel's other
			// uniqueness rule refused it.
			return 0, fmt.Errorf("%w (vni %d port %d in node netns %s)", ErrVNIInUse, x.VNI, x.Port, x.Node.path)
		}
		return 0, fmt.Errorf("create in node netns %s: %w", x.Node.path, err)
	}
	return x.End.finish(cur != nil)
}

// underlayTTL is how long the underlay found towards a remote VTEP is
// used again: a 10,000-link ADD looked it up once a link, 12% of its time
// (profiled); a route change reaches the links made a second later.
const underlayTTL = time.Second

// underlayCache holds a node's underlays found in the last underlayTTL, by
// local and remote VTEP.
type underlayCache struct {
	mu sync.Mutex
	m  map[[2]netip.Addr]foundUnderlay
}

type foundUnderlay struct {
	parent netlink.Link
	local  netip.Addr
	at     time.Time
}

// find is underlay's answer, found again once underlayTTL has passed.
func (c *underlayCache) find(node *Netns, local, remote netip.Addr) (netlink.Link, netip.Addr, error) {
	k := [2]netip.Addr{local, remote}
	c.mu.Lock()
	f, ok := c.m[k]
	c.mu.Unlock()
	if ok && time.Since(f.at) < underlayTTL {
		return f.parent, f.local, nil
	}
	parent, found, err := underlay(node, local, remote)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[2]netip.Addr]foundUnderlay{}
	}
	maps.DeleteFunc(c.m, func(_ [2]netip.Addr, f foundUnderlay) bool { return time.Since(f.at) >= underlayTTL })
	c.m[k] = foundUnderlay{parent: parent, local: found, at: time.Now()}
	return parent, found, nil
}

// underlay picks the node's device towards remote and checks local is one of
// the node's addresses (or picks it when zero).
func underlay(node *Netns, local, remote netip.Addr) (netlink.Link, netip.Addr, error) {
	routes, err := node.h.RouteGet(remote.AsSlice())
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("route to remote vtep %s in node netns %s: %w", remote, node.path, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return nil, netip.Addr{}, fmt.Errorf("no route to remote vtep %s in node netns %s", remote, node.path)
	}
	parent, err := node.h.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("underlay device %d in node netns %s: %w", routes[0].LinkIndex, node.path, err)
	}
	if parent.Attrs().Flags&net.FlagLoopback != 0 {
		return nil, netip.Addr{}, fmt.Errorf("remote vtep %s is an address of this node (netns %s)", remote, node.path)
	}
	if !local.IsValid() {
		src, ok := netip.AddrFromSlice(routes[0].Src)
		if !ok {
			return nil, netip.Addr{}, fmt.Errorf("no source address towards %s in node netns %s", remote, node.path)
		}
		return parent, src.Unmap(), nil
	}
	if local.Is4() != remote.Is4() {
		return nil, netip.Addr{}, fmt.Errorf("local vtep %s and remote vtep %s differ in family", local, remote)
	}
	addrs, err := retryDump(node, func() ([]netlink.Addr, error) { return node.h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("list addresses in node netns %s: %w", node.path, err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && p.Addr() == local {
			return parent, local, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("local vtep %s is not an address in node netns %s", local, node.path)
}

// matches reports whether l is the vxlan device x describes over parent.
func (x VXLAN) matches(l netlink.Link, parent netlink.Link) (bool, error) {
	v, ok := l.(*netlink.Vxlan)
	if !ok {
		return false, nil
	}
	low, high := x.srcPortRange()
	if uint32(v.VxlanId) != x.VNI || v.Port != int(x.Port) || v.Learning || v.PortLow != low || v.PortHigh != high ||
		v.VtepDevIndex != parent.Attrs().Index ||
		!v.Group.Equal(x.Remote.AsSlice()) || !v.SrcAddr.Equal(x.Local.AsSlice()) {
		return false, nil
	}
	return x.End.NS.holdsLinkNet(l, x.Node)
}

// srcPortRange is the device's source port range: [SrcPort, SrcPort+1),
// which the kernel maps every flow to SrcPort with (a range of one port,
// low equal to high, means its default range instead).
func (x VXLAN) srcPortRange() (low, high int) {
	if x.SrcPort == 0 {
		return 0, 0
	}
	return int(x.SrcPort), int(x.SrcPort) + 1
}

// VXLANDevice is a vxlan device found by ListVXLANs.
type VXLANDevice struct {
	Netns  string // path of the namespace the device lives in
	Name   string
	VNI    uint32
	Port   uint16
	Remote netip.Addr
}

// VXLANOf is the vxlan device named name in pod whose underlay is node;
// false when pod has no such interface, or it is not a vxlan of node's. It
// reads that one interface: a far end removed by name costs no dump of the
// pod's n links (a 1,024-link pod's peer, asked for every far end, made n
// dumps of n links, 32 at a time).
func VXLANOf(node, pod *Netns, name string) (VXLANDevice, bool, error) {
	l, err := pod.linkByName(name)
	if err != nil || l == nil {
		return VXLANDevice{}, false, err
	}
	v, ok := l.(*netlink.Vxlan)
	if !ok {
		return VXLANDevice{}, false, nil
	}
	if mine, err := pod.holdsLinkNet(l, node); err != nil || !mine {
		return VXLANDevice{}, false, err
	}
	remote, _ := netip.AddrFromSlice(v.Group)
	return VXLANDevice{Netns: pod.path, Name: v.Name, VNI: uint32(v.VxlanId), Port: uint16(v.Port), Remote: remote.Unmap()}, true, nil
}

// ListVXLANs lists the vxlan devices whose underlay is node: the ones in node
// itself and the ones in the given pod namespaces. A device moved into a pod
// no longer shows in the node's link list, yet the kernel still counts it
// against the node's VNIs, so the caller passes every pod netns it manages;
// devices of other nodes' namespaces (possible in tests) are left out.
func ListVXLANs(node *Netns, pods ...*Netns) ([]VXLANDevice, error) {
	var out []VXLANDevice
	for _, ns := range append([]*Netns{node}, pods...) {
		ls, err := retryDump(ns, ns.h.LinkList)
		if err != nil {
			return nil, fmt.Errorf("list links in netns %s: %w", ns.path, err)
		}
		for _, l := range ls {
			v, ok := l.(*netlink.Vxlan)
			if !ok {
				continue
			}
			mine, err := ns.holdsLinkNet(l, node)
			if err != nil {
				return nil, err
			}
			if !mine {
				continue
			}
			remote, _ := netip.AddrFromSlice(v.Group)
			out = append(out, VXLANDevice{Netns: ns.path, Name: v.Name, VNI: uint32(v.VxlanId), Port: uint16(v.Port), Remote: remote.Unmap()})
		}
	}
	return out, nil
}
