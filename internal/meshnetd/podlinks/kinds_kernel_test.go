//go:build kernel

package podlinks_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
)

// TestKernelVXLANPeerScheduledLater: r1's ADD cannot know r2's node, so its
// end waits; r2's ADD makes both ends, r1's through node a's PeerService.
func TestKernelVXLANPeerScheduledLater(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(7, "r2", "e1", "e1", "10.0.7.1/30", ""))
	topology(t, lab, "lab", "r2", link(7, "r1", "e1", "e1", "10.0.7.2/30", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD")
	waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool {
		return len(st.Skipped) == 1 && st.Skipped[0].LinkID == 7 && st.Skipped[0].PodName == "r2"
	})
	if names, _ := labnet.Links(r1.Netns); len(names) != 1 {
		t.Fatalf("r1 has %v before its peer is scheduled, want only lo", names)
	}
	r2 := lab.AddPod(b, "lab", "r2")
	cni(t, r2, "ADD")
	ping(t, r1, "10.0.7.2")
	waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool { return ready(st) && len(st.Skipped) == 0 })
	cni(t, r2, "DEL")
	if names, _ := labnet.Links(r1.Netns); len(names) != 1 {
		t.Errorf("r1 has %v after r2's DEL, want only lo: the remote end stays", names)
	}
}

// TestKernelPeerLeavingIsNotWiredAgain: r1 deleted (its Pod object
// terminating, as while the kubelet stops it). A far end lost meanwhile in
// r2 is not wired again to the pod that leaves; r1's DEL removes r2's other
// far end, and syncing r2 (the controller's ApplyPod, as when r1's Pod
// object goes) does not make it again either: CI saw that end stay for
// good. r1's next pod wires both links again.
func TestKernelPeerLeavingIsNotWiredAgain(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "e1", "e1", "10.0.8.1/30", ""), link(2, "r2", "e2", "e2", "", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "e1", "e1", "10.0.8.2/30", ""), link(2, "r1", "e2", "e2", "", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(b, "lab", "r2")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	ping(t, r2, "10.0.8.1")
	ctx := context.Background()
	sync := func(why string) {
		t.Helper()
		if _, err := lab.LinkClient(b).ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: "r2"}); err != nil {
			t.Fatalf("ApplyPod r2 %s: %v", why, err)
		}
		if names, _ := labnet.Links(r2.Netns); len(names) != 1+strings.Count(why, "e1 kept") {
			t.Fatalf("r2 has %v after ApplyPod %s", names, why)
		}
	}

	old := &corev1.Pod{}
	if err := lab.Client.Get(ctx, client.ObjectKey{Namespace: "lab", Name: "r1"}, old); err != nil {
		t.Fatal(err)
	}
	if err := lab.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := lab.Client.Get(ctx, client.ObjectKeyFromObject(old), old); err != nil || old.DeletionTimestamp == nil {
		t.Fatalf("Pod r1 after its delete: %v, deletionTimestamp %v; want it terminating", err, old.DeletionTimestamp)
	}
	lab.IP(r2.Netns, "link", "delete", "e2")
	sync("with r1 terminating and e2 lost (e1 kept)")
	cni(t, r1, "DEL")
	if names, _ := labnet.Links(r2.Netns); len(names) != 1 {
		t.Fatalf("r2 has %v after r1's DEL, want only lo", names)
	}
	sync("after r1's DEL")
	// r1's DEL put e1 back to waiting in r2's record: not lost, not retried.
	for _, line := range strings.Split(b.Log(), "\n") {
		if strings.Contains(line, "link lost") && strings.Contains(line, "intf=e1") {
			t.Errorf("node b took e1, removed by r1's DEL, for lost: %s", line)
		}
	}

	// r1's next pod: the old object goes, a new one comes to node a.
	if err := lab.Client.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	nextPod(t, lab, old, a)
	cni(t, r1, "ADD")
	if names, _ := labnet.Links(r2.Netns); len(names) != 3 {
		t.Fatalf("r2 has %v after r1's next ADD, want lo, e1 and e2", names)
	}
	ping(t, r2, "10.0.8.1")
}

