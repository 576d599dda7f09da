//go:build node

package deploy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster/kubeclustertest"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// widePair is two pods, r1 and r2, joined by n links (VXLAN across two
// nodes, veth when both are on one node): link i is interface e<i> at both
// ends, 10.200.0.0/16 cut into /30s, r1 the first address of its /30 and
// r2 the second.
type widePair struct {
	c      *kubecluster.Cluster
	ns     string
	n      int
	nodes  [2]*kubecluster.Node // r1's and r2's, the same node for veths
	before [2][]string          // each node's VXLAN devices before the pair
	// applied is when newWidePair began to apply the pair.
	applied time.Time
}

func linkAddr(i, host int) netip.Prefix {
	base := netip.MustParseAddr("10.200.0.0").As4()
	off := i*4 + host
	base[2], base[3] = byte(off>>8), byte(off)
	return netip.PrefixFrom(netip.AddrFrom4(base), 30)
}

func (w *widePair) topology(name, peer string, host int, mtu *int32) *v1beta1.Topology {
	t := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	if w.n > v1beta1.MaxLinksWithLinkLocal {
		t.Spec.IPv6LinkLocal = new(bool) // as the CRD requires
	}
	for i := range w.n {
		intf := fmt.Sprintf("e%d", i)
		t.Spec.Links = append(t.Spec.Links, v1beta1.Link{UID: i + 1, PeerPod: peer, LocalIntf: intf, PeerIntf: intf,
			LocalIP: linkAddr(i, host).String(), PeerIP: linkAddr(i, 3-host).String(), MTU: mtu})
	}
	return t
}

// vxlans lists the VXLAN devices in node's network namespace.
func vxlans(t testing.TB, node *kubecluster.Node) []string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+node.Netns, "--", "ip", "-o", "link", "show", "type", "vxlan").Output()
	if err != nil {
		t.Fatalf("VXLAN devices of %s: %v", node.Name, err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	slices.Sort(names)
	return names
}

// newWidePair applies the pair's Topologies and pods, r1 pinned to
// nodes[0] and r2 to nodes[1], and returns at once.
func newWidePair(t testing.TB, c *kubecluster.Cluster, ns string, n int, nodes [2]*kubecluster.Node) *widePair {
	t.Helper()
	ctx := context.Background()
	w := &widePair{c: c, ns: ns, n: n, nodes: nodes}
	for i, node := range w.nodes {
		w.before[i] = vxlans(t, node)
	}
	if err := c.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	w.applied = time.Now()
	for _, topo := range []*v1beta1.Topology{w.topology("r1", "r2", 1, nil), w.topology("r2", "r1", 2, nil)} {
		if err := c.Client.Create(ctx, topo); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"r1", "r2"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{
				NodeName:                      w.nodes[i].Name,
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "pod", Image: "alpine",
					Command: []string{"/bin/sh", "-c", "sleep 2000000000000"}}},
			},
		}
		if err := c.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// waitReady waits until both Topologies' statuses say Ready at their
