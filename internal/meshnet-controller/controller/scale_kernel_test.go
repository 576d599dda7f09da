//go:build kernel

package controller_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-controller/controller"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// mesh is a large topology in namespace "lab": pod i sits on node
// i%len(nodes) and has a link to pod (i+d)%len(pods) for every offset d.
// Offsets that are multiples of the node count join pods of one node (veth),
// the others pods of two nodes (VXLAN).
type mesh struct {
	lab   *labnet.Lab
	nodes []*labnet.Node
	pods  []*labnet.Pod
	ends  map[string][]string // pod name -> its interfaces
	links int
	ctrl  *controllerProc
}

func meshPodName(i int) string { return fmt.Sprintf("p%d", i) }

// newMesh wires a mesh of the given size with every CNI ADD in flight at
// once, starts one controller and waits until every Topology is converged.
func newMesh(t testing.TB, nodes, pods int) *mesh {
	t.Helper()
	offsets := []int{1, 2, 3, nodes, 2 * nodes}
	specs := make([][]v1beta1.Link, pods)
	uid := 0
	for i := range pods {
		for _, d := range offsets {
			j := (i + d) % pods
			uid++
			intf := fmt.Sprintf("e%d", uid)
			specs[i] = append(specs[i], link(uid, meshPodName(j), intf, intf, meshIP(uid, 1), meshIP(uid, 2)))
			specs[j] = append(specs[j], link(uid, meshPodName(i), intf, intf, meshIP(uid, 2), meshIP(uid, 1)))
		}
	}
	return wireMesh(t, nodes, specs)
}

// meshIP is end host (1 or 2) of link uid's /30.
func meshIP(uid, host int) string {
	return fmt.Sprintf("10.%d.%d.%d/30", 64+uid/64, uid%64*4, host)
}