// TestKernelFarEndsWhileAPeerNodeIsAway: node b's meshnetd is stopped at
// r1's DEL, so r2's end of their VXLAN stays; once it is back and r1's Pod
// is gone, the next pass of r2 removes that end (the link waits for r1's
// next pod) and leaves the link to r3, whose Pod is there, alone. Stopped
// again at the ADD of r1's next pod, node b owes r2's end: once it is back
// node a's meshnetd asks again by itself, without a pass of r1 (a
// controller), r1's end is left as it is, and the link pings.
func TestKernelFarEndsWhileAPeerNodeIsAway(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "e1", "e1", "10.0.9.1/30", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "e1", "e1", "10.0.9.2/30", ""), link(2, "r3", "e2", "e1", "10.0.9.5/30", ""))
	topology(t, lab, "lab", "r3", link(2, "r2", "e1", "e2", "10.0.9.6/30", ""))
	r1, r2, r3 := lab.AddPod(a, "lab", "r1"), lab.AddPod(b, "lab", "r2"), lab.AddPod(a, "lab", "r3")
	for _, p := range []*labnet.Pod{r1, r2, r3} {
		cni(t, p, "ADD")
	}
	ping(t, r2, "10.0.9.1")
	ping(t, r2, "10.0.9.6")
	ctx := context.Background()

	b.Stop()
	cni(t, r1, "DEL")
	if names, _ := labnet.Links(r2.Netns); len(names) != 3 {
		t.Fatalf("r2 has %v after r1's DEL with node b's meshnetd stopped, want lo, e1 and e2", names)
	}
	old := &corev1.Pod{}
	if err := lab.Client.Get(ctx, client.ObjectKey{Namespace: "lab", Name: "r1"}, old); err != nil {
		t.Fatal(err)
	}
	if err := lab.Client.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	b.Start()
	sync := func(n *labnet.Node, pod string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := lab.LinkClient(n).ApplyPod(ctx, &meshnetv1.ApplyPodRequest{Namespace: "lab", Pod: pod})
			if err == nil {
				return
			}
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				t.Fatalf("ApplyPod %s: %v", pod, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	sync(b, "r2")
	if names, _ := labnet.Links(r2.Netns); len(names) != 2 || !slices.Contains(names, "e2") {
		t.Fatalf("r2 has %v after a pass with r1 gone, want lo and e2", names)
	}
	if !strings.Contains(b.Log(), "far end of a pod that is gone removed") {
		t.Errorf("node b's log does not say why e1 went:\n%s", b.Log())
	}
	ping(t, r2, "10.0.9.6")
	sync(b, "r2") // nothing left to remove, nothing made again
	if names, _ := labnet.Links(r2.Netns); len(names) != 2 {
		t.Fatalf("r2 has %v after a second pass, want lo and e2", names)
	}

	b.Stop()
	nextPod(t, lab, old, a)
	cni(t, r1, "ADD")
	if names, _ := labnet.Links(r2.Netns); len(names) != 2 {
		t.Fatalf("r2 has %v after r1's next ADD with node b's meshnetd stopped, want lo and e2", names)
	}
	// Only the far end is asked for again: r1's end, set down here behind
	// meshnet's back (as a runtime state or a LinkFault would hold it),
	// stays as it is.
	lab.IP(r1.Netns, "link", "set", "e1", "down")
	b.Start()
	// No pass of r1 (there is no controller here): node a's meshnetd asks
	// by itself, 5 s after the ADD and then at most 30 s apart.
	back := time.Now()
	for {
		if names, _ := labnet.Links(r2.Netns); len(names) == 3 {
			break
		}
		if time.Since(back) > 20*time.Second {
			names, _ := labnet.Links(r2.Netns)
			t.Fatalf("r2 has %v 20 s after node b's meshnetd came back, want lo, e1 and e2", names)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("r2's end made %v after node b's meshnetd came back", time.Since(back).Round(time.Millisecond))
	out, err := r1.Run("ip", "-o", "link", "show", "e1")
	flags, _, _ := strings.Cut(out[strings.Index(out, "<")+1:], ">")
	if err != nil || slices.Contains(strings.Split(flags, ","), "UP") {
		t.Fatalf("r1's e1 after its far end was asked for again: %q, %v; want left down", out, err)
	}
	lab.IP(r1.Netns, "link", "set", "e1", "up")
	ping(t, r2, "10.0.9.1")
	if !strings.Contains(a.Log(), "far end not made by its node yet: asking again") {
		t.Errorf("node a's log does not say it asked for r2's end again:\n%s", a.Log())
	}
}

// nextPod makes the Pod object of old's next pod, scheduled to node n.
func nextPod(t *testing.T, lab *labnet.Lab, old *corev1.Pod, n *labnet.Node) {
	t.Helper()
	ctx := context.Background()
	next := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name}, Spec: old.Spec}
	if err := lab.Client.Create(ctx, next); err != nil {
		t.Fatal(err)
	}
	next.Status = corev1.PodStatus{Phase: corev1.PodPending, HostIP: n.IP.String(), HostIPs: []corev1.HostIP{{IP: n.IP.String()}}}
	if err := lab.Client.Status().Update(ctx, next); err != nil {
		t.Fatal(err)
	}
}

// TestKernelPhysicalPeer links a pod to a physical device's VTEP (a
// namespace with a hand-made vxlan) and checks the status tells the
// operator how to configure that side.
func TestKernelPhysicalPeer(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	router := lab.AddPhysical()
	lab.Namespace("lab")
	port := int32(4790)
	l := link(3, "rtr1", "eth1", "ge-0.0.1", "10.0.3.1/30", "")
	l.LinkOptions = &v1beta1.LinkOptions{RemoteVTEP: router.IP.String(), VNI: 4242, UDPPort: &port}
	topology(t, lab, "lab", "r1", l)
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD")

	topo := waitStatus(t, lab, "lab", "r1", ready)
	if len(topo.Status.Links) != 1 || topo.Status.Links[0].Physical == nil {
		t.Fatalf("status links %+v, want one with physical", topo.Status.Links)
	}
	phy := *topo.Status.Links[0].Physical
	want := v1beta1.PhysicalPeer{VNI: 4242, LocalVTEP: a.IP.String(), RemoteVTEP: router.IP.String(), UDPPort: 4790}
	if phy != want || topo.Status.Links[0].Kind != v1beta1.LinkKindPhy {
		t.Fatalf("status physical %+v kind %s, want %+v phy", phy, topo.Status.Links[0].Kind, want)
	}
	// The operator configures the router from the status alone.
	lab.IP(router.Netns, "link", "add", "vx0", "type", "vxlan", "id", fmt.Sprint(phy.VNI), "remote", phy.LocalVTEP,
		"local", phy.RemoteVTEP, "dstport", fmt.Sprint(phy.UDPPort), "dev", router.NIC, "nolearning")
	lab.IP(router.Netns, "addr", "add", "10.0.3.2/30", "dev", "vx0")
	lab.IP(router.Netns, "link", "set", "vx0", "up")
	ping(t, r1, "10.0.3.2")
	cni(t, r1, "DEL")
	if names, _ := labnet.Links(r1.Netns); len(names) != 1 {
		t.Errorf("r1 has %v after DEL, want only lo", names)
	}
}

// TestKernelMacvlan links a pod to its node's NIC (peer_pod localhost) and
// pings another node over it.
func TestKernelMacvlan(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "ens3")
	b := lab.AddNode("node-b", "ens4")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "localhost", "mgmt0", a.NIC, "10.250.0.100/24", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	cni(t, r1, "ADD")
	ping(t, r1, b.IP.String())
	topo := waitStatus(t, lab, "lab", "r1", ready)
	if topo.Status.Links[0].Kind != v1beta1.LinkKindMacvlan {
		t.Errorf("kind %s, want macvlan", topo.Status.Links[0].Kind)
	}
	cni(t, r1, "DEL")
	if names, _ := labnet.Links(r1.Netns); len(names) != 1 {
		t.Errorf("r1 has %v after DEL, want only lo", names)
	}
}

