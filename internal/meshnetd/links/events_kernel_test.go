//go:build kernel

package links

import (
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelEventsWakeOnWhatAReadShows: in a namespace with a veth pair
// up, a fe80:: address and a connected route of the kernel's protocol do not
// end a Wait; an address, a route of ip route's and a link going down each
// do.
func TestKernelEventsWakeOnWhatAReadShows(t *testing.T) {
	path := netnstest.New(t)
	// No fe80:: of the kernel's own, whose duplicate address detection
	// would report on its own time.
	netnstest.IP(t, path, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	for _, dev := range []string{"d0", "d1"} {
		if out, err := netnstest.Run(path, "sysctl", "-qw", "net.ipv6.conf."+dev+".addr_gen_mode=1"); err != nil {
			t.Fatalf("sysctl: %v: %s", err, out)
		}
		netnstest.IP(t, path, "link", "set", dev, "up")
	}
	ns, err := OpenNetns(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ev, err := ns.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 16)
	go func() {
		for {
			err := ev.Wait()
			woke <- err
			if err != nil {
				return
			}
		}
	}()
	defer ev.Close()
	quiet := func(within time.Duration) bool {
		select {
		case <-woke:
			return false
		case <-time.After(within):
			return true
		}
	}
	// What bringing d0 up reports late (its oper state) passes first.
	for !quiet(500 * time.Millisecond) {
	}
	for _, c := range []struct {
		name  string
		ip    []string
		wakes bool
	}{
		{"fe80:: address", []string{"addr", "add", "fe80::1234/64", "dev", "d0", "nodad"}, false},
		{"connected route of the kernel's", []string{"route", "add", "10.97.0.0/24", "dev", "d0", "proto", "kernel"}, false},
		{"address", []string{"addr", "add", "10.9.0.1/24", "dev", "d0"}, true},
		{"ip route's route", []string{"route", "add", "10.98.0.0/24", "dev", "d0"}, true},
		{"link down", []string{"link", "set", "d0", "down"}, true},
	} {
		netnstest.IP(t, path, c.ip...)
		if c.wakes {
			select {
			case err := <-woke:
				if err != nil {
					t.Fatalf("%s: Wait: %v", c.name, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: Wait did not return within 5s", c.name)
			}
			// The rest of the change's notifications (an address brings
			// its routes) pass before the next case.
			for !quiet(300 * time.Millisecond) {
			}
		} else if !quiet(500 * time.Millisecond) {
			t.Errorf("%s: Wait returned; no read would show it", c.name)
		}
	}
}
