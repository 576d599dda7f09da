//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// BenchmarkKernelAdd measures CNI ADD of a pod with 1, 8 and 32 veth links
// to pods already wired on its node, as the runtime runs it (libcni, the
// loopback plugin, then meshnet-cni and meshnetd), DEL between runs. It
// reports the median and 99th percentile, and meshnetd's processor time
// per ADD.
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
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				before := lab.MeshnetdCPU()
				start := time.Now()
				cni(b, hub, "ADD")
				samples = append(samples, time.Since(start))
				b.StopTimer()
				cpu += lab.MeshnetdCPU() - before
				cni(b, hub, "DEL")
				b.StartTimer()
			}
			b.StopTimer()
			if names, _ := labnet.Links(hub.Netns); len(names) != 1 {
				b.Fatalf("hub has %v after DEL", names)
			}
			report(b, samples)
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(samples)), "meshnetd-cpu-ms/add")
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

// BenchmarkKernelSmallPodBesideWidePod: while two pods joined by n VXLAN
// links across two nodes (4,096 with IPv6 link-local addresses, the most
// the CRD admits with them, and its 10,000 without) are being wired, and
// again while they are torn down, a pod with 2 links (veths to a pod already
// on its node) is added on the wide pod's node. It reports how long that
// small ADD took, each time: one big pod must never hold up a node's other
// pods; and the wide pods' times, processor time and peak memory.
func BenchmarkKernelSmallPodBesideWidePod(b *testing.B) {
	for _, n := range []int{4096, 10000} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) { smallPodBesideWidePod(b, n) })
	}
}

func smallPodBesideWidePod(b *testing.B, n int) {
	lab := labnet.New(b, bins)
	na, nb := lab.AddNode("node-a", "eth0"), lab.AddNode("node-b", "eth0")
	var duringWire, duringTeardown, wire, teardown []time.Duration
	cpu := func() (total time.Duration) {
		for _, node := range []*labnet.Node{na, nb} {
			c, err := proccpu.Of(node.PID())
			if err != nil {
				b.Fatal(err)
			}
			total += c
		}
		return total
	}
	cpuBefore := cpu()
	round := 0
	for b.Loop() {
		b.StopTimer()
		ns := fmt.Sprintf("wide-%d", round)
		round++
		lab.Namespace(ns)
		var l1, l2 []v1beta1.Link
		for uid := range n {
			intf := fmt.Sprintf("e%d", uid)
			l1 = append(l1, link(uid+1, "r2", intf, intf, "", ""))
			l2 = append(l2, link(uid+1, "r1", intf, intf, "", ""))
		}
		for name, ls := range map[string][]v1beta1.Link{"r1": l1, "r2": l2} {
			topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}
			if n > v1beta1.MaxLinksWithLinkLocal {
				topo.Spec.IPv6LinkLocal = new(bool)
			}
			if err := lab.Client.Create(context.Background(), topo); err != nil {
				b.Fatalf("create Topology %s/%s: %v", ns, name, err)
			}
		}
		topology(b, lab, ns, "s1", link(1, "s2", "eth1", "eth1", "10.9.1.1/30", "10.9.1.2/30"), link(2, "s2", "eth2", "eth2", "10.9.2.1/30", "10.9.2.2/30"))
		topology(b, lab, ns, "s2", link(1, "s1", "eth1", "eth1", "10.9.1.2/30", "10.9.1.1/30"), link(2, "s1", "eth2", "eth2", "10.9.2.2/30", "10.9.2.1/30"))
		wide := &ring{namespace: ns, pods: []*labnet.Pod{lab.AddPod(na, ns, "r1"), lab.AddPod(nb, ns, "r2")}}
		s1, s2 := lab.AddPod(na, ns, "s1"), lab.AddPod(na, ns, "s2")
		cni(b, s2, "ADD")
		// once the wide pod's node is at work, time the small pod's ADD
		small := func(busy func() bool) time.Duration {
			for !busy() {
				time.Sleep(10 * time.Millisecond)
			}
			start := time.Now()
			cni(b, s1, "ADD")
			took := time.Since(start)
			b.Logf("the 2-link pod's ADD beside the wide pods took %v", took.Round(time.Millisecond))
			if names, _ := labnet.Links(s1.Netns); len(names) != 3 {
				b.Fatalf("s1 has %v after ADD beside the wide pod, want lo, eth1 and eth2", names)
			}
			return took
		}
		interfaces := func() int { names, _ := labnet.Links(wide.pods[0].Netns); return len(names) }
		b.StartTimer()

		start := time.Now()
		done := make(chan struct{})
		go func() { defer close(done); wide.all(b, "ADD") }()
		duringWire = append(duringWire, small(func() bool { return interfaces() > n/8 }))
		<-done
		wire = append(wire, time.Since(start))
		b.Logf("the wide pods wired in %v", wire[len(wire)-1].Round(time.Second))
		if got := interfaces(); got != n+1 {
			b.Fatalf("r1 has %d interfaces after ADD, want lo and %d links", got, n)
		}
		cni(b, s1, "DEL")
		// The wide pods' DELs, retried as the kubelet retries them (a
		// DEL of 4,096 links beside its peer's took past the plugin's 2
		// minutes when the ends were removed one by one).
		start = time.Now()
		done = make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for _, p := range wide.pods {
				wg.Go(func() {
					for try := 1; ; try++ {
						_, err := p.CNI(context.Background(), "DEL")
						if err == nil {
							return
						}
						b.Logf("DEL %s, try %d, after %v: %v", p.Name, try, time.Since(start).Round(time.Second), err)
					}
				})
			}
			wg.Wait()
		}()
		duringTeardown = append(duringTeardown, small(func() bool { return interfaces() < n-n/8 }))
		<-done
		teardown = append(teardown, time.Since(start))

		b.StopTimer()
		cni(b, s1, "DEL")
		cni(b, s2, "DEL")
		b.StartTimer()
	}
	b.ReportMetric((cpu()-cpuBefore).Seconds()/float64(round), "meshnetds-CPU-s/op")
	for _, node := range []*labnet.Node{na, nb} {
		peak, err := node.PeakRSS()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak>>20), node.Name+"-peak-MiB")
	}
	ms := func(ds []time.Duration) float64 { return float64(slices.Max(ds)) / float64(time.Millisecond) }
	b.ReportMetric(ms(duringWire), "small-add-while-wiring-ms")
	b.ReportMetric(ms(duringTeardown), "small-add-while-tearing-down-ms")
	b.ReportMetric(ms(wire)/1000, "wide-wire-s")
	b.ReportMetric(ms(teardown)/1000, "wide-teardown-s")
	b.ReportMetric(0, "ns/op")
}
