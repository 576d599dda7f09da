//go:build kernel

package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

// readyThenPing waits for the Topology of p to say Ready and, at that
// moment, pings each address from p once: Ready must mean the links are
// there, not that they will be. It returns how long Ready took from since.
func readyThenPing(t *testing.T, l *labnet.Lab, p *labnet.Pod, since time.Time, ips ...string) time.Duration {
	t.Helper()
	waitStatus(t, l, p.Name, 30*time.Second, converged)
	took := time.Since(since)
	for _, ip := range ips {
		if out, err := p.Run("ping", "-c", "1", "-W", "1", ip); err != nil {
			t.Fatalf("%s Ready %v after %v, but ping %s from it fails at that moment: %v\n%s",
				p.Name, get(t, l, p.Name).Status.Conditions, took, ip, err, out)
		}
	}
	return took
}

// TestKernelPodsBeforeTopologies: pods created before their Topologies, as
// Helm and Argo CD order a lab (workloads first, custom resources last),
// are wired once the Topologies come: every ADD succeeds with no links and
// records the sandbox, and each Topology's pass makes the links in it,
// both ends of a veth and a VXLAN, with their addresses. Then a pod made
// again (a new sandbox: DEL, then ADD of another network namespace) is
// wired again. Topologies deleted take their pods' links with them, both
// ends, and created again wire them again.
func TestKernelPodsBeforeTopologies(t *testing.T) {
	l := labnet.New(t, bins)
	a, b := l.AddNode("node-a", "ens3"), l.AddNode("node-b", "enp0s8")
	publishDaemons(t, l, a, b)
	l.Namespace("lab")
	startController(t, l, a, "controller")
	controllerServing(t, l)

	r1, r2, r3 := l.AddPod(a, "lab", "r1"), l.AddPod(a, "lab", "r2"), l.AddPod(b, "lab", "r3")
	for _, p := range []*labnet.Pod{r1, r2, r3} {
		cni(t, p, "ADD")
		if names, err := labnet.Links(p.Netns); err != nil || !slices.Equal(names, []string{"lo"}) {
			t.Fatalf("%s after its ADD with no Topology: %v, %v; want lo alone", p.Name, names, err)
		}
	}

	start := time.Now()
	topology(t, l, "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30"),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", "10.0.2.2/30"))
	topology(t, l, "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, l, "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "10.0.2.1/30"))
	t.Logf("Ready after the Topologies were created: r1 %v, r2 %v, r3 %v",
		readyThenPing(t, l, r1, start, "10.0.1.2", "10.0.2.2").Round(time.Millisecond),
		readyThenPing(t, l, r2, start, "10.0.1.1").Round(time.Millisecond),
		readyThenPing(t, l, r3, start, "10.0.2.1").Round(time.Millisecond))
	for _, name := range []string{"r1", "r2", "r3"} {
		if st := get(t, l, name).Status; st.ContainerID == "" || st.NetNS == "" {
			t.Errorf("Topology %s status names no sandbox (container_id %q, net_ns %q)", name, st.ContainerID, st.NetNS)
		}
	}

	// r3 made again on node b: the DEL of its sandbox, then a new one.
	cni(t, r3, "DEL")
	if err := r3.NewSandbox(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cni(t, r3, "ADD")
	waitStatus(t, l, "r3", 30*time.Second, func(topo *v1beta1.Topology) bool {
		return topo.Status.ContainerID == r3.ContainerID && converged(topo)
	})
	t.Logf("r3's new sandbox Ready %v after its ADD", time.Since(start).Round(time.Millisecond))
	if err := pings(r3, "10.0.2.1", 1); err != nil {
		t.Fatalf("r3's new sandbox Ready, but: %v", err)
	}

	// r2's and r3's Topologies deleted: a pod without a Topology is a pod
	// without links, so the veth goes (both ends) and so does the VXLAN,
	// r1's end on the other node too; r1 waits for its peers.
	deleted := time.Now()
	for _, name := range []string{"r2", "r3"} {
		if err := l.Client.Delete(context.Background(), get(t, l, name)); err != nil {
			t.Fatal(err)
		}
	}
	waitTopologyGone(t, l, "r2")
	waitTopologyGone(t, l, "r3")
	for _, end := range []struct {
		p    *labnet.Pod
		intf string
	}{{r2, "eth1"}, {r1, "eth1"}, {r3, "eth1"}, {r1, "eth2"}} {
		waitGone(t, end.p.Netns, end.intf, 10*time.Second)
	}
	t.Logf("links of the deleted Topologies gone from both nodes %v after the deletes", time.Since(deleted).Round(time.Millisecond))
	waitStatus(t, l, "r1", 10*time.Second, func(topo *v1beta1.Topology) bool {
		ready := condition(&topo.Status, v1beta1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1beta1.ReasonLinksPending
	})

	// Created again: the links are made again, both ends.
	start = time.Now()
	topology(t, l, "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, l, "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "10.0.2.1/30"))
	readyThenPing(t, l, r2, start, "10.0.1.1")
	readyThenPing(t, l, r3, start, "10.0.2.1")
	readyThenPing(t, l, r1, start, "10.0.1.2", "10.0.2.2")
	if st := get(t, l, "r2").Status; st.ContainerID != r2.ContainerID {
		t.Errorf("Topology r2 created again names sandbox %q, want %q", st.ContainerID, r2.ContainerID)
	}
}

