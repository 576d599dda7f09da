//go:build kernel

package controller_test

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// carrierEdge is a change of an interface's carrier, as the kernel
// announced it: when the netlink event was read.
type carrierEdge struct {
	intf string
	up   bool
	at   time.Time
}

// followCarrier reads the carrier changes of the interfaces of the netns
// at nsPath until stop is called, which returns them in order.
func followCarrier(tb testing.TB, nsPath string) (stop func() []carrierEdge) {
	tb.Helper()
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		tb.Fatal(err)
	}
	updates, done, err := subscribeLinks(h)
	h.Close()
	if err != nil {
		tb.Fatal(err)
	}
	out := make(chan []carrierEdge, 1)
	go func() {
		var edges []carrierEdge
		carrier := map[string]bool{}
		for u := range updates {
			now := time.Now()
			name, up := u.Link.Attrs().Name, u.IfInfomsg.Flags&unix.IFF_LOWER_UP != 0
			if was, seen := carrier[name]; seen && was != up {
				edges = append(edges, carrierEdge{intf: name, up: up, at: now})
			}
			carrier[name] = up
		}
		out <- edges
	}()
	return func() []carrierEdge {
		close(done)
		return <-out
	}
}

// faultCPU reports the CPU-seconds each kind of process spent per unit.
func faultCPU(b *testing.B, cpu proccpu.Usage, units int, unit string) {
	per := func(prefix string) float64 { return float64(cpu.Sum(prefix).Microseconds()) / 1000 / float64(units) }
	b.Logf("cpu over %d %ss: %v", units, unit, cpu)
	b.ReportMetric(per("meshnetd/"), "meshnetd-cpu-ms/"+unit)
	b.ReportMetric(per("controller"), "controller-cpu-ms/"+unit)
	b.ReportMetric(per("kube-apiserver"), "apiserver-cpu-ms/"+unit)
}

var (
	flapDown   = flag.Duration("flap-down", 100*time.Millisecond, "BenchmarkKernelFlapEdges: how long each window lasts")
	flapPeriod = flag.Duration("flap-period", 250*time.Millisecond, "BenchmarkKernelFlapEdges: how often a window begins")
)

// BenchmarkKernelFlapEdges flaps r1's veth to r2 and its VXLAN to r3 (on
// the other node) with one LinkFault: b.N windows of 100 ms every 250 ms
// (-flap-down, -flap-period), as `kubectl meshnet flap r1 eth1 --down
// 100ms --up 150ms` makes them (-benchtime=1000x for 1,000 cycles). Each edge is measured
// at the far ends, r2:eth1 and r3:eth1, from the netlink event of their
// carrier change, against the fault's schedule: how late the edge landed.
func BenchmarkKernelFlapEdges(b *testing.B) {
	p := newPair(b)
	down, period := *flapDown, *flapPeriod
	stopR2, stopR3 := followCarrier(b, p.r2.Netns), followCarrier(b, p.r3.Netns)
	before, err := p.lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	_, start := newFault(b, p.lab, "flap", v1beta1.LinkFaultSpec{
		Start: &metav1.MicroTime{Time: time.Now().Add(time.Second)},
		Links: []v1beta1.FaultLink{{Pod: "r1", Interface: "eth1"}, {Pod: "r1", Interface: "eth2"}},
		State: ptr.To(v1beta1.LinkDown), Duration: v1beta1.Duration(down.String()),
		Period: ptr.To(v1beta1.Duration(period.String())), Count: ptr.To(int32(b.N)),
	})
	end := start.Add(time.Duration(b.N-1)*period + down)
	time.Sleep(time.Until(end) + 2*time.Second)
	b.StopTimer()
	after, err := p.lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	var late []time.Duration
	for _, far := range []struct {
		pod   *labnet.Pod
		edges []carrierEdge
	}{{p.r2, stopR2()}, {p.r3, stopR3()}} {
		l, err := edgeLateness(far.edges, "eth1", start, down, period, b.N)
		if err != nil {
			b.Fatalf("%s: %v", far.pod.Name, err)
		}
		var losses, returns []time.Duration // edgeLateness alternates them
		for i, d := range l {
			if i%2 == 0 {
				losses = append(losses, d)
			} else {
				returns = append(returns, d)
			}
		}
		b.Logf("%s:eth1: carrier lost %s late; back %s late", far.pod.Name, percentiles(losses), percentiles(returns))
		late = append(late, l...)
	}
	faultCPU(b, after.Sub(before), b.N, "cycle")
	reportLatencies(b, "edges late at the far ends", late)
}