// generation with n links (listed, or left out as up as specified: past
// 4,096 links the status lists only the others), those listed of mtu (0:
// any, the kernel's default), and both pods are Ready (a Topology may be
// Ready before its pod's container started), and then checks the pods'
// kernels: every link there, up, with its mtu, and a sample of links
// pinging. It returns the time since start (the apply, the edit), and
// waits until within after start.
func (w *widePair) waitReady(t testing.TB, start time.Time, within time.Duration, mtu int32) time.Duration {
	t.Helper()
	deadline := start.Add(within)
	for _, name := range []string{"r1", "r2"} {
		for {
			var topo v1beta1.Topology
			err := w.c.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &topo)
			ready := meta.FindStatusCondition(topo.Status.Conditions, v1beta1.ConditionReady)
			if err == nil && ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == topo.Generation &&
				topo.Status.ObservedGeneration == topo.Generation && len(topo.Status.Links)+int(topo.Status.OmittedLinks) == w.n &&
				!slices.ContainsFunc(topo.Status.Links, func(l v1beta1.LinkStatus) bool { return mtu != 0 && l.MTU != mtu }) {
				t.Logf("Topology %s Ready with %d links after %v", name, w.n, time.Since(start).Round(100*time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				summary := fmt.Sprintf("%v", err)
				if ready != nil {
					summary = fmt.Sprintf("Ready=%s (%s: %.300s) at generation %d of %d, %d links listed, %d omitted", ready.Status, ready.Reason, ready.Message, ready.ObservedGeneration, topo.Generation, len(topo.Status.Links), topo.Status.OmittedLinks)
				}
				t.Fatalf("%s/%s not Ready with %d links of mtu %d within %v: %s", w.ns, name, w.n, mtu, within, summary)
			}
			time.Sleep(time.Second)
		}
		for {
			var pod corev1.Pod
			err := w.c.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &pod)
			if err == nil && slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
				t.Logf("pod %s Ready after %v", name, time.Since(start).Round(100*time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s/%s not Ready within %v: %v %+v", w.ns, name, within, err, pod.Status.Conditions)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	took := time.Since(start)
	for _, name := range []string{"r1", "r2"} {
		out := kubectl(t, w.c, "-n", w.ns, "exec", name, "--", "ip", "-o", "link", "show")
		got := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			intf := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			got[intf] = f[2] + " mtu " + f[4]
		}
		var wrong []string
		for i := range w.n {
			intf := fmt.Sprintf("e%d", i)
			if s, ok := got[intf]; !ok || !strings.Contains(s, ",UP") || (mtu != 0 && !strings.HasSuffix(s, fmt.Sprintf(" mtu %d", mtu))) {
				wrong = append(wrong, fmt.Sprintf("%s: %q", intf, s))
			}
		}
		if len(wrong) > 0 {
			t.Fatalf("%s's kernel, its status Ready: %d of %d links missing or not as specified (mtu %d, up): %s", name, len(wrong), w.n, mtu, strings.Join(wrong[:min(len(wrong), 10)], ", "))
		}
	}
	for _, i := range []int{0, w.n / 2, w.n - 1} {
		ping(t, w.c, w.ns, "r1", linkAddr(i, 2).Addr().String())
	}
	return took
}

// setMTU edits every link of both Topologies.
func (w *widePair) setMTU(t testing.TB, mtu int32) {
	t.Helper()
	for i, name := range []string{"r1", "r2"} {
		var topo v1beta1.Topology
		if err := w.c.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &topo); err != nil {
			t.Fatal(err)
		}
		want := w.topology(name, []string{"r2", "r1"}[i], i+1, &mtu)
		topo.Spec.Links = want.Spec.Links
		if err := w.c.Client.Update(context.Background(), &topo); err != nil {
			t.Fatal(err)
		}
	}
}

// delete removes the namespace, runs meanwhile, and checks, once it is gone, that neither
// node holds anything of it: no VXLAN device beyond those before the pair,
// no record in meshnetd's pod store.
func (w *widePair) delete(t testing.TB, within time.Duration, meanwhile func()) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if err := w.c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}); err != nil {
		t.Fatal(err)
	}
	meanwhile()
	deadline := start.Add(within)
	for {
		err := w.c.Client.Get(ctx, client.ObjectKey{Name: w.ns}, &corev1.Namespace{})
		left := apierrors.IsNotFound(err)
		for i, node := range w.nodes {
			left = left && slices.Equal(vxlans(t, node), w.before[i]) && len(records(t, node, w.ns)) == 0
		}
		if left {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			for i, node := range w.nodes {
				now := vxlans(t, node)
				extra := slices.DeleteFunc(slices.Clone(now), func(d string) bool { return slices.Contains(w.before[i], d) })
				t.Errorf("%s, %v after namespace %s was deleted: %d VXLAN devices not there before (%.200v), records %v",
					node.Name, within, w.ns, len(extra), extra, records(t, node, w.ns))
			}
			t.FailNow()
		}
		time.Sleep(time.Second)
	}
}

