package links

import (
	"fmt"
	"net/netip"
)

// Reading is an interface as the kernel reports it.
type Reading struct {
	Kind      string // "veth", "vxlan", "macvlan", ...
	AdminUp   bool   // IFF_UP: what SetAdminUp/SetAdminDown set
	Carrier   bool   // IFF_LOWER_UP: a veth loses it when either end is down
	OperState string // RFC 2863 state: "up", "down", "lowerlayerdown", ...
	MTU       int
	Addrs     []netip.Prefix
	Counters  Counters
	// Master is the bridge (or other master device) the interface is a
	// port of, empty when none; MasterIndex is its index in the namespace.
	Master      string
	MasterIndex int
}

// Counters are an interface's packet counters since it was made.
type Counters struct {
	RxBytes, TxBytes     uint64
	RxPackets, TxPackets uint64
	RxDropped, TxDropped uint64
	RxErrors, TxErrors   uint64
	// CarrierChanges counts the times the interface gained or lost
	// carrier (IFLA_CARRIER_CHANGES).
	CarrierChanges uint64
}

// ReadLink reads interface name in ns, as Read does but for its qdisc, and
// fails when ns has no such interface: the read-back of each link a wiring
// makes, which must cost the same in a pod of 4,096 interfaces as in one of
// two (a qdisc dump there was one more pass over the pod per link).
func ReadLink(ns *Netns, name string) (Reading, error) {
	i, ok, err := read(ns, name, false)
	if err != nil {
		return Reading{}, err
	}
	if !ok {
		return Reading{}, fmt.Errorf("read interfaces: no interface %s in netns %s", name, ns.path)
	}
	return i.Reading, nil
}