// wireMesh makes the given number of nodes and one pod per spec, pod i
// (named meshPodName(i)) on node i%nodes with the links specs[i], wires
// them all at once, starts one controller and waits until every Topology
// is converged.
func wireMesh(t testing.TB, nodes int, specs [][]v1beta1.Link) *mesh {
	t.Helper()
	lab := labnet.New(t, bins)
	m := &mesh{lab: lab, ends: map[string][]string{}}
	for i := range nodes {
		m.nodes = append(m.nodes, lab.AddNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("eth%d", i)))
	}
	publishDaemons(t, lab, m.nodes...)
	lab.Namespace("lab")
	uids := map[int]bool{}
	for i, spec := range specs {
		name := meshPodName(i)
		topology(t, lab, name, spec...)
		for _, l := range spec {
			m.ends[name] = append(m.ends[name], l.LocalIntf)
			uids[l.UID] = true
		}
		m.pods = append(m.pods, lab.AddPod(m.nodes[i%nodes], "lab", name))
	}
	m.links = len(uids)
	pods := len(specs)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errs := make([]error, pods)
	var wg sync.WaitGroup
	for i, p := range m.pods {
		wg.Go(func() {
			if _, err := p.CNI(ctx, "ADD"); err != nil {
				errs[i] = fmt.Errorf("CNI ADD lab/%s: %w\n%s", p.Name, err, tail(p.Node.Log()))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("wired %d pods, %d links on %d nodes in %v", pods, m.links, nodes, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	// The deployed resync (30s): a batch measures edits, not re-applies.
	m.ctrl = startController(t, lab, m.nodes[0], "controller", "--resync", "30s")
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := m.waitStatus(ctx, func(*v1beta1.Topology) bool { return true }); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller converged %d Topologies in %v", pods, time.Since(start).Round(time.Millisecond))
	return m
}

// edit sets spec.links[].state of pod's Topology to s in one merge patch,
// as kubectl edit sends it.
func (m *mesh) edit(pod string, s v1beta1.LinkState) error {
	topo, patch, err := mergePatch(m.lab, pod, func(topo *v1beta1.Topology) {
		for j := range topo.Spec.Links {
			topo.Spec.Links[j].State = ptr.To(s)
		}
	})
	if err != nil {
		return err
	}
	return m.lab.Client.Patch(context.Background(), topo, patch)
}

// cost is what one change took: wall times from the edit's start, and the
// processor time and API requests it cost.
type cost struct {
	edits, kernel, status time.Duration
	cpu                   proccpu.Usage
	requests              controlplane.Counts
	// events are the watch events the API server sent, by resource.
	events controlplane.Counts
}

// usage is the processor time of the lab's programs and the API server's
// request counts so far.
func (m *mesh) usage(t testing.TB) (proccpu.Usage, controlplane.Counts, controlplane.Counts) {
	t.Helper()
	cpu, err := m.lab.CPU()
	if err != nil {
		t.Fatal(err)
	}
	req, err := m.lab.ControlPlane.Requests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	events, err := m.lab.ControlPlane.WatchEvents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cpu, req, events
}

// editAll edits the named pods' Topologies (every pod's when none is
// named) as edit does, all at once.
func (m *mesh) editAll(s v1beta1.LinkState, pods []string) error {
	if len(pods) == 0 {
		for _, p := range m.pods {
			pods = append(pods, p.Name)
		}
	}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Go(func() { errs[i] = m.edit(pod, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("edit batch: %w", err)
	}
	return nil
}

// watchKernel subscribes to the link updates of every pod's netns and
// returns a wait that reports when the last interface became
// administratively up (s up) or down. Events rather than polls: reading 200
// namespaces back every few milliseconds would take CPU from the daemons on
// this 2-core machine, and the measurement must not slow what it measures.
func (m *mesh) watchKernel(ctx context.Context, s v1beta1.LinkState) (wait func() (time.Time, error), err error) {
	want := s == v1beta1.LinkUp
	results := make(chan kernelResult, len(m.pods))
	for _, p := range m.pods {
		h, err := netns.GetFromPath(p.Netns)
		if err != nil {
			return nil, fmt.Errorf("open netns of lab/%s: %w", p.Name, err)
		}
		updates, done, err := subscribeLinks(h)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("subscribe to links of lab/%s: %w", p.Name, err)
		}
		go func() {
			defer h.Close()
			for {
				r, lost := m.follow(ctx, p.Name, updates, want)
				close(done)
				if !lost {
					results <- r
					return
				}
				// The socket overflowed in the batch's burst of link
				// messages: subscribe again, and its dump says where every
				// end is now.
				var err error
				if updates, done, err = subscribeLinks(h); err != nil {
					results <- kernelResult{err: fmt.Errorf("subscribe to links of lab/%s again: %w", p.Name, err)}
					return
				}
			}
		}()
	}
	return func() (time.Time, error) {
		var last time.Time
		var errs []error
		for range m.pods {
			r := <-results
			errs = append(errs, r.err)
			if r.at.After(last) {
				last = r.at
			}
		}
		return last, errors.Join(errs...)
	}, nil
}

// kernelResult is when one pod had every end as wanted.
type kernelResult struct {
	at  time.Time
	err error
}

// subscribeLinks subscribes to the link updates of netns h, starting with a
// dump of every link.
func subscribeLinks(h netns.NsHandle) (<-chan netlink.LinkUpdate, chan struct{}, error) {
	updates := make(chan netlink.LinkUpdate, 1024)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		Namespace: &h, ListExisting: true, ReceiveBufferSize: 1 << 20,
	})
	return updates, done, err
}

// follow reads a pod's link updates until every end of it is up (want) or
// down. lost is true when the updates ended before that.
func (m *mesh) follow(ctx context.Context, pod string, updates <-chan netlink.LinkUpdate, want bool) (r kernelResult, lost bool) {
	left := map[string]bool{}
	for _, intf := range m.ends[pod] {
		left[intf] = true
	}
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return kernelResult{}, true
			}
			attrs := u.Link.Attrs()
			if !slices.Contains(m.ends[pod], attrs.Name) {
				continue
			}
			if (attrs.Flags&net.FlagUp != 0) == want {
				delete(left, attrs.Name)
			} else {
				left[attrs.Name] = true
			}
			if len(left) == 0 {
				return kernelResult{at: time.Now()}, false
			}
		case <-ctx.Done():
			return kernelResult{err: fmt.Errorf("lab/%s: %d interfaces not as wanted in the kernel, e.g. %v", pod, len(left), slices.Sorted(maps.Keys(left))[0])}, false
		}
	}
}

// waitStatus waits until every Topology is converged (observed generation,
// Ready) with a status for each of its links that ok accepts.
func (m *mesh) waitStatus(ctx context.Context, ok func(*v1beta1.Topology) bool) error {
	return m.lab.WaitTopologies(ctx, "lab", func(topos []*v1beta1.Topology) string {
		if len(topos) != len(m.pods) {
			return fmt.Sprintf("%d Topologies, have %d", len(m.pods), len(topos))
		}
		var bad []string
		var first *v1beta1.Topology
		for _, topo := range topos {
			if !converged(topo) || len(topo.Status.Links) != len(topo.Spec.Links) || !ok(topo) {
				bad = append(bad, topo.Name)
				first = cmp.Or(first, topo)
			}
		}
		if len(bad) > 0 {
			return fmt.Sprintf("%d Topologies to converge, e.g. %v; %s", len(bad), bad[:min(len(bad), 10)], describe(first))
		}
		return ""
	})
}

