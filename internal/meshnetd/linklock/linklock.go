// Package linklock serialises work on one link end of a pod: the kernel and
// internal/meshnetd/links expect no two changes of the same interface at once, and
// CNI ADD/DEL, runtime calls and peer calls all reach the same interfaces.
// Every part of meshnetd that changes a link takes its lock from one shared
// Locks.
package linklock

import (
	"cmp"
	"slices"
	"sync"
)

// Key names a link end: an interface in a pod. A Key with an empty Interface
// stands for the pod as a whole (its routes), and is taken alongside the
// link keys a change touches, never instead of them.
type Key struct {
	Namespace, Pod, Interface string
}

func (k Key) String() string { return k.Namespace + "/" + k.Pod + ":" + k.Interface }

func compare(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Interface, b.Interface))
}

// Locks holds one mutex per key in use; a key's mutex is dropped when
// nobody holds or waits for it. The zero value is ready to use.
type Locks struct {
	mu    sync.Mutex
	locks map[Key]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

// Lock locks the given keys, in one global order so that two callers locking
// overlapping sets never deadlock, and returns the function that unlocks
// them. Duplicate keys are locked once.
func (l *Locks) Lock(keys ...Key) (unlock func()) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, compare)
	keys = slices.Compact(keys)
	entries := make([]*entry, len(keys))
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[Key]*entry{}
	}
	for i, k := range keys {
		e := l.locks[k]
		if e == nil {
			e = &entry{}
			l.locks[k] = e
		}
		e.refs++
		entries[i] = e
	}
	l.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for i := len(entries) - 1; i >= 0; i-- {
				entries[i].mu.Unlock()
			}
			l.mu.Lock()
			for i, k := range keys {
				if entries[i].refs--; entries[i].refs == 0 {
					delete(l.locks, k)
				}
			}
			l.mu.Unlock()
		})
	}
}

// held reports how many keys have a mutex, for tests.
func (l *Locks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
