//go:build cluster

package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterStatusOfTenThousandLinks writes, as the controller does, the
// status of a Topology of 10,000 links with addresses (as the wide pods'
// benchmark applies them): all up, then none wired yet. Listing every link,
// the request was 2,435,967 bytes, past the API server's 2 MiB to etcd
// ("trying to send message larger than max"), and the status was never
// written; it lists only the links not up as specified.
func TestClusterStatusOfTenThousandLinks(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}); err != nil {
		t.Fatal(err)
	}
	topo := wideTopology(v1beta1.MaxLinks)
	if err := env.Client.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace, pod.UID, pod.Spec.NodeName = topo.Name, "lab", "u1", "node-0"
	d, err := desiredState(topo, pod, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kernel := map[string]*meshnetv1.LinkStatus{}
	for _, l := range topo.Spec.Links {
		kernel[l.LocalIntf] = &meshnetv1.LinkStatus{Interface: l.LocalIntf, Uid: uint32(l.UID), Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN,
			AdminState: meshnetv1.LinkState_LINK_STATE_UP, Carrier: true, Mtu: 1450}
	}
	r := &Reconciler{Client: env.Client}
	for _, step := range []struct {
		name   string
		kernel map[string]*meshnetv1.LinkStatus
		listed int
		ready  metav1.ConditionStatus
	}{
		{"none wired yet", nil, v1beta1.MaxListedUnconverged, metav1.ConditionFalse},
		{"all up", kernel, 0, metav1.ConditionTrue},
	} {
		if err := r.writeStatus(ctx, topo, convergedStatus(topo, pod, d, step.kernel, nil)); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		var got v1beta1.Topology
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(topo), &got); err != nil {
			t.Fatal(err)
		}
		ready := got.ReadyCondition(got.Generation)
		if len(got.Status.Links) != step.listed || int(got.Status.OmittedLinks) != v1beta1.MaxLinks-step.listed || ready == nil || ready.Status != step.ready {
			t.Errorf("%s: status lists %d links, omits %d, Ready %v; want %d listed, the rest omitted, Ready %s",
				step.name, len(got.Status.Links), got.Status.OmittedLinks, ready, step.listed, step.ready)
		}
		spec, _ := json.Marshal(got.Spec)
		st, _ := json.Marshal(got.Status)
		t.Logf("%s: spec %d bytes, status %d, Ready %s", step.name, len(spec), len(st), ready.Status)
		topo = &got
	}
}

// wideTopology is lab/w<n>: n links to one peer, with addresses, without
// IPv6 link-local addresses past the CRD's limit for them.
func wideTopology(n int) *v1beta1.Topology {
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: fmt.Sprintf("w%d", n)}}
	if n > v1beta1.MaxLinksWithLinkLocal {
		topo.Spec.IPv6LinkLocal = new(bool)
	}
	for uid := 1; uid <= n; uid++ {
		intf := fmt.Sprintf("e%d", uid)
		topo.Spec.Links = append(topo.Spec.Links, v1beta1.Link{UID: uid, PeerPod: "peer", LocalIntf: intf, PeerIntf: intf,
			LocalIP: "10.0.0.1/30", PeerIP: "10.0.0.2/30"})
	}
	return topo
}

