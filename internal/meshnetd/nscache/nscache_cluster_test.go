//go:build cluster

package nscache

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterReaderWatchesWhatIsRead: a namespace's informers start at its
// first read and stop once nobody reads it; the API server sends the
// Reader no event of a namespace it is not reading.
func TestClusterReaderWatchesWhatIsRead(t *testing.T) {
	env := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range []string{"a", "b"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}}); err != nil {
			t.Fatal(err)
		}
	}
	const idle = time.Second
	r, err := New(Config{Rest: env.Config, Scheme: env.Scheme, Idle: idle})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()

	if err := r.List(ctx, &v1beta1.TopologyList{}); !errors.Is(err, ErrNoNamespace) {
		t.Errorf("List across namespaces: %v, want ErrNoNamespace", err)
	}
	var list v1beta1.TopologyList
	if err := r.List(ctx, &list, client.InNamespace("a")); err != nil || len(list.Items) != 1 {
		t.Fatalf("List in a: %d items, %v; want r1", len(list.Items), err)
	}
	if got := r.Namespaces(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Namespaces() = %v, want [a]", got)
	}

	writes := func(ns string, n int) float64 {
		t.Helper()
		return env.WatchEvents(t, "topologies", idle/2, func() {
			env.WriteTopologyStatus(t, client.ObjectKey{Namespace: ns, Name: "r1"}, n)
		})
	}
	// Each read keeps a in use; the API server counts bookmarks too.
	r.List(ctx, &list, client.InNamespace("a"))
	if got := writes("b", 10); got > 1 {
		t.Errorf("10 writes in namespace b, never read, sent %v watch events; want a bookmark at most", got)
	}
	r.List(ctx, &list, client.InNamespace("a"))
	if got := writes("a", 10); got < 10 || got > 11 {
		t.Errorf("10 writes in namespace a, being read, sent %v watch events; want 10 and a bookmark at most", got)
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: "a", Name: "r1"}, &v1beta1.Topology{}); err != nil {
		t.Errorf("Get(a/r1): %v", err)
	}

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*idle, true, func(context.Context) (bool, error) {
		return len(r.Namespaces()) == 0, nil
	})
	if err != nil {
		t.Fatalf("namespace a, unread for %v, still has informers: %v", idle, r.Namespaces())
	}
	time.Sleep(idle / 2) // the informer's watch to close
	if got := writes("a", 10); got > 0 {
		t.Errorf("10 writes in namespace a, no longer read, sent %v watch events; want none", got)
	}

	// Past MaxNamespaces, the namespace read longest ago goes first.
	small, err := New(Config{Rest: env.Config, Scheme: env.Scheme, MaxNamespaces: 1})
	if err != nil {
		t.Fatal(err)
	}
	go small.Run(rctx)
	for _, ns := range []string{"a", "b"} {
		if err := small.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
			t.Fatalf("List in %s: %d items, %v; want r1", ns, len(list.Items), err)
		}
	}
	if got := small.Namespaces(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("with MaxNamespaces 1, after reading a then b: Namespaces() = %v, want [b]", got)
	}

	stop()
	<-done
	if err := r.Get(ctx, client.ObjectKey{Namespace: "a", Name: "r1"}, &v1beta1.Topology{}); !errors.Is(err, ErrStopped) {
		t.Errorf("Get after Run returned: %v, want ErrStopped", err)
	}
}