// TestKernelMTU: a don't-fragment ping of exactly the MTU passes, MTU+1
// fails, over a veth (both ends) and over VXLAN; a VXLAN without mtu gets
// its parent's less the 50-byte overhead.
func TestKernelMTU(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	mtu := func(v int32) *int32 { return &v }
	veth := link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30")
	veth.MTU = mtu(1400)
	vx := link(2, "r3", "eth2", "eth1", "10.0.2.1/30", "10.0.2.2/30")
	vx.MTU = mtu(1300)
	vxDefault := link(3, "r3", "eth3", "eth2", "10.0.3.1/30", "10.0.3.2/30")
	topology(t, lab, "lab", "r1", veth, vx, vxDefault)
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "")) // mtu only on r1's side
	r3vx := link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "")
	r3vx.MTU = mtu(1300)
	topology(t, lab, "lab", "r3", r3vx, link(3, "r1", "eth2", "eth3", "10.0.3.2/30", ""))
	r1, r2, r3 := lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2"), lab.AddPod(b, "lab", "r3")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	cni(t, r3, "ADD")

	for _, c := range []struct {
		from *labnet.Pod
		to   string
		mtu  int
	}{{r1, "10.0.1.2", 1400}, {r2, "10.0.1.1", 1400}, {r1, "10.0.2.2", 1300}, {r3, "10.0.2.1", 1300}, {r1, "10.0.3.2", 1450}} {
		payload := c.mtu - 28 // IPv4 and ICMP headers
		ping(t, c.from, c.to, "-M", "do", "-s", fmt.Sprint(payload))
		if err := pingN(c.from, c.to, 1, "-M", "do", "-s", fmt.Sprint(payload+1)); err == nil {
			t.Errorf("%s -> %s: a %d-byte don't-fragment packet passed an MTU of %d", c.from.Name, c.to, c.mtu+1, c.mtu)
		}
	}
	topo := waitStatus(t, lab, "lab", "r1", ready)
	got := map[int]int32{}
	for _, l := range topo.Status.Links {
		got[l.UID] = l.MTU
	}
	if got[1] != 1400 || got[2] != 1300 || got[3] != 1450 {
		t.Errorf("status MTUs %v, want 1:1400 2:1300 3:1450", got)
	}
}

