package gateway

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/restapi"
)

// captureHandler relays CaptureLink; errors are written by gw with m, as
// every other REST call's.
func captureHandler(c meshnetv1.LinkServiceClient, gw *runtime.ServeMux, m runtime.Marshaler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) { runtime.HTTPError(r.Context(), gw, m, w, r, err) }
		req := &meshnetv1.CaptureLinkRequest{
			Namespace: r.PathValue("namespace"), Pod: r.PathValue("pod"), Interface: r.PathValue("interface"),
		}
		if err := restapi.CaptureParams(r.URL.Query(), req); err != nil {
			fail(status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		ctx := r.Context()
		if auth := r.Header.Get("Authorization"); auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		stream, err := c.CaptureLink(ctx, req)
		if err != nil {
			fail(err)
			return
		}
		restapi.WriteCapture(w, stream, fail)
	}
}
