package podlinkstest

import (
	"syscall"
	"testing"
	"time"
)

// CPU starts measuring the process's CPU time (user+system); the function
// it returns reports it per op as cpu-ms/op beside the wall time. This
// machine's cores are shared: the CPU time tells what an op costs when the
// wall time is stretched by other work.
func CPU(b *testing.B) (report func()) {
	b.Helper()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/1e6/float64(b.N), "cpu-ms/op")
	}
}
