//go:build cluster

package topotrack

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// TestClusterTrackerWatchesItsPodsOnly: the Tracker follows the pod store,
// holds the Topologies of the pods in it (one created after it started
// too), and the API server sends it no event of another pod's Topology.
func TestClusterTrackerWatchesItsPodsOnly(t *testing.T) {
	env, ctx, tr := trackerEnv(t)
	for _, name := range []string{"r1", "r2"} {
		if err := env.Client.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	store, err := podstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/run/netns/r1"}); err != nil {
		t.Fatal(err)
	}
	tr.Follow(store)
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r3", ContainerID: "c3", Netns: "/run/netns/r3"}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(tr.Tracked()); got != "[lab/r1 lab/r3]" {
		t.Fatalf("Tracked() = %s, want [lab/r1 lab/r3]", got)
	}

	// r3's Topology is created after its watch started.
	if err := env.Client.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "r3"}}); err != nil {
		t.Fatal(err)
	}
	seen := func(name, srcIP string) {
		t.Helper()
		var got v1beta1.Topology
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			return tr.Get(ctx, client.ObjectKey{Namespace: "lab", Name: name}, &got) == nil && got.Status.SrcIP == srcIP, nil
		})
		if err != nil {
			t.Fatalf("Get(lab/%s) never had status.src_ip %q: %v (last: %+v)", name, srcIP, err, got.Status)
		}
	}
	seen("r1", "")
	seen("r3", "")
	if err := tr.Get(ctx, client.ObjectKey{Namespace: "lab", Name: "r2"}, &v1beta1.Topology{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get(lab/r2), a pod not in the store: %v, want NotFound", err)
	}

	writes := func(name string, n int, tracked bool) float64 {
		t.Helper()
		settle := 500 * time.Millisecond // for any event that would come
		if tracked {
			settle = 0
		}
		return env.WatchEvents(t, "topologies", settle, func() {
			env.WriteTopologyStatus(t, client.ObjectKey{Namespace: "lab", Name: name}, n)
			if tracked {
				seen(name, fmt.Sprintf("192.0.2.%d", n))
			}
		})
	}
	// The API server counts bookmarks too: one a watch at most, in
	// these half seconds.
	writes("r2", 0, false) // the watches' first bookmarks
	if got := writes("r2", 20, false); got > 2 {
		t.Errorf("20 status writes to r2's Topology sent %v watch events; want bookmarks at most: no pod in the store is r2", got)
	}
	if got := writes("r1", 20, true); got < 20 || got > 22 {
		t.Errorf("20 status writes to r1's Topology sent %v watch events; want 20 and bookmarks", got)
	}

	if err := store.Delete(podstore.Key{Namespace: "lab", Name: "r1"}, ""); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(tr.Tracked()); got != "[lab/r3]" {
		t.Errorf("Tracked() after r1 left the store = %s, want [lab/r3]", got)
	}
	if err := tr.Get(ctx, client.ObjectKey{Namespace: "lab", Name: "r1"}, &v1beta1.Topology{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get(lab/r1) after it left the store: %v, want NotFound", err)
	}
	if got := writes("r1", 5, false); got > 1 {
		t.Errorf("5 status writes to r1's Topology after it left the store sent %v watch events; want bookmarks at most", got)
	}
}

// TestClusterTrackerSharesOnlyWhenAsked: Get with
// client.UnsafeDisableDeepCopy hands every caller the cached Topology's
// links, no copy (a pod's far-end calls, one per link, read its Topology
// all at once); a plain Get hands each its own.
func TestClusterTrackerSharesOnlyWhenAsked(t *testing.T) {
	env, ctx, tr := trackerEnv(t)
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "r1"}, Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{
		{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"},
		{UID: 2, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth1"},
	}}}
	if err := env.Client.Create(ctx, topo); err != nil {
		t.Fatal(err)
	}
	store, err := podstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(podstore.Pod{Namespace: "lab", Name: "r1", ContainerID: "c1", Netns: "/run/netns/r1"}); err != nil {
		t.Fatal(err)
	}
	tr.Follow(store)
	key := client.ObjectKey{Namespace: "lab", Name: "r1"}
	var a, b, own v1beta1.Topology
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return tr.Get(ctx, key, &a, client.UnsafeDisableDeepCopy) == nil, nil
	})
	if err != nil {
		t.Fatalf("Get(lab/r1) never found it: %v", err)
	}
	if err := tr.Get(ctx, key, &b, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	if err := tr.Get(ctx, key, &own); err != nil {
		t.Fatal(err)
	}
	if len(a.Spec.Links) != 2 || len(own.Spec.Links) != 2 || own.Spec.Links[1].PeerPod != "r3" {
		t.Fatalf("Get(lab/r1): links %+v and %+v, want the 2 created", a.Spec.Links, own.Spec.Links)
	}
	if &a.Spec.Links[0] != &b.Spec.Links[0] {
		t.Error("two Gets with UnsafeDisableDeepCopy have links of their own, want the cache's")
	}
	if &own.Spec.Links[0] == &a.Spec.Links[0] {
		t.Error("a plain Get shares the cache's links, want a copy")
	}
	own.Spec.Links[0].PeerPod = "changed"
	if a.Spec.Links[0].PeerPod != "r2" {
		t.Error("changing a plain Get's copy changed the cache")
	}
}

// TestClusterTrackerTellsDeletes: OnDelete's function hears of the deletes
// of the Topologies tracked before it was set and after, and of nothing
// else: not of an untracked pod's, nor of an edit.
func TestClusterTrackerTellsDeletes(t *testing.T) {
	env, ctx, tr := trackerEnv(t)
	for _, name := range []string{"r1", "r2", "r3"} {
		if err := env.Client.Create(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	r1, r2 := client.ObjectKey{Namespace: "lab", Name: "r1"}, client.ObjectKey{Namespace: "lab", Name: "r2"}
	tr.Track(r1)
	deleted := make(chan client.ObjectKey, 10)
	tr.OnDelete(func(k client.ObjectKey) { deleted <- k })
	tr.Track(r2)
	for _, k := range []client.ObjectKey{r1, r2} {
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			return tr.Get(ctx, k, &v1beta1.Topology{}) == nil, nil
		})
		if err != nil {
			t.Fatalf("Get(%s) never found it: %v", k, err)
		}
	}
	env.WriteTopologyStatus(t, r1, 1)
	for _, name := range []string{"r3", "r1", "r2"} {
		if err := env.Client.Delete(ctx, &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case k := <-deleted:
			got = append(got, k.String())
		case <-timeout:
			t.Fatalf("deletes told: %v, want lab/r1 and lab/r2", got)
		}
	}
	select {
	case k := <-deleted:
		got = append(got, k.String())
	case <-time.After(500 * time.Millisecond):
	}
	if fmt.Sprint(got) != "[lab/r1 lab/r2]" {
		t.Errorf("deletes told: %v, want [lab/r1 lab/r2] (r3 is not tracked, an edit is not a delete)", got)
	}
}

// trackerEnv starts an API server with a namespace lab and a Tracker of
// it, closed at the test's end.
func trackerEnv(t *testing.T) (*clustertest.Env, context.Context, *Tracker) {
	t.Helper()
	env := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	tr := New(c)
	t.Cleanup(tr.Close)
	return env, ctx, tr
}
