package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// The kernel charges what it allocates for a process to the process's
// memory cgroup, and kills on the sum: for meshnetd that includes every
// interface it makes for the node's pods (measured on this project's real
// nodes: 12,413 veth ends held 403 MB of kernel memory, about 32 KiB each,
// while meshnetd's own resident memory was 95 MB). A Go memory limit set
// from the container's limit alone lets the heap grow into memory the
// kernel already holds, and the container is OOM-killed with a small heap.
// So the Go limit is kept at 90% of the container's limit less the kernel
// memory charged to it, read again every memLimitPeriod.

// memLimitPeriod is how often the kernel's share is read again: a pod's
// wiring makes about 600 interfaces a second here, about 20 MB of kernel
// memory.
const memLimitPeriod = 2 * time.Second

// minGoLimit is the least Go limit meshnetd sets: below it the collector
// would run without end for nothing, as the kernel's share alone is near
// the container's limit.
const minGoLimit = 64 << 20

// memLimiter keeps the Go memory limit under the container's limit less
// the kernel memory charged to the container.
type memLimiter struct {
	containerLimit int64
	kernel         func() (int64, error) // the kernel memory charged to the container
	set            func(int64) int64     // debug.SetMemoryLimit
	log            *slog.Logger
	last           int64 // the Go limit last set
}

// goLimit is the Go memory limit for a container limit and the kernel
// memory charged to it.
func goLimit(containerLimit, kernel int64) int64 {
	return max(containerLimit/10*9-kernel, minGoLimit)
}

// update sets the Go limit from the kernel's share now, logging a change
// of more than a tenth.
func (m *memLimiter) update() {
	kernel, err := m.kernel()
	if err != nil {
		kernel = 0 // not readable here: the container's limit alone
	}
	limit := goLimit(m.containerLimit, kernel)
	m.set(limit)
	if d := limit - m.last; d > m.last/10 || -d > m.last/10 {
		m.log.Info("Go memory limit set from the container's, less the kernel memory charged to it",
			"container_limit_bytes", m.containerLimit, "kernel_bytes", kernel, "go_limit_bytes", limit, "kernel_error", err)
		m.last = limit
	}
}

// run updates the limit every memLimitPeriod until ctx ends.
func (m *memLimiter) run(ctx context.Context) {
	t := time.NewTicker(memLimitPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.update()
		}
	}
}

// startMemLimiter sets the Go memory limit from containerLimit and keeps
// it there, unless GOMEMLIMIT was given.
func startMemLimiter(ctx context.Context, containerLimit int64, log *slog.Logger) {
	if containerLimit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	m := &memLimiter{containerLimit: containerLimit, kernel: cgroupKernelMemory, set: debug.SetMemoryLimit, log: log}
	m.update()
	go m.run(ctx)
}

// cgroupRoot is where a container sees its cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupKernelMemory reads the kernel memory charged to this process's
// memory cgroup.
func cgroupKernelMemory() (int64, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, err
	}
	return kernelMemory(self, cgroupRoot)
}

// kernelMemory reads, under the cgroup mount root, the kernel memory
// charged to the memory cgroup that procSelfCgroup (a /proc/PID/cgroup)
// names: cgroup v2's memory.stat (its kernel line, or the sum of the kinds
// older kernels list), or cgroup v1's memory.kmem.usage_in_bytes. The
// cgroup's path is tried first, as a host shows it; then the root of the
// mount, where a container sees its own cgroup.
func kernelMemory(procSelfCgroup []byte, root string) (int64, error) {
	v2, v1 := cgroupPaths(procSelfCgroup)
	if v2 != "" {
		for _, dir := range []string{filepath.Join(root, v2), root} {
			if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err != nil {
				continue
			}
			if data, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
				return kernelOfStat(data)
			}
		}
	}
	for _, dir := range []string{filepath.Join(root, "memory", v1), filepath.Join(root, "memory")} {
		if data, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes")); err == nil {
			return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		}
	}
	return 0, errors.New("no memory cgroup statistics under " + root)
}

// cgroupPaths picks, from /proc/self/cgroup, the cgroup v2 path (the
// "0::" line) and the cgroup v1 memory controller's path.
func cgroupPaths(procSelfCgroup []byte) (v2, v1 string) {
	for _, line := range strings.Split(string(procSelfCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	return v2, v1
}

// kernelOfStat is the kernel memory of a cgroup v2 memory.stat: its
// "kernel" line (Linux 6.1 on), or else the kinds it is the sum of.
func kernelOfStat(stat []byte) (int64, error) {
	fields := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memory.stat %s: %w", k, err)
		}
		fields[k] = n
	}
	if k, ok := fields["kernel"]; ok {
		return k, nil
	}
	var sum int64
	found := false
	for _, k := range []string{"kernel_stack", "pagetables", "percpu", "sock", "slab", "vmalloc"} {
		if v, ok := fields[k]; ok {
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, errors.New("memory.stat names no kernel memory")
	}
	return sum, nil
}
