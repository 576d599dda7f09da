// Package topofile reads k8s-topo's topology file format, with meshnet's
// extensions, and turns it into Topology objects: one per pod, named like the
// pod. It checks what the API server would refuse, and what would only fail
// once pods are wired, so that a bad file is rejected before anything is
// created.
//
// The format (examples/README.md has the full description):
//
//	links:
//	  - endpoints: ["r1:eth1:10.0.0.1/30", "r2:eth1:10.0.0.2/30"]
//	    mtu: 9000                # optional, both ends
//	    state: down              # optional, both ends
//	    netem: {delay: 10ms}     # optional, both ends (each direction)
//	  - endpoints: ["r2:eth2:10.0.1.1/30", "phy1:xe0:10.0.1.2/30"]
//	    link_options: {remote_vtep: 10.250.0.200, vni: 5001}  # second endpoint is a physical device
//	  - endpoints: ["r1:eth3", "localhost:ens4"]              # macvlan on the node's NIC ens4
//
// A link's uid is its index in links, as k8s-topo numbers them.
//
// Its link rules are meshnet's one source for a file's links: a converter
// of another format (internal/kubectl-meshnet/clabfile, containerlab's) checks the links it
// makes with NewFile, and converts them with Topologies.
package topofile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
)

// Localhost as an endpoint's name makes the endpoint the node's NIC: the pod
// at the other end gets a macvlan on it.
const Localhost = v1beta1.PeerHost

// ignoredKeys are k8s-topo's top-level settings for its own pod creation
// and etcd; meshnet does not use them, but a k8s-topo file may carry them.
var ignoredKeys = []string{"ceos_image", "conf_dir", "delay", "etcd_host", "etcd_port", "nsm", "publish_base"}

// linkKeys are the keys a links entry may have.
var linkKeys = []string{"endpoints", "link_options", "mtu", "netem", "state"}

// File is a parsed, checked topology file.
type File struct {
	// Links in file order; Links[i].UID == i.
	Links []Link
	// Ignored lists the k8s-topo settings the file has that meshnet does
	// not use, so that callers can say so.
	Ignored []string
}

// Link is one entry of links.
type Link struct {
	UID int
	// Endpoints are the two ends as written. With LinkOptions the second
	// is the physical device; an end named Localhost is the node's NIC.
	Endpoints [2]Endpoint
	MTU       *int32
	State     *v1beta1.LinkState
	Netem     *v1beta1.Netem
	// LinkOptions make Endpoints[1] a physical device reached over VXLAN.
	LinkOptions *v1beta1.LinkOptions
}

// Endpoint is "name:interface[:address/prefix]".
type Endpoint struct {
	Name string
	Intf string
	// IP is the interface's address in CIDR notation, empty when none.
	IP string
}

func (e Endpoint) String() string {
	if e.IP == "" {
		return e.Name + ":" + e.Intf
	}
	return e.Name + ":" + e.Intf + ":" + e.IP
}

// IsPod tells whether the endpoint is a pod of link l (not the node's NIC,
// not a physical device).
func (l Link) IsPod(i int) bool {
	return l.Endpoints[i].Name != Localhost && (l.LinkOptions == nil || i == 0)
}

// Places name where a file wrote a link and its ends, so that an error
// points at what the user wrote. Parse names them as k8s-topo's format
// does (links[3], links[3].endpoints[1]); a converter of another format,
// calling NewFile, names them in its own.
type Places interface {
	// Link is where link uid is written: "links[3]".
	Link(uid int) string
	// Endpoint is where end (0 or 1) of link uid is written:
	// "links[3].endpoints[1]".
	Endpoint(uid, end int) string
}

// filePlaces are the places of k8s-topo's format.
type filePlaces struct{}

func (filePlaces) Link(uid int) string { return fmt.Sprintf("links[%d]", uid) }