// TestKernelSameUIDsInTwoNamespaces: two namespaces with identical
// topologies (uids, pod and interface names) over the same node pair; the
// derived VNIs differ, so both work (meshnet-cni's "file exists").
func TestKernelSameUIDsInTwoNamespaces(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	var pods []*labnet.Pod
	for _, ns := range []string{"team-a", "team-b"} {
		lab.Namespace(ns)
		topology(t, lab, ns, "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
		topology(t, lab, ns, "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
		r1, r2 := lab.AddPod(a, ns, "r1"), lab.AddPod(b, ns, "r2")
		pods = append(pods, r1, r2)
	}
	for _, p := range pods {
		cni(t, p, "ADD")
	}
	for i := 0; i < len(pods); i += 2 {
		ping(t, pods[i], "10.0.1.2")
		ping(t, pods[i+1], "10.0.1.1")
	}
}

// TestKernelNoTopology: a pod without a Topology passes through untouched,
// with the primary's result.
func TestKernelNoTopology(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	lab.Namespace("lab")
	p := lab.AddPod(a, "lab", "plain")
	res, err := p.CNI(context.Background(), "ADD")
	if err != nil {
		t.Fatalf("ADD of a pod without Topology: %v", err)
	}
	if res == nil || !strings.Contains(fmt.Sprint(res), "lo") {
		t.Errorf("result %v, want the loopback plugin's", res)
	}
	if names, _ := labnet.Links(p.Netns); len(names) != 1 {
		t.Errorf("pod has %v, want only lo", names)
	}
	cni(t, p, "DEL")
}

// TestKernelNetemReported: netem on a host without sch_netem leaves the
// link up and unshaped and says so in the status; never silently ignored.
func TestKernelNetemReported(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	lab.Namespace("lab")
	delay := v1beta1.Duration("10ms")
	l := link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "")
	l.Netem = &v1beta1.Netem{Delay: &delay}
	topology(t, lab, "lab", "r1", l)
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	ping(t, r1, "10.0.1.2")
	topo := waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool { return len(st.Links) == 1 })
	ls := topo.Status.Links[0]
	if out, _ := r1.Run("tc", "qdisc", "show", "dev", "eth1"); strings.Contains(out, "netem") {
		// A kernel with netem: the shaping is there and reported.
		waitStatus(t, lab, "lab", "r1", func(st *v1beta1.TopologyStatus) bool { return st.ShapedLinks == 1 })
		return
	}
	// The netem package's error, whoever set the netem last (the ADD or
	// the controller's ApplyPod): one record of a link's last error.
	if !strings.Contains(ls.LastError, "set netem on eth1: kernel has no sch_netem") || ls.Netem != nil {
		t.Fatalf("link status %+v: want netem reported as not applied", ls)
	}
	degraded := false
	for _, c := range topo.Status.Conditions {
		degraded = degraded || (c.Type == v1beta1.ConditionDegraded && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "netem"))
	}
	if !degraded {
		t.Errorf("conditions %+v: want Degraded naming netem", topo.Status.Conditions)
	}
}

// collidingUIDs finds two link uids of pods a and b in namespace whose
// first VNIs are the same (about 5,000 uids in, by the birthday bound).
func collidingUIDs(t *testing.T, namespace, a, b string) (int, int) {
	t.Helper()
	seen := map[uint32]int{}
	for uid := 1; uid < 1<<20; uid++ {
		v := links.VNI(namespace, a, b, uid)
		if first, ok := seen[v]; ok {
			return first, uid
		}
		seen[v] = uid
	}
	t.Fatal("no two uids share a first VNI")
	return 0, 0
}

