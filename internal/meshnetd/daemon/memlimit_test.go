package daemon

import (
	"io"
	"log/slog"
	"testing"
)

func TestGoLimitLeavesTheKernelItsShare(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		container, kernel, want int64
	}{
		{1024 * mi, 0, 1024 * mi / 10 * 9},
		{1024 * mi, 403 * mi, 1024*mi/10*9 - 403*mi},
		// The kernel's share near the container's limit: the floor, not a
		// limit the collector could never meet.
		{512 * mi, 500 * mi, minGoLimit},
	} {
		if got := goLimit(c.container, c.kernel); got != c.want {
			t.Errorf("goLimit(%d MiB, kernel %d MiB) = %d, want %d", c.container/mi, c.kernel/mi, got, c.want)
		}
	}
}

func TestMemLimiterFollowsTheKernel(t *testing.T) {
	kernel := int64(0)
	var set []int64
	m := &memLimiter{containerLimit: 1000 << 20, kernel: func() (int64, error) { return kernel, nil },
		set: func(l int64) int64 { set = append(set, l); return l }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	m.update()
	kernel = 400 << 20
	m.update()
	if len(set) != 2 || set[0] != 900<<20 || set[1] != 500<<20 {
		t.Errorf("limits set %v, want 900 MiB then 500 MiB as the kernel took 400 MiB", set)
	}
}

func TestCgroupPaths(t *testing.T) {
	v1 := "12:memory:/k8s.io/abc\n4:cpu,cpuacct:/k8s.io/abc\n0::/k8s.io/abc\n"
	if v2, mem := cgroupPaths([]byte(v1)); v2 != "/k8s.io/abc" || mem != "/k8s.io/abc" {
		t.Errorf("cgroupPaths(v1 and v2 lines) = %q, %q", v2, mem)
	}
	if v2, mem := cgroupPaths([]byte("0::/\n")); v2 != "/" || mem != "" {
		t.Errorf("cgroupPaths(v2 only) = %q, %q", v2, mem)
	}
}

func TestKernelOfStat(t *testing.T) {
	// Linux 6.1 on: one kernel line.
	if k, err := kernelOfStat([]byte("anon 1000\nfile 20\nkernel 4096\nkernel_stack 16\nslab 3000\n")); err != nil || k != 4096 {
		t.Errorf("kernelOfStat(with kernel) = %d, %v, want 4096", k, err)
	}
	// Earlier kernels: its parts.
	if k, err := kernelOfStat([]byte("anon 1000\nkernel_stack 16\npagetables 8\npercpu 4\nsock 2\nslab 3000\n")); err != nil || k != 3030 {
		t.Errorf("kernelOfStat(parts) = %d, %v, want 3030", k, err)
	}
	if _, err := kernelOfStat([]byte("anon 1000\n")); err == nil {
		t.Error("kernelOfStat(no kernel memory) succeeded")
	}
}
