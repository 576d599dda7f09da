package lab

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// Physical is a device outside the cluster on the node network: a
// namespace standing in for a router with a VXLAN VTEP.
type Physical struct {
	lab   *Lab
	Name  string
	Netns string
	IP    netip.Addr
	NIC   string
}

// AddPhysical puts a physical device on the node network at ip (the next
// free address when ip is invalid).
func (l *Lab) AddPhysical(name string, ip netip.Addr) (*Physical, error) {
	ip, seq, err := l.allocate(ip)
	if err != nil {
		return nil, fmt.Errorf("physical device %s: %w", name, err)
	}
	p := &Physical{lab: l, Name: name, IP: ip, NIC: "eth0"}
	if p.Netns, err = l.netns("phy-" + name); err != nil {
		return nil, err
	}
	if err := l.plug(p.Netns, p.NIC, ip, seq); err != nil {
		return nil, fmt.Errorf("physical device %s: %w", name, err)
	}
	return p, nil
}

// Configure does what the operator does on a physical router from what a
// Topology's status shows: a VXLAN interface ifname towards the pod's node
// with the VNI and UDP port given, holding address (CIDR) when not empty.
func (p *Physical) Configure(peer v1beta1.PhysicalPeer, ifname, address string) error {
	steps := [][]string{
		{"ip", "link", "add", ifname, "type", "vxlan", "id", strconv.Itoa(int(peer.VNI)),
			"remote", peer.LocalVTEP, "local", p.IP.String(), "dstport", strconv.Itoa(int(peer.UDPPort)), "dev", p.NIC},
		{"ip", "link", "set", ifname, "up"},
	}
	if address != "" {
		steps = append(steps, []string{"ip", "addr", "add", address, "dev", ifname})
	}
	for _, s := range steps {
		if err := run(p.Netns, s[0], s[1:]...); err != nil {
			return fmt.Errorf("configure physical device %s: %w", p.Name, err)
		}
	}
	return nil
}

// Run runs a command in the device's namespace and returns its output.
func (p *Physical) Run(name string, args ...string) (string, error) {
	return output(p.Netns, name, args...)
}
