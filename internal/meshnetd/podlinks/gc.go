package podlinks

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// gcWorkers bounds how many stale pods GC tears down at once: each may wait
// up to peerCallTimeout on a peer node that does not answer.
const gcWorkers = 4

// GarbageCollect is CNI GC: every pod recorded for the network whose
// sandbox the runtime no longer lists is torn down as DEL would, remote
// VXLAN ends included. A record with no network (written before ADD kept
// it) counts as the network's: meshnet installs one conflist.
func (s cniServer) GarbageCollect(ctx context.Context, req *meshnetv1.GarbageCollectRequest) (*meshnetv1.GarbageCollectResponse, error) {
	rc := s.rc
	network := req.GetNetwork()
	if network == "" {
		return nil, status.Error(codes.InvalidArgument, "network name is required")
	}
	valid := map[string]bool{}
	for i, a := range req.GetValidAttachments() {
		if a.GetContainerId() == "" {
			return nil, status.Errorf(codes.InvalidArgument, "valid attachment %d has no container id", i)
		}
		valid[a.GetContainerId()] = true
	}
	var stale []podstore.Pod
	for _, rec := range rc.cfg.Store.List() {
		if valid[rec.ContainerID] || (rec.Network != "" && rec.Network != network) || rc.isAdding(rec.ContainerID) {
			continue
		}
		stale = append(stale, rec)
	}
	log := rc.log.With("network", network)
	if len(stale) == 0 {
		log.Debug("GC: no stale pods", "valid_attachments", len(valid))
		return &meshnetv1.GarbageCollectResponse{}, nil
	}

	collected := make([]*meshnetv1.CollectedPod, len(stale))
	failed := make([]string, len(stale))
	sem := make(chan struct{}, gcWorkers)
	var wg sync.WaitGroup
	for i, rec := range stale {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			k := rec.Key()
			plog := log.With("pod", k.String(), "container_id", rec.ContainerID)
			// A DEL or a new sandbox's ADD may have come since the listing.
			if cur, ok := rc.cfg.Store.Get(k); !ok || cur.ContainerID != rec.ContainerID {
				return
			}
			removed, err := rc.teardown(ctx, rec, plog)
			if err != nil {
				plog.Error("GC: stale pod not torn down", "error", err)
				failed[i] = fmt.Sprintf("%s (container %s): %v", k, rec.ContainerID, err)
				return
			}
			for _, l := range rec.Links {
				plog.Info("GC: stale link removed", "link", l.UID, "intf", l.LocalIntf, "kind", l.Kind,
					"peer", l.PeerPod, "peer_node_ip", l.PeerNodeIP)
			}
			collected[i] = &meshnetv1.CollectedPod{
				Pod:         &meshnetv1.PodRef{Namespace: k.Namespace, Name: k.Name},
				ContainerId: rec.ContainerID,
				Links:       removed,
			}
		})
	}
	wg.Wait()

	resp := &meshnetv1.GarbageCollectResponse{}
	var errs []string
	for i := range stale {
		if collected[i] != nil {
			resp.Pods = append(resp.Pods, collected[i])
		}
		if failed[i] != "" {
			errs = append(errs, failed[i])
		}
	}
	if len(errs) > 0 {
		return nil, status.Errorf(codes.Internal, "GC of network %s: %d of %d stale pods not torn down: %s",
			network, len(errs), len(stale), strings.Join(errs, "; "))
	}
	log.Info("GC: stale pods torn down", "pods", len(resp.Pods))
	return resp, nil
}
