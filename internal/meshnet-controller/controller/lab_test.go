//go:build kernel || vm

package controller_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

var bins labnet.Binaries

func TestMain(m *testing.M) { os.Exit(labnet.Main(m, &bins)) }

const (
	// daemonNS holds meshnetd's Service and the controller's Lease.
	daemonNS  = lab.SystemNamespace
	leaseName = "meshnet-controller.networkop.co.uk"
)

// publishDaemons writes the meshnetd Service's EndpointSlices, one per node,
// as the EndpointSlice controller (absent from the lab) would.
func publishDaemons(t testing.TB, lab *labnet.Lab, nodes ...*labnet.Node) {
	t.Helper()
	for _, n := range nodes {
		setDaemonReady(t, lab, n, true)
	}
}

// setDaemonReady creates or updates node n's endpoint of the meshnetd Service.
func setDaemonReady(t testing.TB, lab *labnet.Lab, n *labnet.Node, ready bool) {
	t.Helper()
	if err := n.PublishEndpoint(ready); err != nil {
		t.Fatal(err)
	}
}

// controllerProc is one meshnet-controller replica.
type controllerProc struct{ *lab.Process }

// startController runs the real meshnet-controller binary in node n's
// network namespace, where the API server (forwarded by the lab) and every
// node's meshnetd are reachable.
func startController(t testing.TB, l *labnet.Lab, n *labnet.Node, name string, args ...string) *controllerProc {
	t.Helper()
	// A short resync by default, for drift tests; later flags override it.
	p, err := l.StartController(n.Node, name, append([]string{"--resync", "10s"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, 20*time.Second)
		if t.Failed() || os.Getenv("LABNET_LOGS") != "" {
			t.Logf("meshnet-controller %s log:\n%s", name, tail(p.Log()))
		}
	})
	return &controllerProc{p}
}

// signal stops the replica with sig, killing it after 20s.
func (p *controllerProc) signal(sig syscall.Signal) { _ = p.Stop(sig, 20*time.Second) }

func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

func link(uid int, peer, local, peerIntf, localIP, peerIP string) v1beta1.Link {
	return v1beta1.Link{UID: uid, PeerPod: peer, LocalIntf: local, PeerIntf: peerIntf, LocalIP: localIP, PeerIP: peerIP}
}

func topology(t testing.TB, lab *labnet.Lab, name string, ls ...v1beta1.Link) {
	t.Helper()
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}, Spec: v1beta1.TopologySpec{Links: ls}}
	if err := lab.Client.Create(context.Background(), topo); err != nil {
		t.Fatalf("create Topology lab/%s: %v", name, err)
	}
}

func cni(t testing.TB, p *labnet.Pod, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.CNI(ctx, cmd); err != nil {
		t.Fatalf("CNI %s %s/%s: %v\n%s", cmd, p.Namespace, p.Name, err, tail(p.Node.Log()))
	}
}

// edit changes a Topology's spec, retrying on conflicts with the
// controller's status writes.
func edit(t testing.TB, lab *labnet.Lab, name string, change func(*v1beta1.Topology)) error {
	t.Helper()
	topo := &v1beta1.Topology{}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, topo); err != nil {
			return err
		}
		change(topo)
		return lab.Client.Update(context.Background(), topo)
	})
}

// mergePatch reads name's Topology and makes change to it as one merge
// patch, as kubectl edit sends it: without a resourceVersion, so it never
// conflicts with the controller's status writes (edit's update can, and
// then backs off and retries).
func mergePatch(lab *labnet.Lab, name string, change func(*v1beta1.Topology)) (*v1beta1.Topology, client.Patch, error) {
	topo := &v1beta1.Topology{}
	if err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, topo); err != nil {
		return nil, nil, err
	}
	base := topo.DeepCopy()
	change(topo)
	return topo, client.MergeFrom(base), nil
}

func mustEdit(t testing.TB, lab *labnet.Lab, name string, change func(*v1beta1.Topology)) {
	t.Helper()
	if err := edit(t, lab, name, change); err != nil {
		t.Fatalf("edit Topology lab/%s: %v", name, err)
	}
}

func get(t testing.TB, lab *labnet.Lab, name string) *v1beta1.Topology {
	t.Helper()
	topo := &v1beta1.Topology{}
	if err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, topo); err != nil {
		t.Fatal(err)
	}
	return topo
}

