//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

// ring is a topology of n pods, pod i linked to i+1 and i+2 (mod n), so
// every pod has 4 links; pods are spread over nodes round robin, so with 2
// nodes the i+1 links are VXLAN and the i+2 links veth.
type ring struct {
	namespace string
	n         int
	pods      []*labnet.Pod
	links     []ringLink
}

type ringLink struct {
	uid      int
	a, b     int
	aIP, bIP string
}

func podName(i int) string { return fmt.Sprintf("r%d", i) }

func newRing(t testing.TB, lab *labnet.Lab, namespace string, n int, nodes []*labnet.Node) *ring {
	t.Helper()
	lab.Namespace(namespace)
	r := &ring{namespace: namespace, n: n}
	specs := make([][]v1beta1.Link, n)
	uid := 0
	for i := range n {
		for _, d := range []int{1, 2} {
			j := (i + d) % n
			uid++
			aIP := fmt.Sprintf("10.%d.%d.1/30", 64+uid/256, uid%256)
			bIP := fmt.Sprintf("10.%d.%d.2/30", 64+uid/256, uid%256)
			r.links = append(r.links, ringLink{uid: uid, a: i, b: j, aIP: aIP, bIP: bIP})
			specs[i] = append(specs[i], link(uid, podName(j), fmt.Sprintf("e%d", uid), fmt.Sprintf("e%d", uid), aIP, ""))
			specs[j] = append(specs[j], link(uid, podName(i), fmt.Sprintf("e%d", uid), fmt.Sprintf("e%d", uid), bIP, ""))
		}
	}
	for i := range n {
		topology(t, lab, namespace, podName(i), specs[i]...)
		r.pods = append(r.pods, lab.AddPod(nodes[i%len(nodes)], namespace, podName(i)))
	}
	return r
}

// all runs a CNI command for every pod at once.
func (r *ring) all(t testing.TB, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errs := make([]error, len(r.pods))
	var wg sync.WaitGroup
	for i, p := range r.pods {
		wg.Go(func() {
			_, errs[i] = p.CNI(ctx, cmd)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("CNI %s %s: %v\n%s", cmd, r.pods[i].Name, err, tail(r.pods[i].Node.Log()))
		}
	}
}

// wired reports a link whose two ends are not both in place.
func (r *ring) wired() error {
	for i, p := range r.pods {
		names, err := labnet.Links(p.Netns)
		if err != nil {
			return err
		}
		if len(names) != 5 {
			return fmt.Errorf("pod %s has %v, want lo and 4 links", podName(i), names)
		}
	}
	return nil
}

func prefixIP(cidr string) string { return cidr[:len(cidr)-3] }

// TestKernelConcurrentAdds starts 20 pods of 4 links each on 2 nodes at
// the same time; every link must come up, both ends, and carry a ping.
func TestKernelConcurrentAdds(t *testing.T) {
	lab := labnet.New(t, bins)
	nodes := []*labnet.Node{lab.AddNode("node-a", "eth0"), lab.AddNode("node-b", "eth0")}
	r := newRing(t, lab, "lab", 20, nodes)
	r.all(t, "ADD")
	if err := r.wired(); err != nil {
		t.Fatal(err)
	}
	for _, l := range r.links {
		ping(t, r.pods[l.a], prefixIP(l.bIP))
	}
	for i := range r.pods {
		waitStatus(t, lab, "lab", podName(i), ready)
	}
	r.all(t, "DEL")
}

// counts is the number of interfaces in each namespace.
func counts(t testing.TB, paths []string) []int {
	t.Helper()
	out := make([]int, len(paths))
	for i, p := range paths {
		names, err := labnet.Links(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = len(names)
	}
	return out
}

// TestKernelCreateDeleteCycles runs 50 ADD/DEL cycles of every link kind
// (veth, VXLAN, physical, macvlan), both ends at once, and counts the
// interfaces of every node and pod namespace: none may leak.
func TestKernelCreateDeleteCycles(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "ens3")
	b := lab.AddNode("node-b", "ens4")
	router := lab.AddPhysical()
	lab.Namespace("lab")
	phy := link(4, "rtr", "eth3", "xe-0", "10.0.4.1/30", "")
	phy.LinkOptions = &v1beta1.LinkOptions{RemoteVTEP: router.IP.String(), VNI: 777}
	topology(t, lab, "lab", "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", ""),
		phy,
		link(5, "localhost", "mgmt0", a.NIC, "10.250.0.101/24", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""), link(3, "r3", "eth2", "eth2", "10.0.3.1/30", ""))
	topology(t, lab, "lab", "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", ""), link(3, "r2", "eth2", "eth2", "10.0.3.2/30", ""))
	r := &ring{namespace: "lab", pods: []*labnet.Pod{lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2"), lab.AddPod(b, "lab", "r3")}}

	var paths []string
	for _, n := range lab.Nodes() {
		paths = append(paths, n.Netns)
	}
	for _, p := range r.pods {
		paths = append(paths, p.Netns)
	}
	before := counts(t, paths)
	for i := range 50 {
		r.all(t, "ADD")
		if i == 0 {
			ping(t, r.pods[0], "10.0.1.2")
			ping(t, r.pods[0], "10.0.2.2")
			ping(t, r.pods[1], "10.0.3.2")
		}
		up := counts(t, paths)
		if want := []int{2, 2, 5, 3, 3}; !slices.Equal(up[:2], before[:2]) || !slices.Equal(up[2:], want[2:]) {
			t.Fatalf("cycle %d after ADD: interfaces per namespace (node-a node-b r1 r2 r3) %v, want %v", i, up, want)
		}
		r.all(t, "DEL")
		if after := counts(t, paths); !slices.Equal(after, before) {
			t.Fatalf("cycle %d after DEL: interfaces per namespace %v, want %v as before", i, after, before)
		}
	}
}

// TestKernelGivenUpADDStops: when the plugin gives up an ADD (its deadline,
// or the runtime killing it), meshnetd stops making the pod's links rather
// than making the rest for nobody beside the pods it still serves; the
// sandbox's DEL then removes what was made.
func TestKernelGivenUpADDStops(t *testing.T) {
	const n = 1024
	lab := labnet.New(t, bins)
	a, b := lab.AddNode("node-a", "eth0"), lab.AddNode("node-b", "eth0")
	r1, _ := widePair(t, lab, a, b, "gone", n)
	count := func() int { names, _ := labnet.Links(r1.Netns); return len(names) - 1 }

	ctx, cancel := context.WithCancel(context.Background())
	added := make(chan error, 1)
	go func() { _, err := r1.CNI(ctx, "ADD"); added <- err }()
	for count() < 32 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-added; err == nil {
		t.Fatal("ADD given up: no error")
	}
	// Once the call is seen gone, at most the link in hand is made.
	var settled int
	deadline := time.Now().Add(10 * time.Second)
	for prev := -1; ; prev = settled {
		time.Sleep(time.Second)
		if settled = count(); settled == prev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r1's links still growing 10 s after its ADD was given up: %d of %d", settled, n)
		}
	}
	if settled >= n {
		t.Fatalf("r1 has all %d links after its ADD was given up", n)
	}
	t.Logf("ADD given up at 32 links: %d of %d made", settled, n)
	if !strings.Contains(a.Log(), "ADD given up by its caller") {
		t.Errorf("node-a's log does not say the ADD was given up")
	}
	cni(t, r1, "DEL")
	if got := count(); got != 0 {
		t.Errorf("r1 has %d links after DEL, want none", got)
	}
}

