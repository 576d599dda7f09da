// Command vxlansend sends one VXLAN datagram to a node's VXLAN port, as any
// process that reaches the port can: no capability, an ordinary UDP socket.
// The frame inside is an ARP request from -sender (MAC -mac) for -target,
// so a receiving link learns the sender: the node tier's proof of who can
// write into a link runs it in pods of another namespace, and as the far
// end's node.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
)

func main() {
	to := flag.String("to", "", "the node's address and VXLAN port (10.0.0.1:4789)")
	vni := flag.Uint("vni", 0, "the link's VNI")
	sender := flag.String("sender", "", "the ARP sender's IPv4 address")
	target := flag.String("target", "", "the IPv4 address asked for")
	mac := flag.String("mac", "02:00:00:00:0b:ad", "the ARP sender's MAC")
	sport := flag.Uint("sport", 0, "the UDP source port; 0 lets the kernel choose")
	flag.Parse()
	if err := send(*to, uint32(*vni), *sender, *target, *mac, uint16(*sport)); err != nil {
		fmt.Fprintln(os.Stderr, "vxlansend:", err)
		os.Exit(1)
	}
}

func send(to string, vni uint32, sender, target, mac string, sport uint16) error {
	dst, err := netip.ParseAddrPort(to)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	spa, err := netip.ParseAddr(sender)
	if err != nil || !spa.Is4() {
		return fmt.Errorf("-sender %q: want an IPv4 address", sender)
	}
	tpa, err := netip.ParseAddr(target)
	if err != nil || !tpa.Is4() {
		return fmt.Errorf("-target %q: want an IPv4 address", target)
	}
	sha, err := net.ParseMAC(mac)
	if err != nil || len(sha) != 6 {
		return fmt.Errorf("-mac %q: want a 6-byte MAC", mac)
	}
	if vni == 0 || vni >= 1<<24 {
		return fmt.Errorf("-vni %d: want 1..%d", vni, 1<<24-1)
	}
	pkt := make([]byte, 8)
	pkt[0] = 0x08 // I: the VNI is valid
	binary.BigEndian.PutUint32(pkt[4:], vni<<8)
	pkt = append(pkt, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // Ethernet: broadcast
	pkt = append(pkt, sha...)
	pkt = append(pkt, 0x08, 0x06)                   // ARP
	pkt = append(pkt, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet/IPv4, request
	pkt = append(pkt, sha...)
	pkt = append(pkt, spa.AsSlice()...)
	pkt = append(pkt, 0, 0, 0, 0, 0, 0)
	pkt = append(pkt, tpa.AsSlice()...)
	var local *net.UDPAddr
	if sport != 0 {
		local = &net.UDPAddr{Port: int(sport)}
	}
	c, err := net.DialUDP("udp", local, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(pkt); err != nil {
		return fmt.Errorf("send to %s: %w", dst, err)
	}
	return nil
}