// controllerServing waits until the controller writes statuses: a
// Topology of a pod that does not exist gets one saying so. Then timings
// measure the wiring, not the controller's start.
func controllerServing(t testing.TB, l *labnet.Lab) {
	t.Helper()
	topology(t, l, "no-pod")
	waitStatus(t, l, "no-pod", 30*time.Second, func(topo *v1beta1.Topology) bool { return topo.Status.ObservedGeneration > 0 })
}

// pairLinks are the Topologies' links of n links between pods a and b,
// uids from uid0, interfaces e0, e1 ... at both ends, link i on the /30
// number i of net.0.0.0/16 ("10.1"): a at its first address, b at its
// second.
func pairLinks(a, b string, n, uid0 int, net string) (la, lb []v1beta1.Link) {
	for i := range n {
		ipA, ipB := fmt.Sprintf("%s.%d.%d/30", net, i/64, i%64*4+1), fmt.Sprintf("%s.%d.%d/30", net, i/64, i%64*4+2)
		intf := fmt.Sprintf("e%d", i)
		la = append(la, link(uid0+i, b, intf, intf, ipA, ipB))
		lb = append(lb, link(uid0+i, a, intf, intf, ipB, ipA))
	}
	return la, lb
}

// waitReadyIn polls Topology ns/name every 10 ms, for up to 2 minutes,
// until it says Ready at its generation: a benchmark's clock stops within
// 10 ms of the status saying so.
func waitReadyIn(tb testing.TB, l *labnet.Lab, ns, name string) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		topo := &v1beta1.Topology{}
		if err := l.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, topo); err != nil {
			tb.Fatal(err)
		}
		if lab.Ready(topo) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s/%s not Ready within 2 minutes: %+v", ns, name, topo.Status.Conditions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitTopologyGone(t *testing.T, l *labnet.Lab, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, &v1beta1.Topology{})
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology lab/%s not gone within 10 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// neverReadyFor checks, for d, that the Topology of p never says Ready nor
// names sandbox, and that a runtime call on p is refused as for a pod not
// wired: p's sandbox is one the runtime throws away.
func neverReadyFor(t *testing.T, l *labnet.Lab, node *labnet.Node, p *labnet.Pod, sandbox string, d time.Duration) {
	t.Helper()
	_, err := l.LinkClient(node).ApplyPod(context.Background(), &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: p.Name})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "failed or was cut off") {
		t.Fatalf("ApplyPod of %s, whose ADD did not finish: %v, want NotFound saying the ADD failed or was cut off", p.Name, err)
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		topo := get(t, l, p.Name)
		if converged(topo) || topo.Status.ContainerID == sandbox {
			t.Fatalf("Topology %s says Ready %v, sandbox %q, for a sandbox whose ADD did not finish: %+v",
				p.Name, converged(topo), topo.Status.ContainerID, topo.Status.Conditions)
		}
	}
}

