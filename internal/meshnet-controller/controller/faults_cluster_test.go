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
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterFaultMetrics: the faults of a real API server by namespace and
// phase at the scrape, and the links those in a window hold.
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
		{"other", "cut", now.Add(-time.Second)}, // Active, 2 links
	} {
		obj := &v1beta1.LinkFault{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name}, Spec: v1beta1.LinkFaultSpec{
			Links: links, State: ptr.To(v1beta1.LinkDown), Duration: "10m", Start: &metav1.MicroTime{Time: f.start}}}
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP meshnet_linkfault_held_links Links that LinkFaults in a window name, by namespace.
# TYPE meshnet_linkfault_held_links gauge
meshnet_linkfault_held_links{namespace="lab"} 2
meshnet_linkfault_held_links{namespace="other"} 2
# HELP meshnet_linkfaults LinkFaults by namespace and phase (Pending, Active, Waiting, Completed, Suspended, Invalid).
# TYPE meshnet_linkfaults gauge
meshnet_linkfaults{namespace="lab",phase="Active"} 1
meshnet_linkfaults{namespace="lab",phase="Completed"} 1
meshnet_linkfaults{namespace="lab",phase="Pending"} 1
meshnet_linkfaults{namespace="other",phase="Active"} 1
`
	if err := testutil.CollectAndCompare(&faultMetrics{reader: env.Client}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
