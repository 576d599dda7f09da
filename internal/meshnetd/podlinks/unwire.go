package podlinks

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// unwiredWorkers remove the links of pods whose Topology was deleted, that
// many pods at a time.
const unwiredWorkers = 2

// TopologyDeleted queues the removal of the links of pod k, wired on this
// node, whose Topology was deleted: a pod without a Topology is a pod
// without links, as one whose Topology is not created yet. The Topology's
// absence is confirmed with the API server first (SyncLinks), so that one
// created again in between keeps the links it lists. A link's far end
// goes with it, and the peer's end of the link waits, as for a peer pod
// that is gone. It is meant as the Topologies' watch's delete handler.
func (rc *Reconciler) TopologyDeleted(k client.ObjectKey) {
	rc.unwired.Add(podstore.Key{Namespace: k.Namespace, Name: k.Name})
}

// unwire converges pod k's links to its Topology (none, when it is gone).
func (rc *Reconciler) unwire(ctx context.Context, k podstore.Key) error {
	if err := rc.SyncLinks(ctx, k, 0); err != nil {
		return err
	}
	rc.unwired.Forget(k)
	return nil
}
