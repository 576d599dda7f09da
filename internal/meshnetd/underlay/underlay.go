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
// come from Remote only.
type Tunnel struct {
	Remote netip.Addr
	Port   uint16
	VNI    uint32
}

func (t Tunnel) String() string {
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
	// Forwarded: a datagram to a links' port the node would forward.
	Forwarded Reason = "forwarded"
)

// Reasons are all the reasons, in the order Dropped reports them.
var Reasons = []Reason{NotFarEnd, Spoofed, Forwarded}

// Guard is the node's underlay table. Entries are held by owners (one per
// VXLAN end); an entry stays in the kernel while an owner holds it. A Guard
// is safe for concurrent use. A nil Guard guards nothing and accepts every
// call.
type Guard struct {
	mu   sync.Mutex
	conn *nftables.Conn
	fd   netns.NsHandle

	table                     *nftables.Table
	ports, vnis, peer4, peer6 *nftables.Set
	input, forward            *nftables.Chain

	owners map[string]held
	// tunnels, ports and vnis count the owners of each tunnel, and the
	// tunnels of each port and of each port and VNI: an element is in the
	// kernel while its count is above zero.
	tunnelRefs map[Tunnel]int
	portRefs   map[uint16]int
	vniRefs    map[portVNI]int
}

// held is an owner's entry and when it was admitted.
type held struct {
	tunnel Tunnel
	at     time.Time
}

type portVNI struct {
	port uint16
	vni  uint32
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
	var d delta
	g.hold(t, &d)
	if had {
		g.drop(prev.tunnel, &d)
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
	var d delta
	g.drop(prev.tunnel, &d)
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
	g.tunnelRefs, g.portRefs, g.vniRefs = map[Tunnel]int{}, map[uint16]int{}, map[portVNI]int{}
	var d delta
	for _, h := range next {
		g.hold(h.tunnel, &d)
	}
	for _, s := range []*nftables.Set{g.ports, g.vnis, g.peer4, g.peer6} {
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
	ts := make([]Tunnel, 0, len(g.tunnelRefs))
	for t := range g.tunnelRefs {
		ts = append(ts, t)
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

// delta is the elements a change adds to (+1) and removes from (-1) each
// set, by key.
type delta struct {
	ports, vnis, peer4, peer6 map[string]int
}

func bump(m *map[string]int, key []byte, by int) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[string(key)] += by
}

// hold counts one more owner of t, noting the elements that appear.
func (g *Guard) hold(t Tunnel, d *delta) {
	if g.tunnelRefs[t]++; g.tunnelRefs[t] > 1 {
		return
	}
	if g.portRefs[t.Port]++; g.portRefs[t.Port] == 1 {
		bump(&d.ports, portKey(t.Port), 1)
	}
	pv := portVNI{t.Port, t.VNI}
	if g.vniRefs[pv]++; g.vniRefs[pv] == 1 {
		bump(&d.vnis, vniKey(t.Port, t.VNI), 1)
	}
	if t.Remote.Is4() {
		bump(&d.peer4, peerKey(t), 1)
	} else {
		bump(&d.peer6, peerKey(t), 1)
	}
}

// drop counts one owner of t fewer, noting the elements that go.
func (g *Guard) drop(t Tunnel, d *delta) {
	if g.tunnelRefs[t]--; g.tunnelRefs[t] > 0 {
		return
	}
	delete(g.tunnelRefs, t)
	if g.portRefs[t.Port]--; g.portRefs[t.Port] == 0 {
		delete(g.portRefs, t.Port)
		bump(&d.ports, portKey(t.Port), -1)
	}
	pv := portVNI{t.Port, t.VNI}
	if g.vniRefs[pv]--; g.vniRefs[pv] == 0 {
		delete(g.vniRefs, pv)
		bump(&d.vnis, vniKey(t.Port, t.VNI), -1)
	}
	if t.Remote.Is4() {
		bump(&d.peer4, peerKey(t), -1)
	} else {
		bump(&d.peer6, peerKey(t), -1)
	}
}

// apply sends d in one transaction, with anything queued before it. Far
// ends are added before their VNIs and removed after them: a VNI is never
// guarded without its far end admitted.
func (g *Guard) apply(d delta) error {
	steps := []struct {
		set *nftables.Set
		m   map[string]int
		add bool
	}{
		{g.peer4, d.peer4, true}, {g.peer6, d.peer6, true}, {g.ports, d.ports, true},
		{g.vnis, d.vnis, true}, {g.vnis, d.vnis, false},
		{g.ports, d.ports, false}, {g.peer4, d.peer4, false}, {g.peer6, d.peer6, false},
	}
	for _, s := range steps {
		var elems []nftables.SetElement
		for k, n := range s.m {
			if (n > 0) == s.add && n != 0 {
				elems = append(elems, nftables.SetElement{Key: []byte(k)})
			}
		}
		for chunk := range slices.Chunk(elems, elementsPerMessage) {
			var err error
			if s.add {
				err = g.conn.SetAddElements(s.set, chunk)
			} else {
				err = g.conn.SetDeleteElements(s.set, chunk)
			}
			if err != nil {
				return fmt.Errorf("change set %s: %w", s.set.Name, err)
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

func peerKey(t Tunnel) []byte {
	return append(append(t.Remote.AsSlice(), reg(portKey(t.Port))...), reg(vniBytes(t.VNI))...)
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
	g.peer4 = &nftables.Set{Table: g.table, Name: "far_ends_v4", Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService, vniType)}
	g.peer6 = &nftables.Set{Table: g.table, Name: "far_ends_v6", Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService, vniType)}
	for _, s := range []*nftables.Set{g.ports, g.vnis, g.peer4, g.peer6} {
		// AddSet fails only on a malformed set, which these are not.
		_ = c.AddSet(s, nil)
	}

	accept := nftables.ChainPolicyAccept
	g.input = c.AddChain(&nftables.Chain{Table: g.table, Name: "input", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	g.forward = c.AddChain(&nftables.Chain{Table: g.table, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	for _, fam := range []struct {
		proto    byte
		saddrOff uint32
		saddrLen uint32
		peers    *nftables.Set
	}{{unix.NFPROTO_IPV4, 12, 4, g.peer4}, {unix.NFPROTO_IPV6, 8, 16, g.peer6}} {
		regPort := regSaddr + fam.saddrLen/4
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
		notFarEnd := append(slices.Clone(guarded),
			&expr.Payload{DestRegister: regSaddr, Base: expr.PayloadBaseNetworkHeader, Offset: fam.saddrOff, Len: fam.saddrLen},
			&expr.Lookup{SourceRegister: regSaddr, SetName: fam.peers.Name, Invert: true},
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
		spoofed := append(slices.Clone(guarded),
			&expr.Fib{Register: regScratch, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{0, 0, 0, 0}},
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
		c.AddRule(&nftables.Rule{Table: g.table, Chain: g.input, Exprs: notFarEnd, UserData: []byte(NotFarEnd)})
		c.AddRule(&nftables.Rule{Table: g.table, Chain: g.input, Exprs: spoofed, UserData: []byte(Spoofed)})
	}
	c.AddRule(&nftables.Rule{Table: g.table, Chain: g.forward, UserData: []byte(Forwarded), Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseTransportHeader, Offset: offDport, Len: 2},
		&expr.Lookup{SourceRegister: regScratch, SetName: g.ports.Name},
		&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop},
	}})
}
