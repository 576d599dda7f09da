// Package netem shapes the egress of an interface in a pod's network
// namespace with a root netem qdisc, over netlink sockets bound to that
// namespace (github.com/florianl/go-tc), never by switching a thread into it.
//
// meshnet's qdisc carries the fixed handle Handle ("MN:"), which tells it
// from one somebody else installed: Apply and Clear touch only that one and
// report any other with ErrForeignQdisc.
//
// Apply changes an existing meshnet qdisc in place (one RTM_NEWQDISC on the
// same handle), never by delete and add, which would drop the queue. The
// kernel keeps every nested netem option a change does not carry, so each
// Apply sends all of them, zeros included: a field removed from a Spec is
// removed in the kernel. The jitter distribution table is the exception the
// kernel forces: it cannot be dropped (an empty one is EINVAL) nor read
// back, so every Apply with jitter sends one, a linear table for none and
// uniform, which jitters exactly as the kernel does without a table.
//
// go-tc keeps its psched clock in package state: the process must call
// github.com/florianl/go-tc/core.InitializeClock once before the first Apply
// (meshnetd's main does); Apply fails with ErrClockNotInitialized otherwise.
package netem

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/meshnet/meshnet/internal/shaping"
)

// Handle is the handle of meshnet's root netem qdisc, "4d4e:" ("MN").
const Handle uint32 = 0x4d4e << 16

var (
	// ErrForeignQdisc is matched by a *ForeignQdiscError.
	ErrForeignQdisc = errors.New("root qdisc is not meshnet's")
	// ErrNoNetem says the kernel cannot make netem qdiscs.
	ErrNoNetem = errors.New("kernel has no sch_netem (load the sch_netem module: modprobe sch_netem)")
	// ErrClockNotInitialized says core.InitializeClock was not called.
	ErrClockNotInitialized = errors.New("go-tc clock not initialised: call github.com/florianl/go-tc/core.InitializeClock() once at start")
)

// ForeignQdiscError is a root qdisc that meshnet did not install and leaves
// alone.
type ForeignQdiscError struct {
	Dev    string
	Kind   string
	Handle uint32
}

func (e *ForeignQdiscError) Error() string {
	return fmt.Sprintf("%s has root qdisc %s %s, not meshnet's netem %s; leaving it alone",
		e.Dev, e.Kind, formatHandle(e.Handle), formatHandle(Handle))
}

// Is makes errors.Is(err, ErrForeignQdisc) true.
func (e *ForeignQdiscError) Is(target error) bool { return target == ErrForeignQdisc }

// Owner says whose root qdisc an interface has.
type Owner int

const (
	// OwnerNone is the kernel's default root qdisc (handle 0: noqueue,
	// pfifo_fast, mq, fq_codel, ...), which Apply may replace.
	OwnerNone Owner = iota
	// OwnerMeshnet is a netem qdisc with handle Handle.
	OwnerMeshnet
	// OwnerForeign is any other qdisc somebody installed.
	OwnerForeign
)

func (o Owner) String() string {
	switch o {
	case OwnerNone:
		return "none"
	case OwnerMeshnet:
		return "meshnet"
	case OwnerForeign:
		return "foreign"
	}
	return fmt.Sprintf("Owner(%d)", int(o))
}

// State is an interface's root qdisc as the kernel reports it.
type State struct {
	Owner  Owner
	Kind   string // as the kernel names it: "noqueue", "netem", "tbf", ...
	Handle uint32
	// Spec is the effective shaping of a netem root, meshnet's or not. The
	// kernel does not report the distribution table, so Distribution is
	// always DistributionNone here.
	Spec shaping.Spec
	// Undecoded is why Spec could not be read (go-tc knows no netem loss
	// model or the qdisc's kind); Owner, Kind and Handle are still right.
	Undecoded error
	Stats     Stats
}

// Stats are the root qdisc's counters (u32 ones wrap).
type Stats struct {
	Bytes                  uint64
	Packets                uint32
	Drops, Overlimits      uint32
	QueueLen, BacklogBytes uint32
}

