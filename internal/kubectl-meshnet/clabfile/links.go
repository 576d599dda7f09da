package clabfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/topofile"
)

// Link types of containerlab that have no counterpart in meshnet, each with
// why. veth, macvlan, vxlan and vxlan-stitch are mapped.
var refusedLinkTypes = map[string]string{
	"host":        "a veth whose other end is in the containerlab host's own network namespace; a pod's link ends in another pod, or is a macvlan on the node's NIC (type macvlan)",
	"mgmt-net":    "a veth to containerlab's management bridge; a pod's eth0 is on the cluster network, and there is no management bridge",
	"veth-stitch": "two veths stitched in the containerlab host; meshnet links two pods directly (type veth)",
	"dummy":       "a dummy interface without a peer; meshnet's links have two ends",
}

// Keys of a links entry by type (containerlab's LinkCommonParams and each
// type's own), and of an extended endpoint.
var (
	commonLinkKeys = []string{"ipv4", "ipv6", "labels", "mtu", "vars"}
	linkKeys       = map[string][]string{
		"":        append([]string{"endpoints"}, commonLinkKeys...),
		"veth":    append([]string{"endpoints", "type"}, commonLinkKeys...),
		"macvlan": append([]string{"endpoint", "host-interface", "mode", "type"}, commonLinkKeys...),
		// A VXLAN to a remote VTEP: made in the node's namespace and moved
		// into the pod (vxlan), or stitched to a veth into it in the host
		// (vxlan-stitch); the pod sees the same interface either way.
		"vxlan":        append([]string{"endpoint", "remote", "type", "udp-port", "vni"}, commonLinkKeys...),
		"vxlan-stitch": append([]string{"endpoint", "remote", "type", "udp-port", "vni"}, commonLinkKeys...),
	}
	endpointKeys = []string{"interface", "ipv4", "ipv6", "mac", "node", "vars"}
)

// Why a link's settings that change nothing here are ignored.
const (
	linkAddrReason   = "containerlab sets link addresses on kinds srl, ceos, vyos and iol only; kind linux leaves the interface without one, and so does meshnet: set addresses with exec or in the node's configuration"
	linkVarsReason   = "link variables feed other kinds' configuration templates; kind linux has none"
	linkLabelsReason = "link labels are containerlab's metadata (its graph and exports); they change nothing on the link"
	macvlanMTUReason = "a macvlan takes its parent NIC's MTU, as containerlab makes it"
)

// linkPlaces are where the file writes each link and its ends, so that
// topofile's checks name them as the file does.
type linkPlaces map[[2]int]string

func (linkPlaces) Link(uid int) string { return fmt.Sprintf("topology.links[%d]", uid) }

func (lp linkPlaces) Endpoint(uid, end int) string {
	if at, ok := lp[[2]int{uid, end}]; ok {
		return at
	}
	return fmt.Sprintf("topology.links[%d].endpoints[%d]", uid, end)
}

// links parses topology.links, brief and extended, and checks them by
// topofile's rules; a link's uid is its index, as topofile numbers a k8s-topo
// file's.
func (p *parser) links(raw json.RawMessage) {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		p.errorf("topology.links: want a list of links")
		return
	}
	places := linkPlaces{}
	var ls []topofile.Link
	for i, e := range entries {
		if l, ok := p.link(i, e, places); ok {
			ls = append(ls, l)
		}
	}
	f, err := topofile.NewFile(ls, places)
	if err != nil {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			p.errs = append(p.errs, joined.Unwrap()...)
		} else {
			p.errs = append(p.errs, err)
		}
		return
	}
	p.lab.links = f
	byName := map[string]*node{}
	for _, n := range p.lab.nodes {
		byName[n.pod] = n
	}
	for i, l := range f.Links {
		for j, e := range l.Endpoints {
			if !l.IsPod(j) {
				continue
			}
			byName[e.Name].intfs = append(byName[e.Name].intfs, e.Intf)
			if byName[e.Name].bridge && l.MTU == nil {
				f.Links[i].MTU = new(int32(SegmentMTU))
			}
		}
	}
}