// describe says where a Topology's status stands, for a failed wait.
func describe(topo *v1beta1.Topology) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: generation %d, observed %d", topo.Name, topo.Generation, topo.Status.ObservedGeneration)
	for _, c := range topo.Status.Conditions {
		fmt.Fprintf(&b, ", %s=%s (%s, generation %d): %s", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message)
	}
	for _, l := range topo.Status.Links {
		fmt.Fprintf(&b, ", %s %s", l.LocalIntf, l.State)
	}
	return b.String()
}

func allLinks(s v1beta1.LinkState) func(*v1beta1.Topology) bool {
	return func(topo *v1beta1.Topology) bool {
		for _, l := range topo.Status.Links {
			if l.State != s {
				return false
			}
		}
		return true
	}
}

// batch issues one edit batch setting every link of the named pods (of
// every pod when none is named) to s and returns the time from its first
// update until the API server accepted the last (c.edits), until the
// kernel has every link changed, and until every status says so, with the
// processor time and API requests it cost.
func (m *mesh) batch(t testing.TB, s v1beta1.LinkState, within time.Duration, pods ...string) (c cost) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	waitKernel, err := m.watchKernel(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	cpu0, req0, events0 := m.usage(t)
	start := time.Now()
	var serr error
	var wg sync.WaitGroup
	wg.Go(func() {
		serr = m.waitStatus(ctx, allLinks(s))
		c.status = time.Since(start)
	})
	eerr := m.editAll(s, pods)
	c.edits = time.Since(start)
	last, kerr := waitKernel()
	c.kernel = last.Sub(start)
	wg.Wait()
	if err := errors.Join(eerr, kerr, serr); err != nil {
		t.Fatalf("batch %s: %v", s, err)
	}
	cpu1, req1, events1 := m.usage(t)
	c.cpu, c.requests, c.events = cpu1.Sub(cpu0), req1.Sub(req0), events1.Sub(events0)
	return c
}