// Conn shapes the interfaces of one network namespace. It is not safe for
// concurrent use.
type Conn struct {
	ns    netns.NsHandle
	tc    *tc.Tc
	links *netlink.Handle
}

// Open binds netlink sockets to ns, which the caller keeps open until
// Close.
func Open(ns netns.NsHandle) (*Conn, error) {
	t, err := tc.Open(&tc.Config{NetNS: int(ns)})
	if err != nil {
		return nil, fmt.Errorf("open tc socket in netns %s: %w", ns, err)
	}
	// Extended acks carry the kernel's reason ("Specified qdisc kind is
	// unknown"); an old kernel without them still works.
	_ = t.SetOption(mnl.ExtendedAcknowledge, true)
	// Route only: a kernel without xfrm_user refuses the other families.
	links, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open netlink socket in netns %s: %w", ns, err)
	}
	return &Conn{ns: ns, tc: t, links: links}, nil
}

// Close closes the sockets, not the namespace.
func (c *Conn) Close() error {
	c.links.Close()
	return c.tc.Close()
}

// Apply opens a Conn on ns for one Conn.Apply.
func Apply(ns netns.NsHandle, dev string, s shaping.Spec) error {
	return with(ns, func(c *Conn) error { return c.Apply(dev, s) })
}

// Get opens a Conn on ns for one Conn.Get.
func Get(ns netns.NsHandle, dev string) (State, error) {
	var st State
	err := with(ns, func(c *Conn) (err error) {
		st, err = c.Get(dev)
		return err
	})
	return st, err
}

// Clear opens a Conn on ns for one Conn.Clear.
func Clear(ns netns.NsHandle, dev string) error {
	return with(ns, func(c *Conn) error { return c.Clear(dev) })
}

func with(ns netns.NsHandle, f func(*Conn) error) error {
	c, err := Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// Apply makes s the shaping of dev: it adds meshnet's root netem qdisc in
// place of the kernel's default one, or changes meshnet's in place. A
// foreign root qdisc is left alone and reported as a *ForeignQdiscError.
func (c *Conn) Apply(dev string, s shaping.Spec) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("set netem on %s: %w", dev, err)
	}
	if !core.IsClockInitialized() {
		return fmt.Errorf("set netem on %s: %w", dev, ErrClockNotInitialized)
	}
	ifindex, err := c.ifindex(dev)
	if err != nil {
		return fmt.Errorf("set netem on %s: %w", dev, err)
	}
	st, err := c.root(dev, ifindex)
	if err != nil {
		return fmt.Errorf("set netem on %s: %w", dev, err)
	}
	obj := netemObject(ifindex, s)
	switch st.Owner {
	case OwnerMeshnet:
		// No flags: the kernel finds the qdisc by handle and changes it.
		err = c.tc.Qdisc().Change(obj)
	case OwnerNone:
		// Create|Excl: the kernel ignores its default root and refuses to
		// replace one somebody added since we looked.
		if err = c.tc.Qdisc().Add(obj); isUnknownKind(err) {
			err = ErrNoNetem
		}
	default:
		return fmt.Errorf("set netem: %w", &ForeignQdiscError{Dev: dev, Kind: st.Kind, Handle: st.Handle})
	}
	if err != nil {
		return fmt.Errorf("set netem on %s: %w", dev, err)
	}
	return nil
}

// Get reads dev's root qdisc back from the kernel.
func (c *Conn) Get(dev string) (State, error) {
	ifindex, err := c.ifindex(dev)
	if err != nil {
		return State{}, fmt.Errorf("get netem of %s: %w", dev, err)
	}
	st, err := c.root(dev, ifindex)
	if err != nil {
		return State{}, fmt.Errorf("get netem of %s: %w", dev, err)
	}
	return st, nil
}