// TestKernelAbandonedSandboxIsNeverReady: a sandbox whose CNI ADD failed,
// or was cut off by meshnetd's death, is one the runtime throws away: the
// Topology never says Ready for it nor names it, a runtime call does not
// wire it (NotFound), and the runtime's next sandbox is wired and Ready.
func TestKernelAbandonedSandboxIsNeverReady(t *testing.T) {
	l := labnet.New(t, bins)
	a := l.AddNode("node-a", "ens3")
	publishDaemons(t, l, a)
	l.Namespace("lab")
	startController(t, l, a, "controller")

	// A failed ADD: r1's macvlan has no parent on the node.
	topology(t, l, "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, l, "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30"), link(2, "localhost", "mgmt0", "nosuch0", "", ""))
	r1, r2 := l.AddPod(a, "lab", "r1"), l.AddPod(a, "lab", "r2")
	cni(t, r2, "ADD")
	if _, err := r1.CNI(context.Background(), "ADD"); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("ADD of r1 with a macvlan on no parent: %v, want its failure", err)
	}
	neverReadyFor(t, l, a, r1, r1.ContainerID, 3*time.Second)
	// r2's end has carrier (r1's ADD made the veth before it failed), but
	// its far end is in a sandbox that is not wired: r2 is not Ready.
	waitStatus(t, l, "r2", 10*time.Second, func(topo *v1beta1.Topology) bool {
		ls := linkStatus(topo, "eth1")
		return !converged(topo) && ls != nil && ls.FarEnd == v1beta1.FarEndMissing
	})
	// The runtime's way: the sandbox's DEL, then another; the Topology fixed.
	cni(t, r1, "DEL")
	mustEdit(t, l, "r1", func(topo *v1beta1.Topology) { topo.Spec.Links = topo.Spec.Links[:1] })
	if err := r1.NewSandbox(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cni(t, r1, "ADD")
	t.Logf("r1's next sandbox Ready %v after its ADD", readyThenPing(t, l, r1, start, "10.0.1.2").Round(time.Millisecond))
	waitStatus(t, l, "r2", 10*time.Second, func(topo *v1beta1.Topology) bool {
		ls := linkStatus(topo, "eth1")
		return converged(topo) && ls != nil && ls.FarEnd == v1beta1.FarEndUp
	})

	// A cut-off ADD: meshnetd killed while it makes r3's 512 links.
	const n = 512
	l3, l4 := pairLinks("r3", "r4", n, 100, "10.1")
	topology(t, l, "r3", l3...)
	topology(t, l, "r4", l4...)
	r3, r4 := l.AddPod(a, "lab", "r3"), l.AddPod(a, "lab", "r4")
	cni(t, r4, "ADD")
	added := make(chan error, 1)
	go func() { _, err := r3.CNI(context.Background(), "ADD"); added <- err }()
	for {
		names, _ := labnet.Links(r3.Netns)
		if len(names) > 16 {
			break
		}
		select {
		case err := <-added:
			t.Fatalf("r3's ADD ended (%v) before meshnetd could be killed in it", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	a.Kill()
	if err := <-added; err == nil {
		t.Fatal("r3's ADD succeeded though meshnetd was killed in it")
	}
	names, _ := labnet.Links(r3.Netns)
	t.Logf("meshnetd killed with %d of r3's %d links made", len(names)-1, n)
	a.Start()
	neverReadyFor(t, l, a, r3, r3.ContainerID, 3*time.Second)
	cni(t, r3, "DEL")
	if err := r3.NewSandbox(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cni(t, r3, "ADD")
	t.Logf("r3's next sandbox Ready %v after its ADD", readyThenPing(t, l, r3, start, "10.1.0.2", "10.1.7.254").Round(time.Millisecond))
}

// BenchmarkKernelTopologyAfterPod measures the order Helm and Argo CD
// apply a lab in: two pods on two nodes are ADDed with no Topology, then
// their Topologies of n VXLAN links are created, and the clock runs from
// the later Topology's creation until the Topology of r1 says Ready and
// its first and last links ping (checked at that moment). It reports the
// median, the meshnetds' processor time per round and their peak RSS.
func BenchmarkKernelTopologyAfterPod(b *testing.B) {
	l := labnet.New(b, bins)
	a, c := l.AddNode("node-a", "ens3"), l.AddNode("node-b", "enp0s8")
	publishDaemons(b, l, a, c)
	startController(b, l, a, "controller")
	l.Namespace("lab")
	controllerServing(b, l)
	for _, n := range []int{1, 64, 1024} {
		round := 0 // across the calls of the sub-benchmark: each round has a namespace of its own
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			var (
				lat []time.Duration
				cpu time.Duration
			)
			b.StopTimer() // each round's setup is not timed: only its wiring
			for range b.N {
				ns := fmt.Sprintf("order-%d-%d", n, round)
				round++
				l.Namespace(ns)
				r1, r2 := l.AddPod(a, ns, "r1"), l.AddPod(c, ns, "r2")
				for _, p := range []*labnet.Pod{r1, r2} {
					if _, err := p.CNI(context.Background(), "ADD"); err != nil {
						b.Fatal(err)
					}
				}
				l1, l2 := pairLinks("r1", "r2", n, 1, "10.2")
				create := func(name string, ls []v1beta1.Link) {
					topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}
					if err := l.Client.Create(context.Background(), topo); err != nil {
						b.Fatal(err)
					}
				}
				create("r2", l2)
				before := l.MeshnetdCPU()
				b.StartTimer()
				start := time.Now()
				create("r1", l1)
				waitReadyIn(b, l, ns, "r1")
				for _, ip := range []string{"10.2.0.2", fmt.Sprintf("10.2.%d.%d", (n-1)/64, (n-1)%64*4+2)} {
					if out, err := r1.Run("ping", "-c", "1", "-W", "1", ip); err != nil {
						b.Fatalf("r1 Ready, but ping %s fails at that moment: %v\n%s", ip, err, out)
					}
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				cpu += l.MeshnetdCPU() - before
				// The next round on nodes as bare as this one's.
				for _, p := range []*labnet.Pod{r1, r2} {
					if _, err := p.CNI(context.Background(), "DEL"); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportLatencies(b, "rounds", lat)
			b.ReportMetric(float64(cpu.Milliseconds())/float64(len(lat)), "meshnetd-cpu-ms/round")
			for _, node := range []*labnet.Node{a, c} {
				if peak, err := node.PeakRSS(); err == nil {
					b.ReportMetric(float64(peak)/(1<<20), node.Name+"-VmHWM-MiB")
				}
			}
		})
	}
}

// BenchmarkKernelRestartToConverged measures a meshnetd restart under an
// edit: node-a's meshnetd is killed, r1's n VXLAN links get a new MTU,
// meshnetd is started again, and the clock runs from its start until r1's
// Topology says Ready at the new generation with the kernel's first and
// last links at that MTU (read at that moment). It reports the median and
// node-a meshnetd's processor time and peak RSS.
func BenchmarkKernelRestartToConverged(b *testing.B) {
	l := labnet.New(b, bins)
	a, c := l.AddNode("node-a", "ens3"), l.AddNode("node-b", "enp0s8")
	publishDaemons(b, l, a, c)
	startController(b, l, a, "controller")
	for _, n := range []int{64, 1024} {
		// Set up once: a sub-benchmark's function runs again for each b.N.
		ns := fmt.Sprintf("restart-%d", n)
		l.Namespace(ns)
		l1, l2 := pairLinks("r1", "r2", n, 1, "10.3")
		for name, ls := range map[string][]v1beta1.Link{"r1": l1, "r2": l2} {
			topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}
			if err := l.Client.Create(context.Background(), topo); err != nil {
				b.Fatal(err)
			}
		}
		r1, r2 := l.AddPod(a, ns, "r1"), l.AddPod(c, ns, "r2")
		for _, p := range []*labnet.Pod{r1, r2} {
			if _, err := p.CNI(context.Background(), "ADD"); err != nil {
				b.Fatal(err)
			}
		}
		ready := func(b *testing.B, mtu int) {
			b.Helper()
			waitReadyIn(b, l, ns, "r1")
			for _, intf := range []string{"e0", fmt.Sprintf("e%d", n-1)} {
				if mtu != 0 && readState(b, r1.Netns, intf).MTU != mtu {
					b.Fatalf("r1 Ready, but %s's MTU is %d, not %d, at that moment", intf, readState(b, r1.Netns, intf).MTU, mtu)
				}
			}
		}
		ready(b, 0)
		round := 0
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			var (
				lat []time.Duration
				cpu time.Duration
			)
			mtus := []int32{1400, 1450}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				a.Kill()
				mtu := mtus[round%2]
				round++
				if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					topo := &v1beta1.Topology{}
					if err := l.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "r1"}, topo); err != nil {
						return err
					}
					for j := range topo.Spec.Links {
						topo.Spec.Links[j].MTU = &mtu
					}
					return l.Client.Update(context.Background(), topo)
				}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				a.Start()
				ready(b, int(mtu))
				lat = append(lat, time.Since(start))
				b.StopTimer()
				// The restarted meshnetd's own time, since its start.
				if u, err := l.CPU(); err == nil {
					cpu += u.Sum("meshnetd/node-a")
				}
			}
			reportLatencies(b, "restarts", lat)
			b.ReportMetric(float64(cpu.Milliseconds())/float64(len(lat)), "node-a-meshnetd-cpu-ms/restart")
			if peak, err := a.PeakRSS(); err == nil {
				b.ReportMetric(float64(peak)/(1<<20), "node-a-VmHWM-MiB")
			}
		})
	}
}
