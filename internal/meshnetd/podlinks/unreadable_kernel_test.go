//go:build kernel

package podlinks

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestKernelTopologyUnreadable: when the API server cannot be asked for the
// pod's Topology, ADD fails with Unavailable (the plugin's try-again-later)
// naming the Topology, and records nothing.
func TestKernelTopologyUnreadable(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	broken := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	store, err := podstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{NodeName: "n", NodeIP: netip.MustParseAddr("10.250.0.2"), Store: store, Topologies: broken, Pods: broken, Client: broken})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.CNIServer().SetupPod(context.Background(), &meshnetv1.SetupPodRequest{
		Cni: &meshnetv1.CNIContext{ContainerId: "c1", Netns: netnstest.New(t)},
		Pod: &meshnetv1.PodRef{Namespace: "lab", Name: "r1"},
	})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "read Topology lab/r1") {
		t.Fatalf("SetupPod with the API unreachable: %v, want Unavailable naming the Topology", err)
	}
	if len(store.List()) != 0 {
		t.Errorf("pod records %v, want none", store.List())
	}
}
