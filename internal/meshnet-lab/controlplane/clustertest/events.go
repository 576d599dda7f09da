package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// WatchEvents returns how many watch events of resource ("topologies") the
// API server sent its watchers, bookmarks too, while do ran and for settle
// after: what a test's watchers had to decode.
func (e *Env) WatchEvents(t testing.TB, resource string, settle time.Duration, do func()) float64 {
	t.Helper()
	ctx := context.Background()
	before, err := e.ControlPlane.WatchEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do()
	time.Sleep(settle)
	after, err := e.ControlPlane.WatchEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return after[resource] - before[resource]
}

// WriteTopologyStatus writes the status of the Topology named key n times,
// setting src_ip to 192.0.2.1 to 192.0.2.n, as a status writer would.
func (e *Env) WriteTopologyStatus(t testing.TB, key client.ObjectKey, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		topo := &v1beta1.Topology{}
		if err := e.Client.Get(ctx, key, topo); err != nil {
			t.Fatal(err)
		}
		topo.Status.SrcIP = fmt.Sprintf("192.0.2.%d", i+1)
		if err := e.Client.Status().Update(ctx, topo); err != nil {
			t.Fatal(err)
		}
	}
}
