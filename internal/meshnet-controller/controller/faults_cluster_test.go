//go:build cluster

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterFaultMetrics: the faults of a real API server by namespace and
// phase at the scrape, and the links they hold, as their statuses count them.
func TestClusterFaultMetrics(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"lab", "other"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	links := []v1beta1.FaultLink{{Pod: "r1", Interface: "eth1"}, {Pod: "r2", Interface: "eth1"}}
	for _, f := range []struct {
		ns, name string
		start    time.Time
	}{
		{"lab", "cut", now},                     // Active, 2 links
		{"lab", "later", now.Add(time.Hour)},    // Pending
		{"lab", "over", now.Add(-time.Hour)},    // Completed
		{"other", "cut", now.Add(-time.Second)}, // Active, 1 link of 2 in a Topology
	} {
		obj := &v1beta1.LinkFault{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name}, Spec: v1beta1.LinkFaultSpec{
			Links: links, State: ptr.To(v1beta1.LinkDown), Duration: "10m", Start: &metav1.MicroTime{Time: f.start}}}
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP meshnet_linkfault_held_links Links that LinkFaults hold now, by namespace: the sum of their status.held_links.
# TYPE meshnet_linkfault_held_links gauge
meshnet_linkfault_held_links{namespace="lab"} 2
meshnet_linkfault_held_links{namespace="other"} 1
# HELP meshnet_linkfaults LinkFaults by namespace and phase (Pending, Active, Waiting, Completed, Suspended, Invalid).
# TYPE meshnet_linkfaults gauge
meshnet_linkfaults{namespace="lab",phase="Active"} 1
meshnet_linkfaults{namespace="lab",phase="Completed"} 1
meshnet_linkfaults{namespace="lab",phase="Pending"} 1
meshnet_linkfaults{namespace="other",phase="Active"} 1
`
	// The status writer counts what each fault holds: "other" has no
	// Topology r2.
	topos := []struct{ ns, name string }{{"lab", "r1"}, {"lab", "r2"}, {"other", "r1"}}
	for _, tp := range topos {
		topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: tp.ns, Name: tp.name},
			Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{{UID: 1, PeerPod: "x", LocalIntf: "eth1", PeerIntf: "eth1"}}}}
		if err := env.Client.Create(ctx, topo); err != nil {
			t.Fatal(err)
		}
	}
	writer := &faultStatus{client: env.Client, recorder: events.NewFakeRecorder(100)}
	for _, key := range []types.NamespacedName{{Namespace: "lab", Name: "cut"}, {Namespace: "lab", Name: "later"}, {Namespace: "lab", Name: "over"}, {Namespace: "other", Name: "cut"}} {
		if _, err := writer.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatalf("status of %s: %v", key, err)
		}
	}
	if err := testutil.CollectAndCompare(&faultMetrics{reader: env.Client}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
