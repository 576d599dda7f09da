//go:build kernel

package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// The controller's leader election runs with meshnet-controller's defaults
// (--leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
// --leader-elect-retry-period 2s). An API server outage shorter than the
// renew deadline is ridden out by the running leader; a longer one makes it
// give up leadership and exit, as controller-runtime does, and the replica
// restarted after it (kubelet) campaigns, takes the expired Lease and
// converges everything from its first list. Meanwhile the kernel state stays
// as the daemons left it.

// lostLeadership is what meshnet-controller prints as it exits when it could
// not renew its Lease.
const lostLeadership = "meshnet-controller: leader election lost"

func lease(t testing.TB, p *pair) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := p.lab.Client.Get(context.Background(), client.ObjectKey{Namespace: daemonNS, Name: leaseName}, l); err != nil {
		t.Fatalf("leader election Lease: %v", err)
	}
	return l
}

// mtuEdits makes a run of mtu edits on r1's eth1 and waits for the last in
// r1's kernel and status.
func mtuEdits(t testing.TB, p *pair, mtus ...int32) {
	t.Helper()
	for _, mtu := range mtus {
		mustEdit(t, p.lab, "r1", setMTU(ptr.To(mtu), "eth1"))
	}
	last := mtus[len(mtus)-1]
	waitKernel(t, p.r1.Netns, "eth1", 30*time.Second, func(s links.Reading) bool { return s.MTU == int(last) })
	waitStatus(t, p.lab, "r1", 30*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth1")
		return converged(topo) && l != nil && l.MTU == last
	})
}

// addPodsAfterOutage wires two new pods joined across the nodes (r4 on node
// a, r5 on node b): the daemons' caches have to be back in step with the API
// server for their CNI ADDs, and the controller for their status.
func addPodsAfterOutage(t testing.TB, p *pair) {
	t.Helper()
	topology(t, p.lab, "r4", link(3, "r5", "eth1", "eth1", "10.0.3.1/30", "10.0.3.2/30"))
	topology(t, p.lab, "r5", link(3, "r4", "eth1", "eth1", "10.0.3.2/30", "10.0.3.1/30"))
	r4, r5 := p.lab.AddPod(p.a, "lab", "r4"), p.lab.AddPod(p.b, "lab", "r5")
	cni(t, r4, "ADD")
	cni(t, r5, "ADD")
	if err := pings(r4, "10.0.3.2", 5); err != nil {
		t.Errorf("new pods after the outage: %v", err)
	}
	for _, name := range []string{"r4", "r5"} {
		waitStatus(t, p.lab, name, 30*time.Second, func(topo *v1beta1.Topology) bool {
			l := linkStatus(topo, "eth1")
			return converged(topo) && l != nil && l.Kind == v1beta1.LinkKindVXLAN
		})
	}
}

// TestKernelAPIServerRestart restarts the API server (etcd stays) between
// two runs of edits, down for less than the renew deadline: the same
// controller process keeps the Lease, renews it, and converges the edits
// made after; the daemons wire new pods.
func TestKernelAPIServerRestart(t *testing.T) {
	p := newPair(t)
	mtuEdits(t, p, 1400, 1450, 1420)
	before := lease(t, p)

	outage := p.lab.Env.RestartAPIServer(t, 2*time.Second)
	t.Logf("API server unreachable for %v", outage.Round(time.Millisecond))

	mtuEdits(t, p, 1380, 1500, 1440)
	mustEdit(t, p.lab, "r1", setState(ptr.To(v1beta1.LinkDown), "eth2"))
	waitKernel(t, p.r1.Netns, "eth2", 30*time.Second, down)
	waitKernel(t, p.r3.Netns, "eth1", 30*time.Second, down)
	waitStatus(t, p.lab, "r1", 30*time.Second, func(topo *v1beta1.Topology) bool {
		l := linkStatus(topo, "eth2")
		return converged(topo) && l != nil && l.State == v1beta1.LinkDown
	})

	// Renewed after the outage, by the same holder.
	deadline := time.Now().Add(30 * time.Second)
	for {
		after := lease(t, p)
		if h := ptr.Deref(after.Spec.HolderIdentity, ""); h != ptr.Deref(before.Spec.HolderIdentity, "") {
			t.Fatalf("Lease holder changed from %q to %q", ptr.Deref(before.Spec.HolderIdentity, ""), h)
		}
		if after.Spec.RenewTime != nil && after.Spec.RenewTime.After(before.Spec.RenewTime.Add(outage)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lease not renewed after the outage: renew time %v, was %v", after.Spec.RenewTime, before.Spec.RenewTime)
		}
		time.Sleep(200 * time.Millisecond)
	}
	addPodsAfterOutage(t, p)
	if strings.Contains(p.ctrl.Log(), lostLeadership) {
		t.Errorf("the controller lost leadership over a %v outage:\n%s", outage, tail(p.ctrl.Log()))
	}
}

// TestKernelAPIServerOutageLosesLeadership keeps the API server away for
// 20s, longer than the renew deadline: the leader exits, the data plane is
// left as it was, and a replica started after it (as kubelet restarts the
// container) converges the edits made once the API server is back.
func TestKernelAPIServerOutageLosesLeadership(t *testing.T) {
	p := newPair(t)
	mtuEdits(t, p, 1400, 1450)
	first := ptr.Deref(lease(t, p).Spec.HolderIdentity, "")

	outage := p.lab.Env.RestartAPIServer(t, 20*time.Second)
	t.Logf("API server unreachable for %v", outage.Round(time.Millisecond))
	// Its last words, printed as it exits.
	if !strings.Contains(p.ctrl.Log(), lostLeadership) {
		t.Fatalf("meshnet-controller did not give up leadership over a %v outage, past its renew deadline:\n%s", outage, tail(p.ctrl.Log()))
	}
	if s := readState(t, p.r1.Netns, "eth1"); s.MTU != 1450 || !s.AdminUp {
		t.Errorf("kernel eth1 after the outage: %+v, want mtu 1450 and up", s)
	}
	if err := pings(p.r1, "10.0.2.2", 3); err != nil {
		t.Errorf("data plane after the outage: %v", err)
	}

	// Edits made before the new replica runs wait for it.
	mustEdit(t, p.lab, "r1", setMTU(ptr.To[int32](1380), "eth1"))
	restarted := time.Now()
	p.ctrl = startController(t, p.lab, p.a, "controller-restarted")
	waitKernel(t, p.r1.Netns, "eth1", 30*time.Second, func(s links.Reading) bool { return s.MTU == 1380 })
	t.Logf("restarted replica converged the pending edit in %v", time.Since(restarted).Round(time.Millisecond))
	if h := ptr.Deref(lease(t, p).Spec.HolderIdentity, ""); h == first || h == "" {
		t.Errorf("Lease holder %q after the restart, want the new replica (was %q)", h, first)
	}
	mtuEdits(t, p, 1500, 1420)
	addPodsAfterOutage(t, p)
}
