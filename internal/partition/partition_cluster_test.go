//go:build cluster

package partition

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterDaemonForPastAThousandNodes spreads 1,200 daemons over slices of
// 100 endpoints, as the EndpointSlice controller does, and finds each node's.
func TestClusterDaemonForPastAThousandNodes(t *testing.T) {
	env := clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshnet"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const nodes, perSlice = 1200, 100
	for s := 0; s < nodes/perSlice; s++ {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "meshnet", Name: fmt.Sprintf("meshnetd-%d", s),
				Labels: map[string]string{discoveryv1.LabelServiceName: "meshnetd"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](51111)}, {Name: ptr.To("http"), Port: ptr.To[int32](51112)}},
		}
		for i := s * perSlice; i < (s+1)*perSlice; i++ {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.1", i/256, i%256)},
				NodeName:   ptr.To(fmt.Sprintf("node-%d", i)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i != 7)},
			})
		}
		if err := env.Client.Create(ctx, slice); err != nil {
			t.Fatal(err)
		}
	}

	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := IndexEndpointSlices(ctx, c); err != nil {
		t.Fatal(err)
	}
	go c.Start(ctx)
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	r := &Resolver{Reader: c, Namespace: "meshnet", Service: "meshnetd", Port: "grpc"}

	for _, i := range []int{0, 99, 100, 555, 1199} {
		got, err := r.DaemonFor(ctx, fmt.Sprintf("node-%d", i))
		want := fmt.Sprintf("10.%d.%d.1:51111", i/256, i%256)
		if err != nil || got != want {
			t.Errorf("DaemonFor(node-%d) = %q, %v; want %q", i, got, err, want)
		}
	}
	if _, err := r.DaemonFor(ctx, "node-7"); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("DaemonFor(node-7), whose daemon is not ready: %v, want ErrNoDaemon", err)
	}
	if _, err := r.DaemonFor(ctx, "node-5000"); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("DaemonFor(node-5000): %v, want ErrNoDaemon", err)
	}
}
