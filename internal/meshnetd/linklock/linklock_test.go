package linklock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLockSerialisesOneKey(t *testing.T) {
	var l Locks
	k := Key{"lab", "r1", "eth1"}
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			defer l.Lock(k)()
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
		})
	}
	wg.Wait()
	if got := maxInside.Load(); got != 1 {
		t.Fatalf("%d holders at once, want 1", got)
	}
	if n := l.held(); n != 0 {
		t.Fatalf("%d mutexes left after every unlock, want 0", n)
	}
}

func TestLockOtherKeysIndependent(t *testing.T) {
	var l Locks
	unlock := l.Lock(Key{"lab", "r1", "eth1"})
	defer unlock()
	done := make(chan struct{})
	go func() {
		l.Lock(Key{"lab", "r1", "eth2"})()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("a lock on another interface waited for eth1's")
	}
}

// TestLockOverlappingSetsNoDeadlock locks the same two keys in opposite
// orders from many goroutines; the global order makes that safe.
func TestLockOverlappingSetsNoDeadlock(t *testing.T) {
	var l Locks
	a, b := Key{"lab", "r1", "eth1"}, Key{"lab", "r2", "eth1"}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if i%2 == 0 {
				l.Lock(a, b, a)()
			} else {
				l.Lock(b, a)()
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock locking overlapping key sets")
	}
}

func TestUnlockTwiceIsSafe(t *testing.T) {
	var l Locks
	unlock := l.Lock(Key{"lab", "r1", "eth1"})
	unlock()
	unlock()
	l.Lock(Key{"lab", "r1", "eth1"})()
}