// netnsFiles lists the network namespaces the node's runtime made for its
// sandboxes (the node's /run/netns).
func netnsFiles(t testing.TB, node *kubecluster.Node) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(node.Dir, "netns", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// records lists what meshnetd keeps of namespace ns's pods on node: their
// records in its pod store (--state-dir's pods), and any left in the
// directory an older meshnetd kept runtime records in (links).
func records(t testing.TB, node *kubecluster.Node, ns string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(node.Dir, "meshnet", "lib", "*", ns+"_*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// killMeshnetd kills node's meshnetd with SIGKILL, as an OOM kill does,
// at a random moment within window, and returns once it is killed.
func killMeshnetd(t testing.TB, node *kubecluster.Node, window time.Duration) {
	t.Helper()
	time.Sleep(time.Duration(rand.Int64N(int64(window))))
	pid := meshnetdPID(t, node.Name)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s's meshnetd (pid %d): %v", node.Name, pid, err)
	}
	t.Logf("killed %s's meshnetd (pid %d)", node.Name, pid)
}

// widePodsSurviveKills wires, edits and deletes two pods joined by n VXLAN
// links across two nodes, killing a meshnetd at a random moment of each:
// r1's node's while wiring, the far node's during the edit of every link,
// r1's node's again during teardown (with swap, the other node each time). Each time the pods end up Ready with
// every link as specified (the kernel read back, pings over a sample of
// links), and teardown leaves nothing on either node.
func widePodsSurviveKills(t testing.TB, c *kubecluster.Cluster, ns string, n int, swap bool) (wire, edit, teardown time.Duration) {
	sandboxes := netnsFiles(t, c.Nodes()[0])
	w := newWidePair(t, c, ns, n, [2]*kubecluster.Node{c.Nodes()[0], c.Nodes()[1]})
	waitSandbox(t, w.nodes[0], sandboxes)
	pod, far := w.nodes[0], w.nodes[1]
	if swap {
		pod, far = far, pod
	}
	killMeshnetd(t, pod, 3*time.Second)
	wire = w.waitReady(t, time.Now(), 5*time.Minute, 0)
	t.Logf("%d links: Ready %v after %s's meshnetd was killed while wiring", n, wire.Round(time.Second), pod.Name)

	w.setMTU(t, 1400)
	killMeshnetd(t, far, 2*time.Second)
	edit = w.waitReady(t, time.Now(), 5*time.Minute, 1400)
	t.Logf("%d links: every link's mtu edited, Ready %v after %s's meshnetd was killed during the edit", n, edit.Round(time.Second), far.Name)

	teardown = w.delete(t, 5*time.Minute, func() { killMeshnetd(t, pod, 2*time.Second) })
	t.Logf("%d links: namespace gone, nothing left on either node %v after its deletion (%s's meshnetd killed during it)", n, teardown.Round(time.Second), pod.Name)
	return wire, edit, teardown
}

// BenchmarkNodeWidePodKills runs widePodsSurviveKills at 1,024 links and
// reports how long each phase took to converge after its kill; -benchtime
// 10x kills in each phase ten times, every other round on the other node
// (r1's node while wiring and tearing down, r2's during the edit; then the
// reverse), so that each phase sees kills of both. Each round after the first starts
// with new meshnetd pods: the kubelet backs off restarting a container it
// saw killed again and again (up to 5 minutes), as it would after repeated
// OOM kills, and the fourth round's pod then found no meshnetd for its
// sandbox.
func BenchmarkNodeWidePodKills(b *testing.B) {
	ctx := context.Background()
	c := kubeclustertest.New(b, 2)
	if err := c.Install(ctx, overlay); err != nil {
		b.Fatalf("install meshnet: %v", err)
	}
	b.ResetTimer()
	for i := range b.N {
		if i > 0 {
			freshMeshnetds(b, c)
		}
		wire, edit, teardown := widePodsSurviveKills(b, c, fmt.Sprintf("chaos-%d", i), 1024, i%2 == 1)
		b.ReportMetric(wire.Seconds(), "wire-s")
		b.ReportMetric(edit.Seconds(), "edit-s")
		b.ReportMetric(teardown.Seconds(), "teardown-s")
	}
}

// freshMeshnetds replaces the meshnetd pods, as a rollout restart does, and
// waits until the new ones are ready.
func freshMeshnetds(t testing.TB, c *kubecluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Kubectl(ctx, "-n", "meshnet", "rollout", "restart", "daemonset/meshnetd"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=180s"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkNodeWidePods applies two pods joined by 1,024 and 4,096 links (with IPv6
// link-local addresses, the most the CRD admits with them) and by 10,000
// (without), as users apply them, across two nodes (VXLAN) and on one node
// (veth). It reports the time from the apply until both statuses are Ready
// and the kernels hold every link (pings over a sample), the same after an
// edit of every link's MTU, the time from the namespace's deletion until
// nothing is left, each meshnetd's peak memory over the round (VmHWM of a
// meshnetd restarted at its start) and processor time, and its restarts (none expected). Meanwhile,
// once the wiring is under way and again once the teardown is, it starts a
// pod with 2 links on r1's node and reports how long that pod took to run
// with its links: one big pod must never hold up a node's other pods.
func BenchmarkNodeWidePods(b *testing.B) {
	ctx := context.Background()
	c := kubeclustertest.New(b, 2)
	if err := c.Install(ctx, overlay); err != nil {
		b.Fatalf("install meshnet: %v", err)
	}
	nodes := c.Nodes()
	layouts := []struct {
		name  string
		nodes [2]*kubecluster.Node
	}{
		{"nodes=2", [2]*kubecluster.Node{nodes[0], nodes[1]}},
		{"nodes=1", [2]*kubecluster.Node{nodes[0], nodes[0]}},
	}
	for _, layout := range layouts {
		for _, n := range []int{1024, 4096, 10000} {
			b.Run(fmt.Sprintf("%s/links=%d", layout.name, n), func(b *testing.B) {
				for i := range b.N {
					widePods(b, c, fmt.Sprintf("wide-%s-%d-%d", strings.TrimPrefix(layout.name, "nodes="), n, i), n, layout.nodes)
				}
			})
		}
	}
}

// widePods is one round of BenchmarkNodeWidePods.
func widePods(b *testing.B, c *kubecluster.Cluster, ns string, n int, nodes [2]*kubecluster.Node) {
	type daemon struct {
		pid  int
		pod  daemonPod
		cpu  time.Duration
		node string
	}
	// Each round on fresh meshnetds: a daemon that wired 10,000 links
	// holds memory the runtime has not given back yet (the same-node
	// 4,096-link round peaked at 139 MiB after the 10,000-link rounds,
	// 119 MiB on a fresh daemon), and the peak of a round is to be its
	// own.
	freshMeshnetds(b, c)
	var ds []daemon
	for _, node := range slices.Compact([]string{nodes[0].Name, nodes[1].Name}) {
		pid := meshnetdPID(b, node)
		cpu, err := proccpu.Of(pid)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, daemon{pid: pid, pod: meshnetdOn(b, c, node), cpu: cpu, node: node})
		resetHWM(b, pid) // this round's peak, not an earlier round's
	}
	small := newSmallPair(b, c, ns+"-beside", nodes[0])
	sandboxes := netnsFiles(b, nodes[0])
	w := newWidePair(b, c, ns, n, nodes)
	waitSandbox(b, nodes[0], sandboxes)
	time.Sleep(2 * time.Second) // into the wiring of r1's links
	besideWire := small.run(b)
	wire := w.waitReady(b, w.applied, 10*time.Minute, 0)
	b.Logf("%d links: both pods Ready with every link %v after the apply", n, wire.Round(time.Second))
	small.stop(b)
	// Every link of both edited (its MTU), as kubectl apply of a changed
	// file does.
	edited := time.Now()
	w.setMTU(b, 1400)
	edit := w.waitReady(b, edited, 10*time.Minute, 1400)
	b.Logf("%d links: every link's MTU edited, both Ready %v after the edit", n, edit.Round(time.Second))
	teardown := w.delete(b, 10*time.Minute, func() {
		time.Sleep(2 * time.Second) // into the teardown
		small.run(b)
	})
	b.Logf("%d links: nothing left %v after the namespace's deletion", n, teardown.Round(time.Second))
	besideTeardown := small.took
	small.stop(b)
	b.ReportMetric(wire.Seconds(), "wire-s")
	b.ReportMetric(edit.Seconds(), "edit-s")
	b.ReportMetric(teardown.Seconds(), "teardown-s")
	b.ReportMetric(besideWire.Seconds(), "beside-wire-s")
	b.ReportMetric(besideTeardown.Seconds(), "beside-teardown-s")
	for j, d := range ds {
		cpu, err := proccpu.Of(d.pid)
		if err != nil {
			b.Fatalf("%s's meshnetd (pid %d) is gone: %v", d.node, d.pid, err)
		}
		if now := meshnetdOn(b, c, d.node); now.uid != d.pod.uid || now.restarts != d.pod.restarts {
			b.Errorf("%s's meshnetd restarted (restarts %d -> %d)", d.node, d.pod.restarts, now.restarts)
		}
		b.ReportMetric(float64(vmHWM(b, d.pid))/1024, fmt.Sprintf("node%d-peak-MiB", j+1))
		b.ReportMetric((cpu - d.cpu).Seconds(), fmt.Sprintf("node%d-CPU-s", j+1))
	}
	if err := c.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: small.ns}}); err != nil {
		b.Fatal(err)
	}
}