func (filePlaces) Endpoint(uid, end int) string {
	return fmt.Sprintf("links[%d].endpoints[%d]", uid, end)
}

// PhysicalPeer is a link to a physical device: what a lab needs to stand one
// in, or an operator to configure the real one.
type PhysicalPeer struct {
	UID int
	// Pod is the pod's end, Device the physical device's.
	Pod, Device Endpoint
	RemoteVTEP  netip.Addr
	VNI         int32
	// UDPPort is the VXLAN port, 4789 when the file does not set one.
	UDPPort int32
}

// Parse reads and checks a topology file. Every problem found is reported,
// each naming its place in the file, like
// `links[3].endpoints[1]: "r1:eth1:10.0.0.1/33": bad prefix length`.
func Parse(data []byte) (*File, error) {
	top, err := ReadTop(data, "topology file", "links")
	if err != nil {
		return nil, err
	}
	p := &parser{f: &File{}, places: filePlaces{}}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch {
		case k == "links":
			p.links(top[k])
		case slices.Contains(ignoredKeys, k):
			p.f.Ignored = append(p.f.Ignored, k)
		default:
			p.errorf("%s: unknown key (want links; k8s-topo's %s are ignored)", k, strings.Join(ignoredKeys, ", "))
		}
	}
	if _, ok := top["links"]; !ok {
		p.errorf("links: missing")
	}
	if len(p.errs) == 0 {
		p.checkAcrossLinks()
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.f, nil
}

// ReadTop reads a YAML file (strictly: no key twice) as a mapping of its
// top-level keys, still encoded, for a converter to check key by key. what
// names the file in errors ("topology file") and want the keys it must
// have ("links"): an empty file, or one that is not a mapping, says so.
func ReadTop(data []byte, what, want string) (map[string]json.RawMessage, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, fmt.Errorf("read %s: it is empty, want a mapping with %s", what, want)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("read %s: want a mapping with %s at the top", what, want)
	}
	return top, nil
}

// NewFile checks links that a converter of another topology format made,
// by the very rules Parse applies to a file's (ends, interface names,
// addresses, mtu, state, netem, link_options, and across links: an
// interface used twice, a pod's most links, VXLAN identifiers), and returns
// them as a File, so that they convert as a file's do. Every problem is
// reported, each at its place as places names it. Each link's UID must be
// distinct; links stay in the order given.
func NewFile(links []Link, places Places) (*File, error) {
	p := &parser{f: &File{Links: links}, places: places}
	uids := map[int]bool{}
	for _, l := range links {
		at := places.Link(l.UID)
		if l.UID < 0 || uids[l.UID] {
			p.errorf("%s: uid %d is negative or used twice", at, l.UID)
		}
		uids[l.UID] = true
		for i, e := range l.Endpoints {
			p.checkEndpoint(places.Endpoint(l.UID, i), e.String(), e)
		}
		if l.MTU != nil {
			p.checkMTU(at, *l.MTU)
		}
		if l.State != nil {
			p.checkState(at, *l.State)
		}
		if l.Netem != nil {
			p.checkNetem(at, l.Netem)
		}
		p.checkLink(l)
	}
	if len(p.errs) == 0 {
		p.checkAcrossLinks()
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.f, nil
}

type parser struct {
	f      *File
	places Places
	errs   []error
}

func (p *parser) errorf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *parser) links(raw json.RawMessage) {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		p.errorf("links: want a list of links")
		return
	}
	if len(entries) == 0 {
		p.errorf("links: empty")
		return
	}
	for i, e := range entries {
		if l, ok := p.link(i, e); ok {
			p.f.Links = append(p.f.Links, l)
		}
	}
}

