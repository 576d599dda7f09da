// Package underlay keeps the node's VXLAN underlay to the links' own ends.
//
// A VXLAN datagram is decapsulated into whichever device has its port and
// VNI, from whatever source: the kernel does not check it against the
// device's remote. Any pod that reaches a node's port (its own node's
// address, or another node's through the masquerade of the pod network)
// could write frames into a link of another namespace, and VNIs can be
// computed. A Guard holds an nftables table in the node's network namespace
// that, for every VNI of a link of the node:
//
//   - drops a datagram whose source is not that link's far end (the peer
//     node, or the physical peer's VTEP);
//   - drops one that arrives on an interface other than the one the node
//     routes that source through (strict reverse path), so a pod of the
//     node cannot pass for a peer node;
//   - drops one from the far end's node but not from the far end's own
//     UDP source port, when the far end has one (Tunnel.SrcPort): another
//     end of that node, re-pointed by a pod with NET_ADMIN, sends from the
//     node's address too, but from its own port;
//
// and drops every datagram to the links' ports that the node forwards, so
// that a pod cannot send to another node as its own node. Datagrams of
// VNIs the node's links do not use (the pod network's own VXLAN) pass
// untouched.
//
// The table is replaced whole at Open, so a restarted meshnetd guards what
// it is given at once; Admit and Release change one link's entry, and
// Replace converges the table to a full list.
package underlay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) a Guard owns.
const TableName = "meshnet"

// Tunnel is the underlay of one VXLAN end: datagrams to Port with VNI
// come from Remote only, and from its UDP port SrcPort when that is not 0
// (the far end's own, which meshnetd pins: another end of the far end's
// node, re-pointed by a pod with NET_ADMIN, sends from its own).
type Tunnel struct {
	Remote  netip.Addr
	Port    uint16
	VNI     uint32
	SrcPort uint16
}

func (t Tunnel) String() string {
	if t.SrcPort != 0 {
		return fmt.Sprintf("vni %d port %d from %s port %d", t.VNI, t.Port, t.Remote, t.SrcPort)
	}
	return fmt.Sprintf("vni %d port %d from %s", t.VNI, t.Port, t.Remote)
}

func (t Tunnel) validate() error {
	switch {
	case !t.Remote.IsValid():
		return errors.New("no remote")
	case t.Port == 0:
		return errors.New("no port")
	case t.VNI == 0 || t.VNI >= 1<<24:
		return fmt.Errorf("vni %d outside 1..%d", t.VNI, 1<<24-1)
	}
	return nil
}

// Reason is why a datagram was dropped, one counter each.
type Reason string

const (
	// NotFarEnd: the source is not the far end of the link with the VNI.
	NotFarEnd Reason = "not-far-end"
	// Spoofed: the source is a far end but the datagram came in on an
	// interface the node does not route that source through.
	Spoofed Reason = "spoofed"
	// NotFarEndsPort: from the far end's node, but not from the far end's
	// own source port: another end of that node, re-pointed.
	NotFarEndsPort Reason = "not-far-ends-port"
	// Forwarded: a datagram to a links' port the node would forward.
	Forwarded Reason = "forwarded"
)

// Reasons are all the reasons, in the order Dropped reports them.
var Reasons = []Reason{NotFarEnd, Spoofed, NotFarEndsPort, Forwarded}

// Guard is the node's underlay table. Entries are held by owners (one per
// VXLAN end); an entry stays in the kernel while an owner holds it. A Guard
// is safe for concurrent use. A nil Guard guards nothing and accepts every
// call.
type Guard struct {
	mu   sync.Mutex
	conn *nftables.Conn
	fd   netns.NsHandle

	table          *nftables.Table
	input, forward *nftables.Chain
	// ports holds the links' UDP ports, vnis their ports and VNIs; each
	// family's far holds (far end, port, VNI), pinned the same for the
	// far ends that send from a port of their own, which srcPorts holds
	// (far end, source port, port, VNI).
	ports, vnis           *nftables.Set
	far, pinned, srcPorts [2]*nftables.Set // [0] IPv4, [1] IPv6

	owners map[string]held
	// refs counts the owners holding each element, by set and key: an
	// element is in the kernel while its count is above zero.
	refs map[elem]int
}

// elem is one element of one set.
type elem struct {
	set *nftables.Set
	key string
}

// held is an owner's entry and when it was admitted.
type held struct {
	tunnel Tunnel
	at     time.Time
}