// waitSandbox waits until node has a sandbox's network namespace beyond
// those in before: the pod's CNI ADD is under way.
func waitSandbox(t testing.TB, node *kubecluster.Node, before []string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	// Not a count: a sandbox of an earlier round may be going meanwhile.
	for !slices.ContainsFunc(netnsFiles(t, node), func(f string) bool { return !slices.Contains(before, f) }) {
		if time.Now().After(deadline) {
			t.Fatalf("no new sandbox on %s within 2 minutes", node.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// smallPair is two pods on one node joined by two veth links: s2 runs
// throughout, s1 is started beside other work and timed.
type smallPair struct {
	c    *kubecluster.Cluster
	ns   string
	node *kubecluster.Node
	took time.Duration // s1's last run: from its creation until it ran with its links
}

// newSmallPair applies the pair's Topologies and s2, and waits until s2 runs.
func newSmallPair(t testing.TB, c *kubecluster.Cluster, ns string, node *kubecluster.Node) *smallPair {
	t.Helper()
	ctx := context.Background()
	if err := c.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, topo := range []*v1beta1.Topology{smallTopology(ns, "s1", "s2", 1), smallTopology(ns, "s2", "s1", 2)} {
		if err := c.Client.Create(ctx, topo); err != nil {
			t.Fatal(err)
		}
	}
	s := &smallPair{c: c, ns: ns, node: node}
	if err := c.Client.Create(ctx, s.pod("s2")); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, ns, "s2")
	return s
}

func smallTopology(ns, name, peer string, host int) *v1beta1.Topology {
	t := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := range 2 {
		intf := fmt.Sprintf("eth%d", i+1)
		t.Spec.Links = append(t.Spec.Links, v1beta1.Link{UID: i + 1, PeerPod: peer, LocalIntf: intf, PeerIntf: intf,
			LocalIP: fmt.Sprintf("10.201.%d.%d/24", i, host), PeerIP: fmt.Sprintf("10.201.%d.%d/24", i, 3-host)})
	}
	return t
}

func (s *smallPair) pod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      s.node.Name,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "pod", Image: "alpine",
				Command: []string{"/bin/sh", "-c", "sleep 2000000000000"}}},
		},
	}
}

// run creates s1, waits until its container runs (its sandbox's CNI ADD,
// and so its links, done), checks its links in its kernel and pings s2 over
// both, and returns how long it took to run.
func (s *smallPair) run(t testing.TB) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if err := s.c.Client.Create(ctx, s.pod("s1")); err != nil {
		t.Fatal(err)
	}
	deadline := start.Add(5 * time.Minute)
	for {
		var p corev1.Pod
		err := s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "s1"}, &p)
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/s1 not running within 5 minutes: %v %+v", s.ns, err, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.took = time.Since(start)
	t.Logf("the 2-link pod beside the wide pods ran %v after its creation", s.took.Round(10*time.Millisecond))
	for i := range 2 {
		ping(t, s.c, s.ns, "s1", fmt.Sprintf("10.201.%d.2", i))
	}
	return s.took
}

// stop deletes s1 and waits until it is gone.
func (s *smallPair) stop(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := s.c.Client.Delete(ctx, s.pod("s1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "s1"}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/s1 not gone within 5 minutes: %v", s.ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
