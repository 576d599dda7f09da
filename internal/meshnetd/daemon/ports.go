package daemon

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// reservedPortsFile is the network namespace's list of ports that Linux
// never picks as the local port of an outgoing connection.
const reservedPortsFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"

// reservePorts adds the ports of addrs to the reserved ports of meshnetd's
// network namespace (the node's). meshnetd's ports, 51111 and 51112, lie
// in Linux's ephemeral range (32768-60999): any outgoing connection of the
// node, meshnetd's own to the API server made before it listens included,
// may take one as its local port, and meshnetd then fails with "address
// already in use". The reservation stays with the namespace across
// restarts.
func reservePorts(addrs ...string) error {
	var ports []int
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("address %q: %w", a, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("address %q: port %q: %w", a, p, err)
		}
		if n > 0 {
			ports = append(ports, n)
		}
	}
	data, err := os.ReadFile(reservedPortsFile)
	if err != nil {
		return err
	}
	list, changed := withPorts(strings.TrimSpace(string(data)), ports...)
	if !changed {
		return nil
	}
	if err := os.WriteFile(reservedPortsFile, []byte(list), 0o644); err != nil {
		return fmt.Errorf("reserve ports %v: %w", ports, err)
	}
	return nil
}

// withPorts adds ports to a list of ports and ranges in the kernel's
// format ("8080,51000-51010"), reporting whether any was missing.
func withPorts(list string, ports ...int) (string, bool) {
	var parts []string
	if list != "" {
		parts = strings.Split(list, ",")
	}
	changed := false
	for _, p := range ports {
		if !slices.ContainsFunc(parts, func(r string) bool { return inRange(r, p) }) {
			parts = append(parts, strconv.Itoa(p))
			changed = true
		}
	}
	return strings.Join(parts, ","), changed
}

func inRange(r string, p int) bool {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(r), "-")
	l, err := strconv.Atoi(lo)
	if err != nil {
		return false
	}
	h := l
	if isRange {
		if h, err = strconv.Atoi(hi); err != nil {
			return false
		}
	}
	return l <= p && p <= h
}