// Open installs the table in the network namespace at netnsPath, replacing
// the one a previous Guard left, in one transaction with the entries of
// owners: no datagram meets a half-made table.
func Open(netnsPath string, owners map[string]Tunnel) (*Guard, error) {
	fd, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("underlay guard: open netns %s: %w", netnsPath, err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(fd)), nftables.AsLasting(), nftables.WithSockOptions(bigSendBuffer))
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("underlay guard: nftables in %s: %w", netnsPath, err)
	}
	g := &Guard{conn: conn, fd: fd}
	g.build()
	if err := g.replace(owners, 0); err != nil {
		g.Close()
		return nil, fmt.Errorf("underlay guard: install table %s in %s: %w", TableName, netnsPath, err)
	}
	return g, nil
}

// Close releases the netlink socket. The table stays: the links it guards
// outlive meshnetd, and the next Open replaces it.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	err := g.conn.CloseLasting()
	g.fd.Close()
	return err
}

// Admit makes owner's entry t, before the VXLAN end is made so that its far
// end's first frames pass and nobody else's do. An owner holds one entry:
// its previous one is released.
func (g *Guard) Admit(owner string, t Tunnel) error {
	if g == nil {
		return nil
	}
	if err := t.validate(); err != nil {
		return fmt.Errorf("admit %s to the underlay guard: %w", owner, err)
	}
	t.Remote = t.Remote.Unmap()
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, had := g.owners[owner]
	g.owners[owner] = held{tunnel: t, at: time.Now()}
	if had && prev.tunnel == t {
		return nil
	}
	d := delta{}
	g.hold(t, d)
	if had {
		g.drop(prev.tunnel, d)
	}
	if err := g.apply(d); err != nil {
		return fmt.Errorf("admit %s (%s) to the underlay guard: %w", owner, t, err)
	}
	return nil
}

// Release drops owner's entry, once its VXLAN end is gone.
func (g *Guard) Release(owner string) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, had := g.owners[owner]
	if !had {
		return nil
	}
	delete(g.owners, owner)
	d := delta{}
	g.drop(prev.tunnel, d)
	if err := g.apply(d); err != nil {
		return fmt.Errorf("release %s (%s) from the underlay guard: %w", owner, prev.tunnel, err)
	}
	return nil
}

// Replace makes the entries owners' whole, in one transaction, keeping
// those admitted within grace that owners lacks: an end being made now is
// admitted before the record Replace's caller reads names it. It also
// mends what a failed Admit or Release left.
func (g *Guard) Replace(owners map[string]Tunnel, grace time.Duration) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.replace(owners, grace); err != nil {
		return fmt.Errorf("replace underlay guard entries: %w", err)
	}
	return nil
}

func (g *Guard) replace(owners map[string]Tunnel, grace time.Duration) error {
	now := time.Now()
	next := make(map[string]held, len(owners))
	for o, t := range owners {
		if err := t.validate(); err != nil {
			return fmt.Errorf("owner %s: %w", o, err)
		}
		t.Remote = t.Remote.Unmap()
		if h, ok := g.owners[o]; ok && h.tunnel == t {
			next[o] = h
			continue
		}
		next[o] = held{tunnel: t, at: now}
	}
	for o, h := range g.owners {
		if _, ok := next[o]; !ok && now.Sub(h.at) < grace {
			next[o] = h
		}
	}
	g.owners = next
	g.refs = map[elem]int{}
	d := delta{}
	for _, h := range next {
		g.hold(h.tunnel, d)
	}
	for _, s := range g.sets() {
		g.conn.FlushSet(s)
	}
	return g.apply(d)
}

// Tunnels returns the entries held, each once.
func (g *Guard) Tunnels() []Tunnel {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[Tunnel]bool{}
	var ts []Tunnel
	for _, h := range g.owners {
		if !seen[h.tunnel] {
			seen[h.tunnel] = true
			ts = append(ts, h.tunnel)
		}
	}
	return ts
}

// Dropped reads the kernel's counts of the datagrams dropped, by reason.
func (g *Guard) Dropped() (map[Reason]uint64, error) {
	if g == nil {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return dropped(g.conn, g.table)
}

// ReadDropped reads the counts of the table in the network namespace at
// netnsPath, whoever installed it: for a look from outside meshnetd.
func ReadDropped(netnsPath string) (map[Reason]uint64, error) {
	fd, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer fd.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		return nil, fmt.Errorf("nftables in %s: %w", netnsPath, err)
	}
	return dropped(conn, &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName})
}

func dropped(conn *nftables.Conn, table *nftables.Table) (map[Reason]uint64, error) {
	n := map[Reason]uint64{}
	for _, chain := range []string{"input", "forward"} {
		rules, err := conn.GetRules(table, &nftables.Chain{Name: chain})
		if err != nil {
			return nil, fmt.Errorf("read chain %s of table %s: %w", chain, TableName, err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					n[Reason(r.UserData)] += ctr.Packets
				}
			}
		}
	}
	return n, nil
}

