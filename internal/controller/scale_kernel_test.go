//go:build kernel

package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/labnet"
	"github.com/meshnet/meshnet/internal/links"
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
	// netns per pod, open for the whole test: reading the kernel back
	// costs three netlink dumps a pod.
	netns map[string]*links.Netns
}

func meshPodName(i int) string { return fmt.Sprintf("p%d", i) }

// newMesh wires a mesh of the given size with every CNI ADD in flight at
// once, starts one controller and waits until every Topology is converged.
func newMesh(t testing.TB, nodes, pods int) *mesh {
	t.Helper()
	lab := labnet.New(t, bins)
	m := &mesh{lab: lab, ends: map[string][]string{}, netns: map[string]*links.Netns{}}
	for i := range nodes {
		m.nodes = append(m.nodes, lab.AddNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("eth%d", i)))
	}
	publishDaemons(t, lab, m.nodes...)
	lab.Namespace("lab")
	offsets := []int{1, 2, 3, nodes, 2 * nodes}
	specs := make([][]v1beta1.Link, pods)
	uid := 0
	for i := range pods {
		for _, d := range offsets {
			j := (i + d) % pods
			uid++
			intf := fmt.Sprintf("e%d", uid)
			aIP := fmt.Sprintf("10.%d.%d.1/30", 64+uid/256, uid%256)
			bIP := fmt.Sprintf("10.%d.%d.2/30", 64+uid/256, uid%256)
			specs[i] = append(specs[i], link(uid, meshPodName(j), intf, intf, aIP, bIP))
			specs[j] = append(specs[j], link(uid, meshPodName(i), intf, intf, bIP, aIP))
		}
	}
	m.links = uid
	for i := range pods {
		name := meshPodName(i)
		topology(t, lab, name, specs[i]...)
		for _, l := range specs[i] {
			m.ends[name] = append(m.ends[name], l.LocalIntf)
		}
		m.pods = append(m.pods, lab.AddPod(m.nodes[i%nodes], "lab", name))
	}

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
	for _, p := range m.pods {
		n, err := links.OpenNetns(p.Netns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		m.netns[p.Name] = n
	}

	start = time.Now()
	m.ctrl = startController(t, lab, m.nodes[0], "controller")
	if err := m.waitStatus(3*time.Minute, func(*v1beta1.Topology) bool { return true }); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller converged %d Topologies in %v", pods, time.Since(start).Round(time.Millisecond))
	return m
}

// editAll sets spec.links[].state of every Topology to s, one update per
// Topology, all at once.
func (m *mesh) editAll(t testing.TB, s v1beta1.LinkState) error {
	errs := make([]error, len(m.pods))
	var wg sync.WaitGroup
	for i, p := range m.pods {
		wg.Go(func() {
			// A patch, as kubectl edit sends: no conflicts with the
			// controller's status writes.
			topo := &v1beta1.Topology{}
			if errs[i] = m.lab.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: p.Name}, topo); errs[i] != nil {
				return
			}
			base := topo.DeepCopy()
			for j := range topo.Spec.Links {
				topo.Spec.Links[j].State = ptr.To(s)
			}
			errs[i] = m.lab.Client.Patch(context.Background(), topo, client.MergeFrom(base))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("edit batch: %w", err)
	}
	return nil
}