// edgeLateness matches intf's carrier edges to the windows of a flap that
// began at start (one window of down every period, n of them): the k-th
// loss to the k-th window's beginning, the k-th return to its end. It
// fails when the edges do not come in that order, one pair per window.
func edgeLateness(edges []carrierEdge, intf string, start time.Time, down, period time.Duration, n int) ([]time.Duration, error) {
	var late []time.Duration
	k, up := 0, true
	for _, e := range edges {
		if e.intf != intf {
			continue
		}
		if e.up == up {
			return nil, fmt.Errorf("window %d: carrier %v twice in a row at %v", k, e.up, e.at.Sub(start))
		}
		want := start.Add(time.Duration(k) * period)
		if e.up {
			want = want.Add(down)
			k++
		}
		up = e.up
		late = append(late, e.at.Sub(want))
	}
	if k != n || !up {
		return nil, fmt.Errorf("%d windows seen at the kernel (carrier up at the end: %v), want %d", k, up, n)
	}
	return late, nil
}

// BenchmarkKernelFibreCut takes down 100 links at once with one LinkFault,
// as a fibre cut does: r1 on node a has 50 veths to r2 (node a) and 50
// VXLANs to r3 (node b); the fault holds r1's 100 ends for 1 s, b.N times
// 3 s apart. Measured at the far ends from the netlink events: how far
// apart the 100 losses of carrier are (the spread), and how late the last
// one is after the window began.
func BenchmarkKernelFibreCut(b *testing.B) {
	const links, down, period = 100, time.Second, 3 * time.Second
	lab := labnet.New(b, bins)
	a, bn := lab.AddNode("node-a", "ens3"), lab.AddNode("node-b", "enp0s8")
	publishDaemons(b, lab, a, bn)
	lab.Namespace("lab")
	var r1 []v1beta1.Link
	var r2, r3 []v1beta1.Link
	var held []v1beta1.FaultLink
	for uid := 1; uid <= links; uid++ {
		intf := fmt.Sprintf("eth%d", uid)
		peer, peerLinks := "r2", &r2
		if uid > links/2 {
			peer, peerLinks = "r3", &r3
		}
		r1 = append(r1, link(uid, peer, intf, intf, "", ""))
		*peerLinks = append(*peerLinks, link(uid, "r1", intf, intf, "", ""))
		held = append(held, v1beta1.FaultLink{Pod: "r1", Interface: intf})
	}
	topology(b, lab, "r1", r1...)
	topology(b, lab, "r2", r2...)
	topology(b, lab, "r3", r3...)
	pods := []*labnet.Pod{lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2"), lab.AddPod(bn, "lab", "r3")}
	for _, pod := range pods {
		cni(b, pod, "ADD")
	}
	startController(b, lab, a, "controller")
	for _, name := range []string{"r1", "r2", "r3"} {
		waitStatus(b, lab, name, 2*time.Minute, converged)
	}
	stopR2, stopR3 := followCarrier(b, pods[1].Netns), followCarrier(b, pods[2].Netns)
	before, err := lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	_, start := newFault(b, lab, "cut", v1beta1.LinkFaultSpec{
		Start: &metav1.MicroTime{Time: time.Now().Add(time.Second)},
		Links: held, State: ptr.To(v1beta1.LinkDown), Duration: v1beta1.Duration(down.String()),
		Period: ptr.To(v1beta1.Duration(period.String())), Count: ptr.To(int32(b.N)),
	})
	time.Sleep(time.Until(start.Add(time.Duration(b.N-1)*period+down)) + 2*time.Second)
	b.StopTimer()
	after, err := lab.CPU()
	if err != nil {
		b.Fatal(err)
	}
	losses := make([][]time.Time, b.N)
	for _, e := range append(stopR2(), stopR3()...) {
		k := int(e.at.Sub(start) / period)
		if e.up || k < 0 || k >= b.N {
			continue
		}
		losses[k] = append(losses[k], e.at)
	}
	var spread, last []time.Duration
	for k, at := range losses {
		if len(at) != links {
			b.Fatalf("window %d: %d far ends lost carrier, want %d", k, len(at), links)
		}
		first, lastAt := slices.MinFunc(at, time.Time.Compare), slices.MaxFunc(at, time.Time.Compare)
		spread = append(spread, lastAt.Sub(first))
		last = append(last, lastAt.Sub(start.Add(time.Duration(k)*period)))
	}
	slices.Sort(spread)
	slices.Sort(last)
	b.Logf("%d cuts of %d links: spread p50 %v, max %v; last far end down p50 %v, max %v after the window began",
		b.N, links, spread[len(spread)/2], spread[len(spread)-1], last[len(last)/2], last[len(last)-1])
	b.ReportMetric(float64(spread[len(spread)-1].Microseconds())/1000, "spread-max-ms")
	b.ReportMetric(float64(last[len(last)-1].Microseconds())/1000, "last-down-max-ms")
	b.ReportMetric(0, "ns/op")
	faultCPU(b, after.Sub(before), b.N, "cut")
}

// percentiles says the p50, p99 and maximum of d.
func percentiles(d []time.Duration) string {
	d = slices.Clone(d)
	slices.Sort(d)
	q := func(f float64) time.Duration { return d[int(f*float64(len(d)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.5), q(0.99), q(1))
}
