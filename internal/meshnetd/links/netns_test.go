package links

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestIsTransient classifies errors wrapped as this package wraps them,
// so that a caller's errors.Is finds the kernel's answer under the context.
func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("list links in netns /run/netns/x: %w", netlink.ErrDumpInterrupted), true},
		{fmt.Errorf("read interfaces: %w", fmt.Errorf("dump failed 40 times in 2s: %w", netlink.ErrDumpInterrupted)), true},
		{fmt.Errorf("list qdiscs in netns /run/netns/x: %w", unix.EBUSY), true},
		{fmt.Errorf("list addresses in netns /run/netns/x: %w", unix.EAGAIN), true},
		{fmt.Errorf("add veth eth1: %w", unix.EINVAL), false},
		{fmt.Errorf("open netns /run/netns/x: %w", unix.ENOENT), false},
		{fmt.Errorf("list links: %v", netlink.ErrDumpInterrupted), false}, // not wrapped: the kernel's answer is lost
		{nil, false},
	} {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRetryDump retries a dump while the kernel interrupts it or is busy,
// and not when it refuses the request.
func TestRetryDump(t *testing.T) {
	var ns Netns
	answers := []error{netlink.ErrDumpInterrupted, unix.EBUSY, unix.EAGAIN, nil}
	tries := 0
	got, err := retryDump(&ns, func() ([]int, error) {
		tries++
		return []int{tries}, answers[tries-1]
	})
	if err != nil || tries != 4 || len(got) != 1 || got[0] != 4 || ns.dumpRetries.Load() != 3 {
		t.Errorf("retryDump: %v, %v after %d tries, %d retries; want the 4th try's result, no error, 3 retries", got, err, tries, ns.dumpRetries.Load())
	}

	tries = 0
	_, err = retryDump(&ns, func() ([]int, error) { tries++; return nil, unix.EINVAL })
	if !errors.Is(err, unix.EINVAL) || tries != 1 {
		t.Errorf("retryDump of a refused request: %v after %d tries, want EINVAL after 1", err, tries)
	}
}

// TestRetryDumpGivesUpAfterItsBudget: a dump interrupted every time is
// given up after dumpBudget, with an error that is still transient.
func TestRetryDumpGivesUpAfterItsBudget(t *testing.T) {
	t.Parallel()
	var ns Netns
	start := time.Now()
	_, err := retryDump(&ns, func() ([]int, error) { return nil, netlink.ErrDumpInterrupted })
	took := time.Since(start)
	if !IsTransient(err) || !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Errorf("error after the budget: %v, want a transient netlink.ErrDumpInterrupted", err)
	}
	if took < dumpBudget-dumpBackoffMax || took > dumpBudget+time.Second {
		t.Errorf("gave up after %v, want about %v", took, dumpBudget)
	}
	if n := ns.dumpRetries.Load(); n < 20 { // doubling without a cap: 10
		t.Errorf("%d retries in %v, want the backoff capped at %v", n, took, dumpBackoffMax)
	}
	t.Logf("%v after %v, %d retries", err, took.Round(time.Millisecond), ns.dumpRetries.Load())
}