// link parses links entry uid; ok is false when it cannot become a link.
func (p *parser) link(uid int, raw json.RawMessage, places linkPlaces) (l topofile.Link, ok bool) {
	at := places.Link(uid)
	l.UID = uid
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		p.errorf("%s: want a mapping with endpoints", at)
		return l, false
	}
	typ := ""
	if r, ok := m["type"]; ok {
		t, ok := p.scalar(at+".type", r)
		if !ok {
			return l, false
		}
		typ = strings.ToLower(strings.TrimSpace(t))
	}
	if reason, refused := refusedLinkTypes[typ]; refused {
		p.errorf("%s.type: %q: not supported: %s", at, typ, reason)
		return l, false
	}
	keys, known := linkKeys[typ]
	if !known {
		p.errorf("%s.type: %q: unknown link type (want veth, macvlan, vxlan or vxlan-stitch; host, mgmt-net, veth-stitch and dummy are not supported)", at, typ)
		return l, false
	}
	n := len(p.errs)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(keys, k) {
			p.errorf("%s.%s: unknown key (want %s)", at, k, strings.Join(keys, ", "))
		}
	}
	macvlan := p.linkEnds(at, uid, typ, m, &l, places)
	p.linkCommon(at, m, &l, macvlan)
	for i, e := range l.Endpoints {
		if p.badNames[e.Name] {
			// A node whose name cannot be a pod's is refused at the
			// node; its links are left out rather than refused again.
			return l, false
		}
		if l.IsPod(i) {
			// From here on a link names its ends' pods.
			l.Endpoints[i].Name = PodName(e.Name)
		}
	}
	return l, len(p.errs) == n
}

// linkEnds parses a link's ends into l, by the link's form; macvlan tells
// whether one end is the node's NIC.
func (p *parser) linkEnds(at string, uid int, typ string, m map[string]json.RawMessage, l *topofile.Link, places linkPlaces) (macvlan bool) {
	switch typ {
	case "":
		var eps []string
		if err := json.Unmarshal(m["endpoints"], &eps); err != nil || len(eps) != 2 {
			p.errorf("%s.endpoints: want two ends like [\"r1:eth1\", \"r2:eth1\"]", at)
			return false
		}
		for i, s := range eps {
			var mv bool
			l.Endpoints[i], mv = p.briefEnd(places.Endpoint(uid, i), s)
			macvlan = macvlan || mv
		}
	case "veth":
		var eps []json.RawMessage
		if err := json.Unmarshal(m["endpoints"], &eps); err != nil || len(eps) != 2 {
			p.errorf("%s.endpoints: want two ends like {node: r1, interface: eth1}", at)
			return false
		}
		for i, r := range eps {
			l.Endpoints[i] = p.extendedEnd(places.Endpoint(uid, i), r)
		}
	case "macvlan":
		places[[2]int{uid, 0}] = at + ".endpoint"
		places[[2]int{uid, 1}] = at + ".host-interface"
		l.Endpoints[0] = p.extendedEnd(at+".endpoint", m["endpoint"])
		nic, _ := p.scalar(at+".host-interface", m["host-interface"])
		if nic == "" {
			p.errorf("%s.host-interface: missing: the node's NIC the macvlan is on", at)
		}
		l.Endpoints[1] = topofile.Endpoint{Name: topofile.Localhost, Intf: nic}
		if r, ok := m["mode"]; ok {
			if mode, _ := p.scalar(at+".mode", r); mode != "" && mode != "bridge" {
				p.errorf("%s.mode: %q: not supported: meshnet makes its macvlans in bridge mode (containerlab's default)", at, mode)
			}
		}
		macvlan = true
	case "vxlan", "vxlan-stitch":
		p.vxlanEnds(at, uid, m, l, places)
	}
	return macvlan
}