// BenchmarkClusterBatchWrites measures what the API server alone, with no
// daemon, controller or kernel work beside it, takes for the writes of
// BenchmarkKernelBatch1000Links's edit batch: 200 Topologies of 10 links
// (1,000 links), each edited as kubectl edit does (a get, then a merge
// patch), all at once (edits-s), then each status written as the
// controller writes it (status-s). It is the floor under that benchmark on
// the same machine.
func BenchmarkClusterBatchWrites(b *testing.B) {
	const pods, perPod = 200, 5 // 5 links to later pods, 5 from earlier ones
	env := clustertest.Start(b)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}); err != nil {
		b.Fatal(err)
	}
	specs := make([][]v1beta1.Link, pods)
	uid := 0
	for i := range pods {
		for d := 1; d <= perPod; d++ {
			j := (i + d) % pods
			uid++
			a, z := fmt.Sprintf("10.%d.%d.1/30", 64+uid/256, uid%256), fmt.Sprintf("10.%d.%d.2/30", 64+uid/256, uid%256)
			intf := fmt.Sprintf("e%d", uid)
			specs[i] = append(specs[i], v1beta1.Link{UID: uid, PeerPod: fmt.Sprintf("p%d", j), LocalIntf: intf, PeerIntf: intf, LocalIP: a, PeerIP: z})
			specs[j] = append(specs[j], v1beta1.Link{UID: uid, PeerPod: fmt.Sprintf("p%d", i), LocalIntf: intf, PeerIntf: intf, LocalIP: z, PeerIP: a})
		}
	}
	for i := range pods {
		topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: fmt.Sprintf("p%d", i)}, Spec: v1beta1.TopologySpec{Links: specs[i]}}
		if err := env.Client.Create(ctx, topo); err != nil {
			b.Fatal(err)
		}
	}
	r := &Reconciler{Client: env.Client, CallTimeout: time.Minute}
	each := func(do func(name string) error) (time.Duration, error) {
		start := time.Now()
		errs := make([]error, pods)
		var wg sync.WaitGroup
		for i := range pods {
			wg.Go(func() { errs[i] = do(fmt.Sprintf("p%d", i)) })
		}
		wg.Wait()
		return time.Since(start), errors.Join(errs...)
	}
	var edits, statuses, apiserver []time.Duration
	for b.Loop() {
		cpu0, err := env.ControlPlane.CPU()
		if err != nil {
			b.Fatal(err)
		}
		s, kernelState := v1beta1.LinkDown, meshnetv1.LinkState_LINK_STATE_DOWN
		if len(edits)%2 == 1 {
			s, kernelState = v1beta1.LinkUp, meshnetv1.LinkState_LINK_STATE_UP
		}
		took, err := each(func(name string) error {
			topo := &v1beta1.Topology{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "lab", Name: name}, topo); err != nil {
				return err
			}
			base := topo.DeepCopy()
			for i := range topo.Spec.Links {
				topo.Spec.Links[i].State = ptr.To(s)
			}
			return env.Client.Patch(ctx, topo, client.MergeFrom(base))
		})
		if err != nil {
			b.Fatalf("edits: %v", err)
		}
		edits = append(edits, took)
		took, err = each(func(name string) error {
			topo := &v1beta1.Topology{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "lab", Name: name}, topo); err != nil {
				return err
			}
			pod := &corev1.Pod{}
			pod.Name, pod.Namespace, pod.UID, pod.Spec.NodeName = name, "lab", types.UID("u-"+name), "node-0"
			d, err := desiredState(topo, pod, nil, nil, nil)
			if err != nil {
				return err
			}
			kernel := map[string]*meshnetv1.LinkStatus{}
			for _, l := range topo.Spec.Links {
				kernel[l.LocalIntf] = &meshnetv1.LinkStatus{
					Interface: l.LocalIntf, Kind: meshnetv1.LinkKind_LINK_KIND_VETH, AdminState: kernelState, Mtu: 1500,
				}
			}
			return r.writeStatus(ctx, topo, convergedStatus(topo, pod, d, kernel, nil))
		})
		if err != nil {
			b.Fatalf("status writes: %v", err)
		}
		statuses = append(statuses, took)
		cpu1, err := env.ControlPlane.CPU()
		if err != nil {
			b.Fatal(err)
		}
		apiserver = append(apiserver, cpu1.Sub(cpu0).Sum("kube-apiserver"))
		b.Logf("batch %d (%s): edits %v, status writes %v; kube-apiserver cpu %v", len(edits)-1, s, edits[len(edits)-1].Round(time.Millisecond),
			took.Round(time.Millisecond), apiserver[len(apiserver)-1].Round(10*time.Millisecond))
	}
	b.ReportMetric(MedianSeconds(edits), "edits-s")
	b.ReportMetric(MedianSeconds(statuses), "status-s")
	b.ReportMetric(MedianSeconds(apiserver), "apiserver-cpu-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClusterStatusWrite measures what one status write of a
// Topology of n links costs the API server, in processor time (its
// apiserver-cpu-ms/write) and wall time: every link's state flipped, as
// an edit of every link makes the controller write.
func BenchmarkClusterStatusWrite(b *testing.B) {
	env := clustertest.Start(b)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}); err != nil {
		b.Fatal(err)
	}
	r := &Reconciler{Client: env.Client}
	for _, n := range []int{64, 1024, 4096, 10000} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) {
			topo := wideTopology(n)
			if err := env.Client.Create(ctx, topo); err != nil {
				b.Fatal(err)
			}
			pod := &corev1.Pod{}
			pod.Name, pod.Namespace, pod.UID, pod.Spec.NodeName = topo.Name, "lab", types.UID("u-"+topo.Name), "node-0"
			d, err := desiredState(topo, pod, nil, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			before, err := env.ControlPlane.CPU()
			if err != nil {
				b.Fatal(err)
			}
			writes := 0
			for b.Loop() {
				state := meshnetv1.LinkState_LINK_STATE_DOWN
				if writes%2 == 1 {
					state = meshnetv1.LinkState_LINK_STATE_UP
				}
				kernel := map[string]*meshnetv1.LinkStatus{}
				for _, l := range topo.Spec.Links {
					kernel[l.LocalIntf] = &meshnetv1.LinkStatus{Interface: l.LocalIntf, Uid: uint32(l.UID),
						Kind: meshnetv1.LinkKind_LINK_KIND_VXLAN, AdminState: state, Mtu: 1450}
				}
				if err := r.writeStatus(ctx, topo, convergedStatus(topo, pod, d, kernel, nil)); err != nil {
					b.Fatal(err)
				}
				writes++
			}
			logSizes(b, env.Client, topo.Name)
			after, err := env.ControlPlane.CPU()
			if err != nil {
				b.Fatal(err)
			}
			used := after.Sub(before)
			b.ReportMetric(float64(used.Sum("kube-apiserver").Milliseconds())/float64(writes), "apiserver-cpu-ms/write")
			b.ReportMetric(float64(used.Sum("etcd").Milliseconds())/float64(writes), "etcd-cpu-ms/write")
		})
	}
}

// logSizes logs how large a Topology's parts are as stored: etcd refuses
// a request over 1.5 MiB.
func logSizes(b *testing.B, c client.Client, name string) {
	t := &v1beta1.Topology{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "lab", Name: name}, t); err != nil {
		b.Fatal(err)
	}
	spec, _ := json.Marshal(t.Spec)
	st, _ := json.Marshal(t.Status)
	mf, _ := json.Marshal(t.ManagedFields)
	b.Logf("%d links: spec %d bytes, status %d, managedFields %d", len(t.Spec.Links), len(spec), len(st), len(mf))
}