// delta is the elements a change adds to (+1) and removes from (-1), by
// set and key.
type delta map[elem]int

// elems are the elements t needs.
func (g *Guard) elems(t Tunnel) []elem {
	fam := 0
	if !t.Remote.Is4() {
		fam = 1
	}
	es := []elem{
		{g.ports, string(portKey(t.Port))},
		{g.vnis, string(vniKey(t.Port, t.VNI))},
		{g.far[fam], string(farKey(t))},
	}
	if t.SrcPort != 0 {
		es = append(es, elem{g.pinned[fam], string(farKey(t))}, elem{g.srcPorts[fam], string(srcPortKey(t))})
	}
	return es
}

// hold counts one more owner of t's elements, noting those that appear.
func (g *Guard) hold(t Tunnel, d delta) {
	for _, e := range g.elems(t) {
		if g.refs[e]++; g.refs[e] == 1 {
			d[e]++
		}
	}
}

// drop counts one owner of t's elements fewer, noting those that go.
func (g *Guard) drop(t Tunnel, d delta) {
	for _, e := range g.elems(t) {
		if g.refs[e]--; g.refs[e] <= 0 {
			delete(g.refs, e)
			d[e]--
		}
	}
}

// sets are the guard's sets.
func (g *Guard) sets() []*nftables.Set {
	return []*nftables.Set{g.ports, g.vnis, g.far[0], g.far[1], g.pinned[0], g.pinned[1], g.srcPorts[0], g.srcPorts[1]}
}

// apply sends d in one transaction, with anything queued before it: the
// kernel applies it whole, so no datagram meets half of it.
func (g *Guard) apply(d delta) error {
	for _, set := range g.sets() {
		for _, add := range []bool{true, false} {
			var elems []nftables.SetElement
			for e, n := range d {
				if e.set == set && n != 0 && (n > 0) == add {
					elems = append(elems, nftables.SetElement{Key: []byte(e.key)})
				}
			}
			for chunk := range slices.Chunk(elems, elementsPerMessage) {
				var err error
				if add {
					err = g.conn.SetAddElements(set, chunk)
				} else {
					err = g.conn.SetDeleteElements(set, chunk)
				}
				if err != nil {
					return fmt.Errorf("change set %s: %w", set.Name, err)
				}
			}
		}
	}
	return g.conn.Flush()
}

// elementsPerMessage keeps a message's element list within a netlink
// attribute's 64 KiB: an element of the largest set (an IPv6 far end) is
// about 44 bytes.
const elementsPerMessage = 1000

// sendBuffer is the socket's send buffer: a transaction is one sendmsg,
// and a table of 10,000 ends (20,000 elements, ~0.9 MB) is past the
// default 208 KiB. It is a bound, not an allocation.
const sendBuffer = 16 << 20

// bigSendBuffer raises the send buffer past net.core.wmem_max, which
// meshnetd's CAP_NET_ADMIN allows (SO_SNDBUFFORCE).
func bigSendBuffer(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuffer)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set the send buffer to %d bytes: %w", sendBuffer, serr)
	}
	return nil
}

// Element keys are laid out as the rules load them: each field of a
// concatenation in its own 4-byte register, zero-padded.
func portKey(port uint16) []byte { return binary.BigEndian.AppendUint16(nil, port) }

func vniKey(port uint16, vni uint32) []byte {
	return append(reg(portKey(port)), reg(vniBytes(vni))...)
}

func farKey(t Tunnel) []byte {
	return append(append(t.Remote.AsSlice(), reg(portKey(t.Port))...), reg(vniBytes(t.VNI))...)
}

func srcPortKey(t Tunnel) []byte {
	k := append(t.Remote.AsSlice(), reg(portKey(t.SrcPort))...)
	return append(append(k, reg(portKey(t.Port))...), reg(vniBytes(t.VNI))...)
}

func vniBytes(vni uint32) []byte { return []byte{byte(vni >> 16), byte(vni >> 8), byte(vni)} }

// reg pads b to a register's 4 bytes.
func reg(b []byte) []byte { return append(b, make([]byte, 3-(len(b)+3)%4)...) }

// The registers the rules use: 32-bit registers (NFT_REG32_00 is 8) so
// that a concatenation's fields are adjacent.
const (
	regScratch = 8
	regSaddr   = 8
)

// vniType is the sets' type for a VNI field: a 4-byte type the nft tool
// can print (it aborts listing a concatenation with "integer", whose size
// it does not know), so that the table shows in nft list ruleset.
var vniType = nftables.TypeMark

