// Package proccpu reads how much processor time processes have used, from
// /proc: what a benchmark reports beside its wall times, which on a shared
// machine move with the machine's load.
package proccpu

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Usage is processor time (user and system, every thread) by program.
type Usage map[string]time.Duration

// Of is the processor time process pid has used so far.
func Of(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return seconds(st.CPUTime()), nil
}

// Children is the processor time of this process's children by command
// name, for the names given: children of one name are summed.
func Children(names ...string) (Usage, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	u := Usage{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PPID != os.Getpid() || !slices.Contains(names, st.Comm) {
			continue // gone since the listing, or not asked for
		}
		u[st.Comm] += seconds(st.CPUTime())
	}
	return u, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Sub is the processor time used between before and u. A program that
// restarted in between counts from its start.
func (u Usage) Sub(before Usage) Usage {
	d := Usage{}
	for name, t := range u {
		if b := before[name]; b <= t {
			t -= b
		}
		d[name] = t
	}
	return d
}

// Sum is the processor time of every program whose name starts with prefix.
func (u Usage) Sum(prefix string) time.Duration {
	var t time.Duration
	for name, d := range u {
		if strings.HasPrefix(name, prefix) {
			t += d
		}
	}
	return t
}

// String lists the programs by name, in seconds: "etcd 0.31s, kube-apiserver 2.05s".
func (u Usage) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(u)) {
		parts = append(parts, fmt.Sprintf("%s %.2fs", name, u[name].Seconds()))
	}
	return strings.Join(parts, ", ")
}