// Clear deletes dev's root qdisc if it is meshnet's, which gives dev back
// the kernel's default one. No meshnet qdisc is no error; a foreign one is
// left alone and reported.
func (c *Conn) Clear(dev string) error {
	ifindex, err := c.ifindex(dev)
	if err != nil {
		return fmt.Errorf("clear netem of %s: %w", dev, err)
	}
	st, err := c.root(dev, ifindex)
	if err != nil {
		return fmt.Errorf("clear netem of %s: %w", dev, err)
	}
	switch st.Owner {
	case OwnerNone:
		return nil
	case OwnerForeign:
		return fmt.Errorf("clear netem: %w", &ForeignQdiscError{Dev: dev, Kind: st.Kind, Handle: st.Handle})
	}
	// The kernel checks handle and kind again; go-tc wants options to
	// marshal, which a delete ignores.
	err = c.tc.Qdisc().Delete(&tc.Object{Msg: tc.Msg{
		Family: syscall.AF_UNSPEC, Ifindex: ifindex, Handle: Handle, Parent: tc.HandleRoot,
	}, Attribute: tc.Attribute{Kind: "netem", Netem: &tc.Netem{}}})
	if err != nil {
		return fmt.Errorf("clear netem of %s: %w", dev, err)
	}
	return nil
}

func (c *Conn) ifindex(dev string) (uint32, error) {
	link, err := c.links.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("find link %s in netns %s: %w", dev, c.ns, err)
	}
	return uint32(link.Attrs().Index), nil
}

// root reads the root qdisc of ifindex. go-tc's dump fails on the first
// qdisc of the namespace it cannot decode (a kind or a netem loss model it
// does not know), so then a bare dump tells the root's kind and handle.
func (c *Conn) root(dev string, ifindex uint32) (State, error) {
	objs, err := c.tc.Qdisc().Get()
	if err != nil {
		kind, handle, found, rawErr := rawRoot(c.ns, ifindex)
		if rawErr != nil {
			return State{}, fmt.Errorf("read qdiscs: %w", errors.Join(err, rawErr))
		}
		if !found {
			return State{}, fmt.Errorf("read qdiscs: no root qdisc on %s", dev)
		}
		return State{Owner: owner(kind, handle), Kind: kind, Handle: handle,
			Undecoded: fmt.Errorf("go-tc cannot decode it: %w", err)}, nil
	}
	for _, o := range objs {
		if o.Ifindex != ifindex || o.Parent != tc.HandleRoot {
			continue
		}
		st := State{Owner: owner(o.Kind, o.Handle), Kind: o.Kind, Handle: o.Handle, Stats: stats(o.Attribute)}
		if o.Netem != nil {
			st.Spec = decode(o.Netem)
		}
		return st, nil
	}
	// A device always has a root (noqueue at least) while it exists.
	return State{}, fmt.Errorf("read qdiscs: no root qdisc on %s", dev)
}

func owner(kind string, handle uint32) Owner {
	switch {
	case handle == 0:
		return OwnerNone
	case handle == Handle && kind == "netem":
		return OwnerMeshnet
	}
	return OwnerForeign
}

// stats reads the legacy TCA_STATS struct: go-tc v0.4.8 decodes the nested
// TCA_STATS2 as a flat struct, which gives garbage.
func stats(a tc.Attribute) Stats {
	s := a.Stats
	if s == nil {
		return Stats{}
	}
	return Stats{Bytes: s.Bytes, Packets: s.Packets, Drops: s.Drops, Overlimits: s.Overlimits,
		QueueLen: s.Qlen, BacklogBytes: s.Backlog}
}