// link parses one links entry, link uid; ok is false when it had errors.
func (p *parser) link(uid int, raw json.RawMessage) (l Link, ok bool) {
	n := len(p.errs)
	at := p.places.Link(uid)
	l.UID = uid
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		p.errorf("%s: want a mapping with endpoints", at)
		return l, false
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(linkKeys, k) {
			p.errorf("%s: unknown key %q (want %s)", at, k, strings.Join(linkKeys, ", "))
		}
	}
	optsOK := true
	if r, ok := m["link_options"]; ok {
		l.LinkOptions = &v1beta1.LinkOptions{}
		optsOK = p.decode(at+".link_options", r, l.LinkOptions)
	}
	epsOK := false
	var eps []string
	if r, ok := m["endpoints"]; !ok {
		p.errorf("%s.endpoints: missing", at)
	} else if err := json.Unmarshal(r, &eps); err != nil {
		p.errorf("%s.endpoints: want a list of two strings like \"r1:eth1:10.0.0.1/24\"", at)
	} else if len(eps) != 2 {
		p.errorf("%s.endpoints: got %d, want 2: links are point to point (a physical peer is the second endpoint)", at, len(eps))
	} else {
		for i, s := range eps {
			l.Endpoints[i] = p.endpoint(p.places.Endpoint(uid, i), s)
		}
		epsOK = true
	}
	if r, ok := m["mtu"]; ok {
		l.MTU = new(int32)
		if p.decode(at+".mtu", r, l.MTU) {
			p.checkMTU(at, *l.MTU)
		}
	}
	if r, ok := m["state"]; ok {
		l.State = new(v1beta1.LinkState)
		if p.decode(at+".state", r, l.State) {
			p.checkState(at, *l.State)
		}
	}
	if r, ok := m["netem"]; ok {
		l.Netem = &v1beta1.Netem{}
		if p.decode(at+".netem", r, l.Netem) {
			p.checkNetem(at, l.Netem)
		}
	}
	if epsOK && optsOK {
		p.checkLink(l)
	}
	return l, len(p.errs) == n
}

func (p *parser) checkMTU(at string, mtu int32) {
	if mtu < 68 || mtu > 65535 {
		p.errorf("%s.mtu: %d is outside 68..65535", at, mtu)
	}
}

func (p *parser) checkState(at string, s v1beta1.LinkState) {
	if s != v1beta1.LinkUp && s != v1beta1.LinkDown {
		p.errorf("%s.state: %q, want up or down", at, s)
	}
}

func (p *parser) checkNetem(at string, n *v1beta1.Netem) {
	_, err := netemconv.FromTopology(n)
	for _, fe := range netemconv.Fields(err) {
		p.errorf("%s.netem.%s: %s", at, fe.Field, fe.Reason)
	}
}

// decode decodes a JSON value strictly into v; false when it failed.
func (p *parser) decode(at string, raw json.RawMessage, v any) bool {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			p.errorf("%s.%s: got a %s, want a %s", at, te.Field, te.Value, jsonKind(te.Type.Kind().String()))
		case errors.As(err, &te):
			p.errorf("%s: got a %s, want a %s", at, te.Value, jsonKind(te.Type.Kind().String()))
		default:
			p.errorf("%s: %s", at, strings.TrimPrefix(err.Error(), "json: "))
		}
		return false
	}
	return true
}

func jsonKind(goKind string) string {
	switch {
	case goKind == "string":
		return "string (quote it)"
	case strings.HasPrefix(goKind, "int"):
		return "whole number"
	case goKind == "struct":
		return "mapping"
	}
	return goKind
}

// endpoint parses "name:intf[:addr/len]". The address may be IPv6: only the
// first two colons separate.
func (p *parser) endpoint(at, s string) Endpoint {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 {
		p.errorf("%s: %q: want name:interface or name:interface:address/prefix", at, s)
		return Endpoint{}
	}
	e := Endpoint{Name: parts[0], Intf: parts[1]}
	if len(parts) == 3 {
		e.IP = parts[2]
		if e.IP == "" {
			p.errorf("%s: %q: empty address after the last colon", at, s)
		}
	}
	p.checkEndpoint(at, s, e)
	return e
}

