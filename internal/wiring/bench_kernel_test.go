//go:build kernel

package wiring_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/lab/labnet"
)

// BenchmarkKernelAdd measures CNI ADD of a pod with 1, 8 and 32 veth links
// to pods already wired on its node, as the runtime runs it (libcni, the
// loopback plugin, then meshnet-cni and meshnetd), DEL between runs. It
// reports the median and 99th percentile.
func BenchmarkKernelAdd(b *testing.B) {
	lab := labnet.New(b, bins)
	node := lab.AddNode("node-a", "eth0")
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			ns := fmt.Sprintf("bench-%d", n)
			lab.Namespace(ns)
			var center []v1beta1.Link
			var peers []*labnet.Pod
			for i := 1; i <= n; i++ {
				peer := fmt.Sprintf("p%d", i)
				center = append(center, link(i, peer, fmt.Sprintf("eth%d", i), "eth1", fmt.Sprintf("10.1.%d.1/30", i), ""))
				topology(b, lab, ns, peer, link(i, "hub", "eth1", fmt.Sprintf("eth%d", i), fmt.Sprintf("10.1.%d.2/30", i), ""))
				peers = append(peers, lab.AddPod(node, ns, peer))
			}
			topology(b, lab, ns, "hub", center...)
			hub := lab.AddPod(node, ns, "hub")
			for _, p := range peers {
				cni(b, p, "ADD")
			}
			var samples []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				cni(b, hub, "ADD")
				samples = append(samples, time.Since(start))
				b.StopTimer()
				cni(b, hub, "DEL")
				b.StartTimer()
			}
			b.StopTimer()
			if names, _ := labnet.Links(hub.Netns); len(names) != 1 {
				b.Fatalf("hub has %v after DEL", names)
			}
			report(b, samples)
		})
	}
}

func report(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(samples[len(samples)/2]), "median-ms")
	b.ReportMetric(ms(samples[(len(samples)*99)/100]), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkKernelWire100Pods measures wiring a 100-pod topology of 4 links
// a pod over 4 nodes (mostly VXLAN), every ADD started at once: from the
// first ADD until every pod has its 4 links.
func BenchmarkKernelWire100Pods(b *testing.B) {
	lab := labnet.New(b, bins)
	var nodes []*labnet.Node
	for i := range 4 {
		nodes = append(nodes, lab.AddNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("eth%d", i)))
	}
	round := 0
	var total, worst time.Duration
	for b.Loop() {
		b.StopTimer()
		r := newRing(b, lab, fmt.Sprintf("big-%d", round), 100, nodes)
		round++
		b.StartTimer()
		start := time.Now()
		r.all(b, "ADD")
		for r.wired() != nil {
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(start)
		total += took
		worst = max(worst, took)
		b.StopTimer()
		ping(b, r.pods[0], prefixIP(r.links[1].bIP))
		r.all(b, "DEL")
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(round), "mean-s-to-wire")
	b.ReportMetric(worst.Seconds(), "max-s-to-wire")
	b.ReportMetric(0, "ns/op")
}