// netemObject is the full netem configuration for s: every nested option
// is set, zeros included, since the kernel keeps the old value of any it
// is not sent. The distribution table (8 KiB) goes only with jitter: without
// jitter the kernel does not use it, and whatever table it keeps is
// replaced by the next spec with jitter.
func netemObject(ifindex uint32, s shaping.Spec) *tc.Object {
	if s.Limit == 0 {
		s.Limit = shaping.DefaultLimit(s)
	}
	gap := s.Gap
	if s.Reorder > 0 && gap == 0 {
		gap = 1
	}
	rateBytes := s.RateBps / 8
	rate32 := uint32(min(rateBytes, math.MaxUint32)) // ~0 means "see RATE64"
	var ecn uint32
	if s.ECN {
		ecn = 1
	}
	latency, jitter := int64(s.Delay), int64(s.Jitter)
	var table *[]int16
	if s.Jitter > 0 {
		t := distTable(s.Distribution)
		table = &t
	}
	return &tc.Object{
		Msg: tc.Msg{Family: syscall.AF_UNSPEC, Ifindex: ifindex, Handle: Handle, Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "netem", Netem: &tc.Netem{
			Qopt: tc.NetemQopt{
				// Kernels before 4.15 only read the u32 tick fields.
				Latency:   ticks(s.Delay),
				Jitter:    ticks(s.Jitter),
				Limit:     s.Limit,
				Loss:      probability(s.Loss),
				Gap:       gap,
				Duplicate: probability(s.Duplicate),
			},
			Corr: &tc.NetemCorr{
				Delay: probability(s.DelayCorrelation),
				Loss:  probability(s.LossCorrelation),
				Dup:   probability(s.DuplicateCorrelation),
			},
			Reorder:   &tc.NetemReorder{Probability: probability(s.Reorder), Correlation: probability(s.ReorderCorrelation)},
			Corrupt:   &tc.NetemCorrupt{Probability: probability(s.Corrupt), Correlation: probability(s.CorruptCorrelation)},
			Rate:      &tc.NetemRate{Rate: rate32},
			Rate64:    &rateBytes,
			Ecn:       &ecn,
			Latency64: &latency,
			Jitter64:  &jitter,
			Slot:      &tc.NetemSlot{}, // all zero: no slotting
			DelayDist: table,
		}},
	}
}

// decode is the Spec a kernel netem reports. It prefers the 64-bit
// attributes, which kernels since 4.15 always send.
func decode(n *tc.Netem) shaping.Spec {
	s := shaping.Spec{
		Limit:     n.Qopt.Limit,
		Loss:      percent(n.Qopt.Loss),
		Gap:       n.Qopt.Gap,
		Duplicate: percent(n.Qopt.Duplicate),
	}
	if n.Latency64 != nil {
		s.Delay = time.Duration(*n.Latency64)
	} else {
		s.Delay = tickDuration(n.Qopt.Latency)
	}
	if n.Jitter64 != nil {
		s.Jitter = time.Duration(*n.Jitter64)
	} else {
		s.Jitter = tickDuration(n.Qopt.Jitter)
	}
	if c := n.Corr; c != nil {
		s.DelayCorrelation, s.LossCorrelation, s.DuplicateCorrelation = percent(c.Delay), percent(c.Loss), percent(c.Dup)
	}
	if r := n.Reorder; r != nil {
		s.Reorder, s.ReorderCorrelation = percent(r.Probability), percent(r.Correlation)
	}
	if c := n.Corrupt; c != nil {
		s.Corrupt, s.CorruptCorrelation = percent(c.Probability), percent(c.Correlation)
	}
	if n.Rate != nil {
		s.RateBps = uint64(n.Rate.Rate) * 8
	}
	if n.Rate64 != nil {
		s.RateBps = *n.Rate64 * 8
	}
	if n.Ecn != nil {
		s.ECN = *n.Ecn != 0
	}
	return s
}

// ticks converts d to psched ticks for the legacy u32 fields, saturating.
func ticks(d time.Duration) uint32 {
	us := d.Microseconds()
	if float64(us)*core.GetTickInUSec() >= math.MaxUint32 {
		return math.MaxUint32
	}
	return core.Time2Tick(uint32(us))
}

func tickDuration(t uint32) time.Duration {
	return time.Duration(core.Tick2Time(t)) * time.Microsecond
}

// isUnknownKind tells the kernel's answer to a qdisc kind it has no module
// for: ENOENT with "Specified qdisc kind is unknown" (some paths EINVAL).
func isUnknownKind(err error) bool {
	var op *mnl.OpError
	if !errors.As(err, &op) {
		return false
	}
	if op.Message != "" {
		return strings.Contains(op.Message, "qdisc kind is unknown")
	}
	return errors.Is(op.Err, syscall.ENOENT)
}

func formatHandle(h uint32) string {
	maj, min := core.SplitHandle(h)
	if min == 0 {
		return fmt.Sprintf("%x:", maj)
	}
	return fmt.Sprintf("%x:%x", maj, min)
}
