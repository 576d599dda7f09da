package lab

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"
)

// hostNIC is the host's interface on the node network (Options.HostAccess).
const hostNIC = "meshnet-lab0"

// forwardAPI makes the API server reachable at 127.0.0.1:apiPort inside a
// node namespace, as it is from a real node: the listening socket is made
// in the node's namespace, each connection is relayed from the host's.
func (l *Lab) forwardAPI(nsPath string) error {
	u, err := url.Parse(l.ControlPlane.Config.Host)
	if err != nil || u.Host == "" {
		return fmt.Errorf("API server address %q: %v", l.ControlPlane.Config.Host, err)
	}
	var lis net.Listener
	err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		lis, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", apiPort))
		return err
	})
	if err != nil {
		return fmt.Errorf("listen for the API server in %s: %w", nsPath, err)
	}
	l.onClose(lis.Close)
	go relay(lis, u.Host)
	return nil
}

// relay copies every connection accepted on lis to and from target, until
// lis is closed.
func relay(lis net.Listener, target string) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// joinHost puts the host on the node network at HostIP.
func (l *Lab) joinHost() error {
	const fab = "fab0"
	steps := [][]string{
		{"ip", "link", "add", hostNIC, "type", "veth", "peer", "name", fab, "netns", filepath.Base(l.Fabric)},
		{"ip", "addr", "add", netip.PrefixFrom(HostIP, Subnet.Bits()).String(), "dev", hostNIC},
		{"ip", "link", "set", hostNIC, "up"},
	}
	for i, s := range steps {
		if err := runHost(s...); err != nil {
			return err
		}
		if i == 0 {
			l.onClose(func() error { return runHost("ip", "link", "delete", hostNIC) })
		}
	}
	return run(l.Fabric, "ip", "link", "set", fab, "master", "br0", "up")
}