// vxlanEnds parses a VXLAN to a remote VTEP into a link to a physical
// device (LinkOptions), named by the VTEP's address, its interface by the
// VNI ("vni100"). The namespace needs a cluster admin's consent to the
// VTEP and port, as any physical peer does (admission says so).
func (p *parser) vxlanEnds(at string, uid int, m map[string]json.RawMessage, l *topofile.Link, places linkPlaces) {
	places[[2]int{uid, 0}] = at + ".endpoint"
	places[[2]int{uid, 1}] = at + ".remote"
	l.Endpoints[0] = p.extendedEnd(at+".endpoint", m["endpoint"])
	remote, _ := p.scalar(at+".remote", m["remote"])
	if remote == "" {
		p.errorf("%s.remote: missing: the remote VTEP's address", at)
		return
	}
	o := &v1beta1.LinkOptions{RemoteVTEP: remote}
	if err := json.Unmarshal(m["vni"], &o.VNI); err != nil || m["vni"] == nil {
		p.errorf("%s.vni: want the VXLAN network identifier, a whole number", at)
		return
	}
	if r, ok := m["udp-port"]; ok {
		var port int32
		if err := json.Unmarshal(r, &port); err != nil {
			p.errorf("%s.udp-port: want a whole number", at)
			return
		}
		if port != 0 {
			o.UDPPort = &port
		}
	}
	l.LinkOptions = o
	l.Endpoints[1] = topofile.Endpoint{Name: remote, Intf: fmt.Sprintf("vni%d", o.VNI)}
}

// briefEnd parses "node:interface"; a node part macvlan makes the end the
// node's NIC (macvlan is true), host and mgmt-net are refused as link
// types.
func (p *parser) briefEnd(at, s string) (e topofile.Endpoint, macvlan bool) {
	name, intf, ok := strings.Cut(s, ":")
	if !ok {
		p.errorf("%s: %q: want node:interface", at, s)
		return e, false
	}
	switch t := strings.ToLower(strings.TrimSpace(name)); t {
	case "macvlan":
		return topofile.Endpoint{Name: topofile.Localhost, Intf: intf}, true
	case "host", "mgmt-net":
		p.errorf("%s: %q: not supported: a %s link is %s", at, s, t, refusedLinkTypes[t])
		return e, false
	}
	e = topofile.Endpoint{Name: name, Intf: intf}
	p.checkNode(at, e)
	return e, false
}

// extendedEnd parses {node, interface} of an extended link.
func (p *parser) extendedEnd(at string, raw json.RawMessage) topofile.Endpoint {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		p.errorf("%s: want a mapping with node and interface", at)
		return topofile.Endpoint{}
	}
	var e topofile.Endpoint
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "node":
			e.Name, _ = p.scalar(at+".node", m[k])
		case "interface":
			e.Intf, _ = p.scalar(at+".interface", m[k])
		case "mac":
			p.errorf("%s.mac: not supported: meshnet leaves an interface's MAC address to the kernel; a Topology has none", at)
		case "ipv4", "ipv6":
			p.ignore(at+"."+k, linkAddrReason)
		case "vars":
			p.ignore(at+"."+k, linkVarsReason)
		default:
			p.errorf("%s.%s: unknown key (want %s)", at, k, strings.Join(endpointKeys, ", "))
		}
	}
	if e.Name == "" {
		p.errorf("%s.node: missing", at)
		return e
	}
	p.checkNode(at, e)
	return e
}

// checkNode checks that an end names a node of the file.
func (p *parser) checkNode(at string, e topofile.Endpoint) {
	if _, ok := p.nodes[e.Name]; !ok {
		p.errorf("%s: %q: no node %s in topology.nodes", at, e, e.Name)
	}
}

// linkCommon parses a link's mtu, labels, vars and addresses into l.
func (p *parser) linkCommon(at string, m map[string]json.RawMessage, l *topofile.Link, macvlan bool) {
	if r, ok := m["mtu"]; ok {
		var mtu int32
		if err := json.Unmarshal(r, &mtu); err != nil {
			p.errorf("%s.mtu: want a whole number", at)
		} else if macvlan && mtu != 0 {
			p.ignore(at+".mtu", macvlanMTUReason)
		} else if mtu != 0 {
			l.MTU = &mtu
		}
	}
	for _, k := range []string{"ipv4", "ipv6"} {
		if _, ok := m[k]; ok {
			p.ignore(at+"."+k, linkAddrReason)
		}
	}
	if r, ok := m["vars"]; ok {
		p.vars(at+".vars", r, l)
	}
	if _, ok := m["labels"]; ok {
		p.ignore(at+".labels", linkLabelsReason)
	}
}