func waitStatus(t testing.TB, lab *labnet.Lab, name string, within time.Duration, ok func(*v1beta1.Topology) bool) *v1beta1.Topology {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		topo := get(t, lab, name)
		if ok(topo) {
			return topo
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology lab/%s status never as expected within %v: %+v", name, within, topo.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func condition(st *v1beta1.TopologyStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// converged is true when the status describes the current generation and
// says Ready.
func converged(topo *v1beta1.Topology) bool { return lab.Ready(topo) }

func linkStatus(topo *v1beta1.Topology, intf string) *v1beta1.LinkStatus {
	for i := range topo.Status.Links {
		if topo.Status.Links[i].LocalIntf == intf {
			return &topo.Status.Links[i]
		}
	}
	return nil
}

func readState(t testing.TB, nsPath, intf string) links.Reading {
	t.Helper()
	n, err := links.OpenNetns(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s, err := links.ReadLink(n, intf)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitKernel polls an interface until ok holds.
func waitKernel(t testing.TB, nsPath, intf string, within time.Duration, ok func(links.Reading) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := readState(t, nsPath, intf)
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s never as expected within %v: %+v", intf, nsPath, within, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pings(p *labnet.Pod, ip string, tries int) error {
	var (
		out string
		err error
	)
	for range tries {
		if out, err = p.Run("ping", "-c", "1", "-W", "1", ip); err == nil {
			return nil
		}
	}
	return fmt.Errorf("ping %s from %s: %v\n%s", ip, p.Name, err, out)
}

func down(s links.Reading) bool { return !s.AdminUp }
func up(s links.Reading) bool   { return s.AdminUp && s.Carrier }

// pair is r1 and r2 on node a joined by a veth (10.0.1.0/30), r1 and r3 on
// node b by a VXLAN (10.0.2.0/30), all wired, with one controller running.
type pair struct {
	lab        *labnet.Lab
	a, b       *labnet.Node
	r1, r2, r3 *labnet.Pod
	ctrl       *controllerProc
}

func newPair(t testing.TB) *pair {
	t.Helper()
	lab := labnet.New(t, bins)
	p := &pair{lab: lab, a: lab.AddNode("node-a", "ens3"), b: lab.AddNode("node-b", "enp0s8")}
	publishDaemons(t, lab, p.a, p.b)
	lab.Namespace("lab")
	topology(t, lab, "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30"),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", "10.0.2.2/30"))
	topology(t, lab, "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, lab, "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "10.0.2.1/30"))
	p.r1, p.r2, p.r3 = lab.AddPod(p.a, "lab", "r1"), lab.AddPod(p.a, "lab", "r2"), lab.AddPod(p.b, "lab", "r3")
	cni(t, p.r1, "ADD")
	cni(t, p.r2, "ADD")
	cni(t, p.r3, "ADD")
	p.ctrl = startController(t, lab, p.a, "controller")
	waitStatus(t, lab, "r1", 60*time.Second, converged)
	return p
}

func setState(s *v1beta1.LinkState, intf string) func(*v1beta1.Topology) {
	return func(topo *v1beta1.Topology) {
		for i := range topo.Spec.Links {
			if topo.Spec.Links[i].LocalIntf == intf {
				topo.Spec.Links[i].State = s
			}
		}
	}
}

func setMTU(mtu *int32, intf string) func(*v1beta1.Topology) {
	return func(topo *v1beta1.Topology) {
		for i := range topo.Spec.Links {
			if topo.Spec.Links[i].LocalIntf == intf {
				topo.Spec.Links[i].MTU = mtu
			}
		}
	}
}

// reportLatencies reports the p50 and p99 of lat, in ms, as a benchmark's
// metrics and logs them with the maximum.
func reportLatencies(b *testing.B, what string, lat []time.Duration) {
	lat = slices.Clone(lat)
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d %s: p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(lat), what, pct(0.50), pct(0.99), pct(1))
}

// newFault creates a LinkFault in lab whose first window begins at
// spec.start, now when it is unset, and returns when that is.
func newFault(t testing.TB, lab *labnet.Lab, name string, spec v1beta1.LinkFaultSpec) (*v1beta1.LinkFault, time.Time) {
	t.Helper()
	if spec.Start == nil {
		spec.Start = &metav1.MicroTime{Time: time.Now()}
	}
	start := spec.Start.Truncate(time.Microsecond) // as the API server keeps it
	f := &v1beta1.LinkFault{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}, Spec: spec}
	if err := lab.Client.Create(context.Background(), f); err != nil {
		t.Fatalf("create LinkFault %s: %v", name, err)
	}
	return f, start
}

// waitFault waits until LinkFault lab/name's status satisfies ok.
func waitFault(t testing.TB, lab *labnet.Lab, name string, within time.Duration, ok func(*v1beta1.LinkFault) bool) *v1beta1.LinkFault {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var f v1beta1.LinkFault
		err := lab.Client.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, &f)
		if err == nil && ok(&f) {
			return &f
		}
		if time.Now().After(deadline) {
			t.Fatalf("LinkFault lab/%s status never as expected within %v: %v %+v", name, within, err, f.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