// checkEndpoint checks an end's name, interface and address; shown is the
// end as the file writes it.
func (p *parser) checkEndpoint(at, shown string, e Endpoint) {
	if e.IP != "" {
		if _, err := parsePrefix(e.IP); err != nil {
			p.errorf("%s: %q: %w", at, shown, err)
		}
	}
	if e.Name == "" {
		p.errorf("%s: %q: empty name", at, shown)
	}
	if err := checkIntf(e.Intf); err != nil {
		p.errorf("%s: %q: %w", at, shown, err)
	}
}

// parsePrefix parses an interface address in CIDR notation, as the CRD's
// isCIDR accepts it (host bits may be set).
func parsePrefix(s string) (netip.Prefix, error) {
	addr, _, ok := strings.Cut(s, "/")
	if !ok {
		return netip.Prefix{}, errors.New("want an address in CIDR notation, like 10.0.0.1/24")
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address", addr)
	}
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("bad prefix length")
	}
	return pf, nil
}

// checkIntf applies the kernel's and the CRD's rules for interface names.
func checkIntf(name string) error {
	switch {
	case name == "":
		return errors.New("empty interface name")
	case len(name) > 15:
		return fmt.Errorf("interface name %q is longer than 15 characters", name)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return fmt.Errorf("interface name %q has a slash, a colon or a space", name)
	}
	return nil
}

// checkLink checks one link whose fields parsed.
func (p *parser) checkLink(l Link) {
	at := p.places.Link(l.UID)
	a, b := l.Endpoints[0], l.Endpoints[1]
	for i, e := range l.Endpoints {
		ep := p.places.Endpoint(l.UID, i)
		switch {
		case e.Name == "":
			// reported by endpoint
		case e.Name == Localhost:
			if e.IP != "" {
				p.errorf("%s: %q: the node's NIC takes no address here (it keeps its own)", ep, e)
			}
		case l.IsPod(i):
			if errs := validation.IsDNS1123Subdomain(e.Name); len(errs) > 0 {
				p.errorf("%s: %q: pod name %q: %s", ep, e, e.Name, strings.Join(errs, "; "))
			}
			if e.Intf == "eth0" || e.Intf == "lo" {
				p.errorf("%s: %q: %s is the pod's own (cluster network or loopback), pick another name", ep, e, e.Intf)
			}
		default: // physical device
			if len(e.Name) > 253 {
				p.errorf("%s: device name is longer than 253 characters", ep)
			}
		}
	}
	switch {
	case a.Name == Localhost && b.Name == Localhost:
		p.errorf("%s.endpoints: both ends are localhost; at least one must be a pod", at)
	case a.Name == b.Name && a.Name != "":
		p.errorf("%s.endpoints: %s is linked to itself", at, a.Name)
	}
	if o := l.LinkOptions; o != nil {
		if a.Name == Localhost || b.Name == Localhost {
			p.errorf("%s.link_options: a physical peer cannot be combined with localhost (a macvlan on the node's NIC)", at)
		}
		if ip, err := netip.ParseAddr(o.RemoteVTEP); err != nil || ip.Zone() != "" {
			p.errorf("%s.link_options.remote_vtep: %q is not an IP address", at, o.RemoteVTEP)
		}
		if o.VNI < 1 || o.VNI > v1beta1.MaxVNI {
			p.errorf("%s.link_options.vni: %d is outside 1..%d", at, o.VNI, v1beta1.MaxVNI)
		}
		if o.UDPPort != nil && (*o.UDPPort < 1 || *o.UDPPort > 65535) {
			p.errorf("%s.link_options.udp_port: %d is outside 1..65535", at, *o.UDPPort)
		}
	}
	pa, errA := parsePrefix(a.IP)
	pb, errB := parsePrefix(b.IP)
	if errA == nil && errB == nil {
		switch {
		case pa.Addr().Is4() != pb.Addr().Is4():
			p.errorf("%s.endpoints: %s and %s are not of one address family", at, a.IP, b.IP)
		case pa.Addr() == pb.Addr():
			p.errorf("%s.endpoints: both ends have the address %s", at, pa.Addr())
		case pa.Masked() != pb.Masked():
			p.errorf("%s.endpoints: %s and %s are not in one subnet (%s, %s)", at, a.IP, b.IP, pa.Masked(), pb.Masked())
		}
	}
}

