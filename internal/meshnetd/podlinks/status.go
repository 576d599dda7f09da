package podlinks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// statusWorkers write Topology statuses concurrently; one pod's status is
// never written by two at once (the queue hands a key to one worker).
const statusWorkers = 2

// A far end owed is asked for again owedRetry after it was not made, then
// twice as long after each failure, up to owedRetryMax (the controller's
// resync), by owedWorkers pods at a time.
const (
	owedRetry    = 5 * time.Second
	owedRetryMax = 30 * time.Second
	owedWorkers  = 2
)

// runQueues writes the sandbox fields of the Topology status of pods wired
// or torn down here, and asks for the far ends owed to them (askOwed),
// until ctx ends. ADD does not wait for it.
func (rc *Reconciler) runQueues(ctx context.Context) {
	go func() {
		<-ctx.Done()
		rc.status.ShutDown()
		rc.owed.ShutDown()
		rc.unwired.ShutDown()
	}()
	var wg sync.WaitGroup
	// The far ends a daemon before this one left owed.
	for _, p := range rc.cfg.Store.List() {
		if slices.ContainsFunc(p.Links, farEndOwed) {
			rc.owed.Add(p.Key())
		}
	}
	rc.serve(ctx, &wg, rc.owed, owedWorkers, "far ends owed not asked for", rc.askOwed)
	rc.serve(ctx, &wg, rc.unwired, unwiredWorkers, "links of a pod whose Topology was deleted not removed", rc.unwire)
	rc.serve(ctx, &wg, rc.status, statusWorkers, "topology status not written", func(ctx context.Context, k podstore.Key) error {
		err := rc.writeStatus(ctx, k)
		if err == nil {
			rc.status.Forget(k)
		}
		return err
	})
	wg.Wait()
}

// serve hands the pods of q to do on workers goroutines of wg until q
// shuts down: a pod do fails for comes back after q's backoff, and the log
// says what failed did not happen. do forgets a pod's failures itself.
func (rc *Reconciler) serve(ctx context.Context, wg *sync.WaitGroup, q workqueue.TypedRateLimitingInterface[podstore.Key], workers int, failed string,
	do func(context.Context, podstore.Key) error) {
	for range workers {
		wg.Go(func() {
			for {
				k, quit := q.Get()
				if quit {
					return
				}
				if err := do(ctx, k); err != nil && ctx.Err() == nil {
					rc.log.Warn(failed+"; retrying", "pod", k.String(), "error", err)
					q.AddRateLimited(k)
				}
				q.Done(k)
			}
		})
	}
}

// writeStatus patches the status of a pod's Topology with what this node
// has for it.
func (rc *Reconciler) writeStatus(ctx context.Context, k podstore.Key) error {
	rec, wiredHere := rc.wiredPod(k)
	// Named once its ADD succeeded: this write may come while a failed
	// ADD is still returning, before its sandbox counts as abandoned.
	wiredHere = wiredHere && !rec.Adding
	if !wiredHere {
		// Torn down here: clear the fields unless another node has the
		// pod now, whose status they are.
		topo, err := rc.topology(ctx, k)
		if err != nil || topo == nil {
			return err
		}
		if topo.Status.Node != "" && topo.Status.Node != rc.cfg.NodeName {
			return nil
		}
	}
	st := rc.buildStatus(rec, wiredHere)
	for f, v := range st {
		if v == nil {
			delete(st, f) // left out of an apply, a field meshnetd owned is removed
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode Topology %s status: %w", k, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("encode Topology %s status: %w", k, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if len(fields) > 0 {
		// Nothing to own is said by leaving status out: an empty status
		// reaches the API server as null, which the CRD refuses.
		u.Object["status"] = fields
	}
	u.SetAPIVersion(v1beta1.GroupVersion.String())
	u.SetKind("Topology")
	u.SetNamespace(k.Namespace)
	u.SetName(k.Name)
	// Server-side apply: meshnetd and the controller each own the fields
	// they write, so neither wipes the other's (the controller's
	// links[].managed, for one).
	err = rc.cfg.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(StatusFieldOwner), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return nil // no Topology: nothing to say it on
	}
	if err != nil {
		return fmt.Errorf("apply Topology %s status: %w", k, err)
	}
	return nil
}

// StatusFieldOwner is meshnetd's server-side-apply manager of Topology status.
const StatusFieldOwner = "meshnetd"

// buildStatus is the status fields meshnetd owns, meshnet-cni's fields of
// the sandbox this node wired: only the CNI knows them. Everything else in
// the status (links, counts, conditions, node, skipped) is the
// controller's, written from what this node's WatchLinks tells it. nil
// values are fields meshnetd no longer sets.
func (rc *Reconciler) buildStatus(rec podstore.Pod, wiredHere bool) map[string]any {
	out := map[string]any{"src_ip": nil, "net_ns": nil, "container_id": nil}
	if wiredHere {
		out["src_ip"], out["net_ns"], out["container_id"] = rc.cfg.NodeIP.String(), rec.Netns, rec.ContainerID
	}
	return out
}