// waitKernel waits until every interface of every pod is administratively
// up (s up) or down, read back through netlink.
func (m *mesh) waitKernel(within time.Duration, s v1beta1.LinkState) error {
	want := s == v1beta1.LinkUp
	left := map[string]bool{}
	for name := range m.ends {
		left[name] = true
	}
	deadline := time.Now().Add(within)
	for {
		var why string
		for name := range left {
			got, err := links.ReadAll(m.netns[name])
			if err != nil {
				return err
			}
			done := true
			for _, intf := range m.ends[name] {
				if i, ok := got[intf]; !ok || i.AdminUp != want {
					done, why = false, fmt.Sprintf("lab/%s %s: %+v (present %v)", name, intf, i.State, ok)
					break
				}
			}
			if done {
				delete(left, name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d pods still not %s in the kernel after %v, e.g. %s", len(left), s, within, why)
		}
		// Polling costs the daemons CPU on this 2-core machine: the
		// measurement must not slow what it measures.
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits until every Topology is converged (observed generation,
// Ready) with a status for each of its links that ok accepts.
func (m *mesh) waitStatus(within time.Duration, ok func(*v1beta1.Topology) bool) error {
	deadline := time.Now().Add(within)
	for {
		var list v1beta1.TopologyList
		if err := m.lab.Client.List(context.Background(), &list, client.InNamespace("lab")); err != nil {
			return fmt.Errorf("list Topologies: %w", err)
		}
		var bad []string
		for i := range list.Items {
			topo := &list.Items[i]
			if !converged(topo) || len(topo.Status.Links) != len(topo.Spec.Links) || !ok(topo) {
				bad = append(bad, topo.Name)
			}
		}
		if len(list.Items) == len(m.pods) && len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(bad)
			return fmt.Errorf("%d of %d Topologies not converged after %v: %v", len(bad), len(list.Items), within, bad[:min(len(bad), 10)])
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// batch issues one edit batch setting every link to s and returns the time
// from its first update until the kernel has every link changed, and until
// every status says so.
func (m *mesh) batch(t testing.TB, s v1beta1.LinkState, within time.Duration) (kernel, status time.Duration) {
	t.Helper()
	start := time.Now()
	var kerr, serr error
	var wg sync.WaitGroup
	wg.Go(func() {
		kerr = m.waitKernel(within, s)
		kernel = time.Since(start)
	})
	wg.Go(func() {
		serr = m.waitStatus(within, allLinks(s))
		status = time.Since(start)
	})
	eerr := m.editAll(t, s)
	wg.Wait()
	if err := errors.Join(eerr, kerr, serr); err != nil {
		t.Fatalf("batch %s: %v", s, err)
	}
	return kernel, status
}

// BenchmarkKernelBatch1000Links wires 200 pods of 10 links each (1,000
// links: 400 veth, 600 VXLAN) over 10 nodes, then measures one edit batch
// that takes every link down (or back up, on odd iterations): one update
// per Topology, all at once, from the first update until every end is
// changed in its pod's kernel (kernel-s) and until every status is
// converged and says so (status-s).
func BenchmarkKernelBatch1000Links(b *testing.B) {
	m := newMesh(b, 10, 200)
	if m.links != 1000 {
		b.Fatalf("mesh has %d links, want 1000", m.links)
	}
	var kernel, status []time.Duration
	for b.Loop() {
		s := v1beta1.LinkDown
		if len(kernel)%2 == 1 {
			s = v1beta1.LinkUp
		}
		k, st := m.batch(b, s, 2*time.Minute)
		b.Logf("batch %d (%s): kernel %v, status %v", len(kernel), s, k.Round(time.Millisecond), st.Round(time.Millisecond))
		kernel, status = append(kernel, k), append(status, st)
	}
	median := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2].Seconds()
	}
	b.ReportMetric(median(kernel), "kernel-s")
	b.ReportMetric(median(status), "status-s")
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
		k, st := m.batch(t, s, time.Minute)
		t.Logf("batch %s: kernel %v, status %v", s, k.Round(time.Millisecond), st.Round(time.Millisecond))
	}
	// Both veth ends up again: carrier is back everywhere.
	for _, p := range m.pods {
		got, err := links.ReadAll(m.netns[p.Name])
		if err != nil {
			t.Fatal(err)
		}
		for _, intf := range m.ends[p.Name] {
			if !got[intf].AdminUp || !got[intf].Carrier {
				t.Errorf("lab/%s %s after the batch up: %+v", p.Name, intf, got[intf].State)
			}
		}
	}
}