// TestKernelApplyPodWaitsForTheADD: while a pod's ADD makes its links, an
// ApplyPod for it is answered at once, as for a pod not wired yet, instead
// of reading the pod whole again and again beside the ADD (a 10,000-link
// ADD with the controller's ApplyPods outlasted CNI's 2 minutes); once the
// ADD is done, it applies.
func TestKernelApplyPodWaitsForTheADD(t *testing.T) {
	const n = 1024
	lab := labnet.New(t, bins)
	a, b := lab.AddNode("node-a", "eth0"), lab.AddNode("node-b", "eth0")
	r1, _ := widePair(t, lab, a, b, "busy", n)
	links := lab.LinkClient(a)
	apply := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := links.ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: "busy", Pod: "r1"})
		return err
	}
	added := make(chan struct{})
	go func() { defer close(added); cni(t, r1, "ADD") }()
	for names, _ := labnet.Links(r1.Netns); len(names) < 32; names, _ = labnet.Links(r1.Netns) {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	err := apply()
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "being wired") {
		t.Fatalf("ApplyPod during the ADD: %v, want NotFound saying the pod is being wired", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("ApplyPod during the ADD answered after %v, want at once", took)
	}
	t.Logf("ApplyPod during the ADD: %v", err)
	<-added
	if err := apply(); err != nil {
		t.Fatalf("ApplyPod after the ADD: %v", err)
	}
}

// widePair makes namespace ns with pods r1 on node a and r2 on node b,
// joined by n links (interfaces e1 to en at both ends, VXLAN across the
// two nodes), without wiring them.
func widePair(t testing.TB, lab *labnet.Lab, a, b *labnet.Node, ns string, n int) (r1, r2 *labnet.Pod) {
	t.Helper()
	lab.Namespace(ns)
	var l1, l2 []v1beta1.Link
	for uid := 1; uid <= n; uid++ {
		intf := fmt.Sprintf("e%d", uid)
		l1 = append(l1, link(uid, "r2", intf, intf, "", ""))
		l2 = append(l2, link(uid, "r1", intf, intf, "", ""))
	}
	topology(t, lab, ns, "r1", l1...)
	topology(t, lab, ns, "r2", l2...)
	return lab.AddPod(a, ns, "r1"), lab.AddPod(b, ns, "r2")
}
