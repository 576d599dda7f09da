//go:build kernel

package links

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelReadAllUnderChurn reads a namespace of 512 veth ends with
// ReadAll and Names, back to back, while another socket wires it as
// ApplyPod wires a wide pod: bursts of links added one by one, each burst
// longer than the dumps' retries used to last, then taken down at once,
// then a lull. Every change interrupts the dumps under way; the reads retry
// them until they complete, and never fail nor miss an interface that
// stayed. The retries are counted: without any, the churn interrupted no
// dump and the test would prove nothing.
func TestKernelReadAllUnderChurn(t *testing.T) {
	const (
		ends     = 512
		maxReads = 5000
	)
	ns := vethNetns(t, ends)
	churner, err := OpenNetns(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer churner.Close()

	var (
		bursts   []time.Duration
		churnErr error
	)
	stop, churned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(churned)
		bursts, churnErr = churn(churner, stop)
	}()
	defer func() {
		close(stop)
		<-churned
		if churnErr != nil {
			t.Error(churnErr)
		}
	}()

	var (
		reads          int
		total, slowest time.Duration
	)
	start := time.Now()
loop:
	for ; reads < maxReads; reads++ {
		select {
		case <-churned:
			break loop
		default:
		}
		t0 := time.Now()
		names := map[string]bool{}
		if reads%2 == 0 {
			all, err := ReadAll(ns)
			if err != nil {
				t.Fatalf("ReadAll %d under churn, after %v (%d dumps retried so far): %v", reads, time.Since(t0), ns.dumpRetries.Load(), err)
			}
			for name := range all {
				names[name] = true
			}
		} else if names, err = Names(ns); err != nil {
			t.Fatalf("Names %d under churn, after %v (%d dumps retried so far): %v", reads, time.Since(t0), ns.dumpRetries.Load(), err)
		}
		d := time.Since(t0)
		total, slowest = total+d, max(slowest, d)
		for i := range ends {
			if name := fmt.Sprintf("d%d", i); !names[name] {
				t.Fatalf("read %d under churn: no %s among %d interfaces", reads, name, len(names))
			}
		}
	}
	<-churned // bursts is set
	retries := ns.dumpRetries.Load()
	t.Logf("%d reads in %v under %d bursts of churn lasting %v, %d dumps retried; a read took %v on average, %v at most",
		reads, time.Since(start).Round(time.Millisecond), len(bursts), bursts, retries,
		(total / time.Duration(max(reads, 1))).Round(time.Microsecond), slowest.Round(time.Microsecond))
	if reads == 0 {
		t.Fatal("no read under churn")
	}
	if retries == 0 {
		t.Fatalf("no dump retried in %d reads under churn: the churn interrupted none, so this proves nothing", reads)
	}
}

// churn wires ns in bursts, as ApplyPod wires a wide pod, until stop is
// closed, churnBursts bursts are done (about 2.5 s) or churnFor has passed
// on a slow host, and returns how long each burst lasted. A burst adds
// churnPairs veth pairs one by one: a change about every millisecond, each
// of which interrupts the dumps under way, for twice as long as the 8 tries
// over 127 ms that dumps used to get. It then deletes them all at once
// (their device group: one change) and lets churnLull pass.
func churn(ns *Netns, stop <-chan struct{}) ([]time.Duration, error) {
	const (
		churnBursts = 3
		churnPairs  = 600
		churnGroup  = 7
		churnLull   = 150 * time.Millisecond
		churnFor    = 8 * time.Second
	)
	var bursts []time.Duration
	deadline := time.Now().Add(churnFor)
	for b := range churnBursts {
		start := time.Now()
		for i := range churnPairs {
			select {
			case <-stop:
				return bursts, nil
			default:
			}
			if time.Now().After(deadline) {
				return bursts, nil
			}
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("c%da", i), Group: churnGroup}, PeerName: fmt.Sprintf("c%db", i)}
			if err := ns.h.LinkAdd(v); err != nil {
				return bursts, fmt.Errorf("churn burst %d: add veth %s: %w", b, v.Name, err)
			}
		}
		bursts = append(bursts, time.Since(start).Round(time.Millisecond))
		if out, err := netnstest.Run(ns.Path(), "ip", "link", "delete", "group", strconv.Itoa(churnGroup)); err != nil {
			return bursts, fmt.Errorf("churn burst %d: delete group %d: %v: %s", b, churnGroup, err, out)
		}
		select {
		case <-stop:
			return bursts, nil
		case <-time.After(churnLull):
		}
	}
	return bursts, nil
}