// BenchmarkKernelBatch1000Links wires 200 pods of 10 links each (1,000
// links: 400 veth, 600 VXLAN) over 10 nodes, then measures one edit batch
// that takes every link down (or back up, on odd iterations): one update
// per Topology, all at once, from the first update until the API server
// accepted the last (edits-s), until every end is changed in its pod's
// kernel (kernel-s) and until every status is converged and says so
// (status-s), with the processor time of the API server, the ten
// meshnetds and the controller over the batch. The API requests of each
// batch are logged.
func BenchmarkKernelBatch1000Links(b *testing.B) {
	m := newMesh(b, 10, 200)
	if m.links != 1000 {
		b.Fatalf("mesh has %d links, want 1000", m.links)
	}
	var edits, kernel, status, apiserver, meshnetd, ctrl []time.Duration
	for b.Loop() {
		s := v1beta1.LinkDown
		if len(kernel)%2 == 1 {
			s = v1beta1.LinkUp
		}
		c := m.batch(b, s, 2*time.Minute)
		b.Logf("batch %d (%s): edits accepted %v, kernel %v, status %v; cpu: %v; requests: %v; watch events sent: %v", len(kernel), s,
			c.edits.Round(time.Millisecond), c.kernel.Round(time.Millisecond), c.status.Round(time.Millisecond), c.cpu, c.requests, c.events)
		edits, kernel, status = append(edits, c.edits), append(kernel, c.kernel), append(status, c.status)
		apiserver = append(apiserver, c.cpu.Sum("kube-apiserver"))
		meshnetd = append(meshnetd, c.cpu.Sum("meshnetd/"))
		ctrl = append(ctrl, c.cpu.Sum("controller"))
	}
	b.ReportMetric(controller.MedianSeconds(edits), "edits-s")
	b.ReportMetric(controller.MedianSeconds(kernel), "kernel-s")
	b.ReportMetric(controller.MedianSeconds(status), "status-s")
	b.ReportMetric(controller.MedianSeconds(apiserver), "apiserver-cpu-s")
	b.ReportMetric(controller.MedianSeconds(meshnetd), "meshnetd-cpu-s")
	b.ReportMetric(controller.MedianSeconds(ctrl), "controller-cpu-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkKernelSteadyState watches the mesh of BenchmarkKernelBatch1000Links
// (200 Topologies, 1,000 links over 10 nodes), converged and with every far
// end known (which must not wait for a resync), for a minute in
// which nothing changes: two of the controller's resyncs (30 s, its
// default). A status write in that minute is a status that changed with
// nothing to change it, and fails the benchmark. It reports the API
// requests and the watch events the API server sent in the minute, per
// Topology, and the processor time of the controller, the ten meshnetds
// and the API server: what a quiet lab costs.
func BenchmarkKernelSteadyState(b *testing.B) {
	const pods = 200
	m := newMesh(b, 10, pods)
	// Each status says each far end once the far end's node is followed,
	// not at the next resync.
	start := time.Now()
	for {
		unknown := 0
		for _, topo := range topologies(b, m) {
			for _, l := range topo.Status.Links {
				if l.FarEnd == "" {
					unknown++
				}
			}
		}
		if unknown == 0 {
			break
		}
		if time.Since(start) > 20*time.Second {
			b.Fatalf("%d link ends' far ends still unknown %v after the mesh converged (the resync is 30 s)", unknown, time.Since(start).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("every far end known %v after the mesh converged", time.Since(start).Round(time.Millisecond))
	time.Sleep(5 * time.Second) // past the convergence's own writes
	for b.Loop() {
		before := topologies(b, m)
		cpu0, req0, events0 := m.usage(b)
		time.Sleep(time.Minute)
		cpu1, req1, events1 := m.usage(b)
		cpu, req, events := cpu1.Sub(cpu0), req1.Sub(req0), events1.Sub(events0)
		var requests, writes float64
		for k, n := range req {
			requests += n
			verb, resource, _ := strings.Cut(k, " ")
			if strings.HasPrefix(resource, "topologies") && !slices.Contains([]string{"GET", "LIST", "WATCH"}, verb) {
				writes += n
			}
		}
		var sent float64
		for _, n := range events {
			sent += n
		}
		b.Logf("a quiet minute, %d Topologies: %.0f API requests (%v), %.0f watch events sent; cpu: %v", pods, requests, req, sent, cpu)
		if writes > 0 {
			b.Errorf("%.0f writes of Topologies in a minute in which nothing changed: %v", writes, req)
			logChanged(b, m, before)
		}
		b.ReportMetric(requests/pods, "requests/topology-min")
		b.ReportMetric(sent/pods, "events/topology-min")
		b.ReportMetric(float64(cpu.Sum("controller").Microseconds())/1000/pods, "controller-cpu-ms/topology-min")
		b.ReportMetric(float64(cpu.Sum("meshnetd/").Microseconds())/1000/pods, "meshnetd-cpu-ms/topology-min")
		b.ReportMetric(cpu.Sum("kube-apiserver").Seconds(), "apiserver-cpu-s/min")
	}
	b.ReportMetric(0, "ns/op")
}

// TestKernelBatchConverges takes every link of a 200-link mesh over 4 nodes
// down in one batch of concurrent edits, then back up: each time every end
// in the kernel and every status follow.
func TestKernelBatchConverges(t *testing.T) {
	m := newMesh(t, 4, 40)
	if m.links != 200 {
		t.Fatalf("mesh has %d links, want 200", m.links)
	}
	for _, s := range []v1beta1.LinkState{v1beta1.LinkDown, v1beta1.LinkUp} {
		c := m.batch(t, s, time.Minute)
		t.Logf("batch %s: edits accepted %v, kernel %v, status %v; requests: %v", s, c.edits.Round(time.Millisecond), c.kernel.Round(time.Millisecond), c.status.Round(time.Millisecond), c.requests)
	}
	// Both veth ends up again: carrier is back everywhere.
	for _, p := range m.pods {
		n, err := links.OpenNetns(p.Netns)
		if err != nil {
			t.Fatal(err)
		}
		got, err := links.ReadAll(n)
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, intf := range m.ends[p.Name] {
			if !got[intf].AdminUp || !got[intf].Carrier {
				t.Errorf("lab/%s %s after the batch up: %+v", p.Name, intf, got[intf].Reading)
			}
		}
	}
}

// topologies are the mesh's Topologies by name, read now.
func topologies(t testing.TB, m *mesh) map[string]v1beta1.Topology {
	t.Helper()
	var list v1beta1.TopologyList
	if err := m.lab.Client.List(context.Background(), &list, client.InNamespace("lab")); err != nil {
		t.Fatal(err)
	}
	out := map[string]v1beta1.Topology{}
	for _, topo := range list.Items {
		out[topo.Name] = topo
	}
	return out
}

// logChanged logs, for the first Topologies whose resourceVersion moved
// since before, what changed: the status, and who wrote it when.
func logChanged(t testing.TB, m *mesh, before map[string]v1beta1.Topology) {
	t.Helper()
	n := 0
	for name, now := range topologies(t, m) {
		was := before[name]
		if was.ResourceVersion == now.ResourceVersion || n == 3 {
			continue
		}
		n++
		var managers []string
		for _, f := range now.ManagedFields {
			managers = append(managers, fmt.Sprintf("%s %s %s", f.Manager, f.Subresource, f.Time))
		}
		t.Logf("%s: status was\n%+v\nis\n%+v\nmanagers: %v", name, was.Status, now.Status, managers)
	}
}
