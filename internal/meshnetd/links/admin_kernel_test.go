//go:build kernel

package links

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// BenchmarkKernelAdminChangeWideNetns takes every end of a namespace of n
// VXLAN interfaces, each with an address, down in one SetAdminDown (even
// iterations) or up in one SetAdminUp (odd ones) and reads the namespace
// back once with ReadAll: the kernel work of one end of an edit of n links,
// what meshnetd cannot do with less. cpu-ms/end is this process's
// processor time (user and system) per end changed, down-cpu-ms/end and
// up-cpu-ms/end that of each direction; meshnetd's meshnetd-cpu-ms/link in
// BenchmarkKernelEditLinks counts two ends.
func BenchmarkKernelAdminChangeWideNetns(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		b.Run(fmt.Sprintf("ends=%d", n), func(b *testing.B) {
			ns, err := OpenNetns(netnstest.New(b))
			if err != nil {
				b.Fatal(err)
			}
			defer ns.Close()
			var cmds, names []string
			for i := range n {
				name := fmt.Sprintf("vx%d", i)
				names = append(names, name)
				cmds = append(cmds,
					fmt.Sprintf("link add %s type vxlan id %d remote 10.255.%d.%d dstport 4789", name, i+1, i/250, i%250+1),
					fmt.Sprintf("addr add 10.%d.%d.1/30 dev %s", 64+i/64, i%64*4, name),
					fmt.Sprintf("link set %s up", name))
			}
			ipBatch(b, ns, cmds...)
			known, err := ReadAll(ns)
			if err != nil {
				b.Fatal(err)
			}
			saved := map[string]Saved{}
			pid := os.Getpid()
			var spent [2]time.Duration // down, up
			i := 0
			for b.Loop() {
				up := i%2 == 1
				cpu0, err := proccpu.Of(pid)
				if err != nil {
					b.Fatal(err)
				}
				var r AdminResult
				if up {
					r = SetAdminUp(ns, known, saved)
				} else {
					r = SetAdminDown(ns, known, names...)
					saved = r.Saved
				}
				if err := r.Err(); err != nil {
					b.Fatal(err)
				}
				if known, err = ReadAll(ns); err != nil {
					b.Fatal(err)
				}
				cpu1, err := proccpu.Of(pid)
				if err != nil {
					b.Fatal(err)
				}
				spent[i%2] += cpu1 - cpu0
				if bad := slices.IndexFunc(names, func(name string) bool { return known[name].AdminUp != up }); bad >= 0 {
					b.Fatalf("%s after the change: %+v", names[bad], known[names[bad]].Reading)
				}
				i++
			}
			perEnd := func(d time.Duration, changes int) float64 {
				return float64(d) / float64(time.Millisecond) / float64(max(changes, 1)*n)
			}
			b.ReportMetric(perEnd(spent[0]+spent[1], i), "cpu-ms/end")
			b.ReportMetric(perEnd(spent[0], (i+1)/2), "down-cpu-ms/end")
			b.ReportMetric(perEnd(spent[1], i/2), "up-cpu-ms/end")
		})
	}
}
