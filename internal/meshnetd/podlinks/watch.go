package podlinks

import (
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/linkwatch"
)

// WatchLinks implements meshnetv1.LinkServiceServer.
func (s linkServer) WatchLinks(req *meshnetv1.WatchLinksRequest, stream grpc.ServerStreamingServer[meshnetv1.WatchLinksResponse]) error {
	rc := s.rc
	var v violations
	if req.GetNamespace() != "" {
		v.namespace(req.GetNamespace())
	}
	if req.GetPod() != "" {
		if req.GetNamespace() == "" {
			v.add("pod", "needs a namespace")
		}
		v.pod("pod", req.GetPod())
	}
	if err := v.err(); err != nil {
		return err
	}
	w := rc.watch.Watch(req.GetNamespace(), req.GetPod())
	defer w.Stop()
	for {
		ev, err := w.Next(stream.Context())
		switch {
		case errors.Is(err, linkwatch.ErrTooSlow):
			return status.Error(codes.ResourceExhausted, "watch ended: the client fell too far behind; watch again")
		case err != nil:
			return status.FromContextError(err).Err()
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
}