// Offsets in the UDP header and the VXLAN header after it.
const (
	offDport = 2
	offVNI   = 8 + 4
)

// build queues the table, its sets, chains and rules, replacing the table
// a previous Guard left.
func (g *Guard) build() {
	c := g.conn
	g.table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	c.AddTable(g.table)
	c.DelTable(g.table)
	c.AddTable(g.table)

	g.ports = &nftables.Set{Table: g.table, Name: "ports", KeyType: nftables.TypeInetService}
	g.vnis = &nftables.Set{Table: g.table, Name: "vnis", Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeInetService, vniType)}
	for i, addr := range []nftables.SetDatatype{nftables.TypeIPAddr, nftables.TypeIP6Addr} {
		v := []string{"v4", "v6"}[i]
		g.far[i] = &nftables.Set{Table: g.table, Name: "far_ends_" + v, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetService, vniType)}
		g.pinned[i] = &nftables.Set{Table: g.table, Name: "pinned_far_ends_" + v, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetService, vniType)}
		g.srcPorts[i] = &nftables.Set{Table: g.table, Name: "far_end_ports_" + v, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetService, nftables.TypeInetService, vniType)}
	}
	for _, s := range g.sets() {
		// AddSet fails only on a malformed set, which these are not.
		_ = c.AddSet(s, nil)
	}

	accept := nftables.ChainPolicyAccept
	g.input = c.AddChain(&nftables.Chain{Table: g.table, Name: "input", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	g.forward = c.AddChain(&nftables.Chain{Table: g.table, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	for i, fam := range []struct {
		proto    byte
		saddrOff uint32
		saddrLen uint32
	}{{unix.NFPROTO_IPV4, 12, 4}, {unix.NFPROTO_IPV6, 8, 16}} {
		// saddr . dport . vni from regSaddr on, then saddr . sport .
		// dport . vni after it.
		regPort := regSaddr + fam.saddrLen/4
		regSaddr2 := regPort + 2
		regSport2 := regSaddr2 + fam.saddrLen/4
		guarded := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: regScratch},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{fam.proto}},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regScratch},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Payload{DestRegister: regPort, Base: expr.PayloadBaseTransportHeader, Offset: offDport, Len: 2},
			&expr.Lookup{SourceRegister: regPort, SetName: g.ports.Name},
			&expr.Payload{DestRegister: regPort + 1, Base: expr.PayloadBaseTransportHeader, Offset: offVNI, Len: 3},
			&expr.Lookup{SourceRegister: regPort, SetName: g.vnis.Name},
		}
		saddr := &expr.Payload{DestRegister: regSaddr, Base: expr.PayloadBaseNetworkHeader, Offset: fam.saddrOff, Len: fam.saddrLen}
		notFarEnd := append(slices.Clone(guarded), saddr,
			&expr.Lookup{SourceRegister: regSaddr, SetName: g.far[i].Name, Invert: true},
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
		spoofed := append(slices.Clone(guarded),
			&expr.Fib{Register: regScratch, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{0, 0, 0, 0}},
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
		notFarEndsPort := append(slices.Clone(guarded), saddr,
			&expr.Lookup{SourceRegister: regSaddr, SetName: g.pinned[i].Name},
			&expr.Payload{DestRegister: regSaddr2, Base: expr.PayloadBaseNetworkHeader, Offset: fam.saddrOff, Len: fam.saddrLen},
			&expr.Payload{DestRegister: regSport2, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Payload{DestRegister: regSport2 + 1, Base: expr.PayloadBaseTransportHeader, Offset: offDport, Len: 2},
			&expr.Payload{DestRegister: regSport2 + 2, Base: expr.PayloadBaseTransportHeader, Offset: offVNI, Len: 3},
			&expr.Lookup{SourceRegister: regSaddr2, SetName: g.srcPorts[i].Name, Invert: true},
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
		for _, r := range []struct {
			exprs  []expr.Any
			reason Reason
		}{{notFarEnd, NotFarEnd}, {spoofed, Spoofed}, {notFarEndsPort, NotFarEndsPort}} {
			c.AddRule(&nftables.Rule{Table: g.table, Chain: g.input, Exprs: r.exprs, UserData: []byte(r.reason)})
		}
	}
	c.AddRule(&nftables.Rule{Table: g.table, Chain: g.forward, UserData: []byte(Forwarded), Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseTransportHeader, Offset: offDport, Len: 2},
		&expr.Lookup{SourceRegister: regScratch, SetName: g.ports.Name},
		&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop},
	}})
}