// vxlanID reads the VNI of a pod's vxlan device from the kernel.
func vxlanID(t *testing.T, p *labnet.Pod, dev string) string {
	t.Helper()
	out, err := netnstest.Run(p.Netns, "ip", "-d", "link", "show", dev)
	if err != nil {
		t.Fatalf("ip -d link show %s in %s: %v: %s", dev, p.Name, err, out)
	}
	m := regexp.MustCompile(`vxlan id (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s of %s is no vxlan device: %s", dev, p.Name, out)
	}
	return m[1]
}

// TestKernelVXLANFirstVNIInUse: two links between the same pods whose first
// VNIs are the same. The kernel refuses a second device with a VNI, so the
// second link takes its next VNI; both nodes agree on it, and both links
// carry traffic.
func TestKernelVXLANFirstVNIInUse(t *testing.T) {
	u1, u2 := collidingUIDs(t, "lab", "r1", "r2")
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(u1, "r2", "e1", "e1", "10.0.1.1/30", ""), link(u2, "r2", "e2", "e2", "10.0.2.1/30", ""))
	topology(t, lab, "lab", "r2", link(u1, "r1", "e1", "e1", "10.0.1.2/30", ""), link(u2, "r1", "e2", "e2", "10.0.2.2/30", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(b, "lab", "r2")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	ping(t, r1, "10.0.1.2")
	ping(t, r1, "10.0.2.2")
	v1, v2 := vxlanID(t, r1, "e1"), vxlanID(t, r1, "e2")
	if v1 == v2 {
		t.Fatalf("both links have vni %s", v1)
	}
	if w1, w2 := vxlanID(t, r2, "e1"), vxlanID(t, r2, "e2"); w1 != v1 || w2 != v2 {
		t.Errorf("ends disagree: r1 has vnis %s and %s, r2 %s and %s", v1, v2, w1, w2)
	}
	first := fmt.Sprint(links.VNI("lab", "r1", "r2", u1))
	if v1 != first && v2 != first {
		t.Errorf("neither link has the first vni %s (links %d and %d have %s and %s)", first, u1, u2, v1, v2)
	}
	t.Logf("links %d and %d share first vni %s; they have %s and %s", u1, u2, first, v1, v2)
}

// TestKernelLinkLocalIPv6IsTheTopologys: a pod whose Topology says
// ipv6_link_local: false gets its links without an IPv6 link-local address,
// whoever makes its end (its own ADD, or its veth peer's); a pod that says
// nothing keeps the kernel's. IPv4 addresses carry traffic either way.
func TestKernelLinkLocalIPv6IsTheTopologys(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("ll")
	off := topology(t, lab, "ll", "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", "10.0.1.2/30"),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", "10.0.2.2/30"))
	off.Spec.IPv6LinkLocal = new(bool)
	if err := lab.Client.Update(context.Background(), off); err != nil {
		t.Fatal(err)
	}
	topology(t, lab, "ll", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", "10.0.1.1/30"))
	topology(t, lab, "ll", "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", "10.0.2.1/30"))
	r1, r2, r3 := lab.AddPod(a, "ll", "r1"), lab.AddPod(a, "ll", "r2"), lab.AddPod(b, "ll", "r3")
	cni(t, r1, "ADD") // r1's eth2 (VXLAN); its veth waits for r2
	cni(t, r2, "ADD") // both ends of the veth
	cni(t, r3, "ADD")
	linkLocal := func(p *labnet.Pod, intf string) string {
		t.Helper()
		out, err := p.Run("ip", "-6", "-o", "addr", "show", "dev", intf, "scope", "link")
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", p.Name, intf, err, out)
		}
		return strings.TrimSpace(out)
	}
	for _, e := range []struct {
		p    *labnet.Pod
		intf string
		want bool
	}{{r1, "eth1", false}, {r1, "eth2", false}, {r2, "eth1", true}, {r3, "eth1", true}} {
		if got := linkLocal(e.p, e.intf); (got != "") != e.want {
			t.Errorf("%s %s: link-local addresses %q, want some: %v", e.p.Name, e.intf, got, e.want)
		}
	}
	ping(t, r1, "10.0.1.2")
	ping(t, r1, "10.0.2.2")
}