// checkAcrossLinks checks what involves several links: interface reuse,
// names used both as a pod and a device, VXLAN identifiers.
func (p *parser) checkAcrossLinks() {
	type intfKey struct{ name, intf string }
	type vxlanKey struct{ vni, port int32 }
	intfs := map[intfKey]string{}
	pods := map[string]string{}
	devices := map[string]string{}
	vteps := map[string]string{}
	vnis := map[vxlanKey]string{}
	count := map[string]int{}
	for _, l := range p.f.Links {
		for i, e := range l.Endpoints {
			at := p.places.Endpoint(l.UID, i)
			switch {
			case e.Name == Localhost:
				continue // many pods may have a macvlan on one NIC
			case l.IsPod(i):
				if first, ok := devices[e.Name]; ok {
					p.errorf("%s: %q: %s is a physical device at %s, not a pod", at, e, e.Name, first)
				}
				if _, ok := pods[e.Name]; !ok {
					pods[e.Name] = at
				}
				if count[e.Name]++; count[e.Name] == v1beta1.MaxLinks+1 {
					p.errorf("%s: %s has more than %d links (a Topology's most)", at, e.Name, v1beta1.MaxLinks)
				}
			default:
				if first, ok := pods[e.Name]; ok {
					p.errorf("%s: %q: %s is a pod at %s, not a physical device", at, e, e.Name, first)
				}
				if _, ok := devices[e.Name]; !ok {
					devices[e.Name] = at
				}
				vtep := l.LinkOptions.RemoteVTEP
				if first, ok := vteps[e.Name]; ok && first != vtep {
					p.errorf("%s.link_options.remote_vtep: %s, but %s has %s elsewhere", p.places.Link(l.UID), vtep, e.Name, first)
				}
				vteps[e.Name] = vtep
			}
			k := intfKey{e.Name, e.Intf}
			if first, ok := intfs[k]; ok {
				p.errorf("%s: %q: %s already has %s at %s", at, e, e.Name, e.Intf, first)
			} else {
				intfs[k] = at
			}
		}
		if o := l.LinkOptions; o != nil {
			k := vxlanKey{o.VNI, o.Port()}
			if first, ok := vnis[k]; ok {
				p.errorf("%s.link_options: vni %d on port %d is already used at %s; a node keeps one VXLAN device per VNI and port", p.places.Link(l.UID), k.vni, k.port, first)
			} else {
				vnis[k] = p.places.Link(l.UID)
			}
		}
	}
}

// Pods are the pods the file names, in order of first appearance.
func (f *File) Pods() []string {
	var pods []string
	seen := map[string]bool{}
	for _, l := range f.Links {
		for i, e := range l.Endpoints {
			if l.IsPod(i) && !seen[e.Name] {
				seen[e.Name] = true
				pods = append(pods, e.Name)
			}
		}
	}
	return pods
}

// PhysicalPeers are the links to physical devices, in file order.
func (f *File) PhysicalPeers() []PhysicalPeer {
	var out []PhysicalPeer
	for _, l := range f.Links {
		if o := l.LinkOptions; o != nil {
			out = append(out, PhysicalPeer{
				UID: l.UID, Pod: l.Endpoints[0], Device: l.Endpoints[1],
				RemoteVTEP: netip.MustParseAddr(o.RemoteVTEP), VNI: o.VNI, UDPPort: o.Port(),
			})
		}
	}
	return out
}
