//go:build kernel

package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-controller/controller"
)

// newWidePair wires two pods on two nodes joined by n VXLAN links: p0 on
// node-0 and p1 on node-1, the r1 and r2.
func newWidePair(t testing.TB, n int) *mesh {
	t.Helper()
	specs := make([][]v1beta1.Link, 2)
	for uid := 1; uid <= n; uid++ {
		intf := fmt.Sprintf("e%d", uid)
		specs[0] = append(specs[0], link(uid, meshPodName(1), intf, intf, meshIP(uid, 1), meshIP(uid, 2)))
		specs[1] = append(specs[1], link(uid, meshPodName(0), intf, intf, meshIP(uid, 2), meshIP(uid, 1)))
	}
	return wireMesh(t, 2, specs)
}

// BenchmarkKernelEditLinks measures one Topology edit that takes every
// link of a pod down (or back up, on odd iterations), its n links all
// VXLAN to one pod on another node: from the edit until both ends of every
// link are changed in the kernel (kernel-s) and until both pods' statuses
// say so (status-s), with the time the API server took to accept the edit
// (edit-s), and with the meshnetds' processor time per link change,
// both ends together (meshnetd-cpu-ms/link), and the controller's and the
// API server's. The API requests of each edit are logged. The status is
// waited for by a watch, which the API server counts too.
func BenchmarkKernelEditLinks(b *testing.B) {
	for _, n := range []int{64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			m := newWidePair(b, n)
			var edits, kernel, status, meshnetd, ctrl, apiserver []time.Duration
			for b.Loop() {
				s := v1beta1.LinkDown
				if len(kernel)%2 == 1 {
					s = v1beta1.LinkUp
				}
				c := m.batch(b, s, 5*time.Minute, meshPodName(0))
				b.Logf("edit %d (%s): accepted %v, kernel %v, status %v; cpu: %v; requests: %v", len(kernel), s,
					c.edits.Round(time.Millisecond), c.kernel.Round(time.Millisecond), c.status.Round(time.Millisecond), c.cpu, c.requests)
				edits, kernel, status = append(edits, c.edits), append(kernel, c.kernel), append(status, c.status)
				meshnetd = append(meshnetd, c.cpu.Sum("meshnetd/"))
				ctrl = append(ctrl, c.cpu.Sum("controller"))
				apiserver = append(apiserver, c.cpu.Sum("kube-apiserver"))
			}
			b.ReportMetric(controller.MedianSeconds(edits), "edit-s")
			b.ReportMetric(controller.MedianSeconds(kernel), "kernel-s")
			b.ReportMetric(controller.MedianSeconds(status), "status-s")
			b.ReportMetric(controller.MedianSeconds(meshnetd)*1000/float64(n), "meshnetd-cpu-ms/link")
			b.ReportMetric(controller.MedianSeconds(ctrl), "controller-cpu-s")
			b.ReportMetric(controller.MedianSeconds(apiserver), "apiserver-cpu-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
