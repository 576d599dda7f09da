package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// CapturePath is LinkService.CaptureLink over REST. grpc-gateway would put
// a delimiter between a stream's messages; this handler writes the pcapng
// stream as it is, application/x-pcapng, for curl ... | tshark -r -.
const CapturePath = "/v1/namespaces/{namespace}/pods/{pod}/links/{interface}/capture"

// captureQuery are CapturePath's query parameters.
var captureQuery = []string{"max_packets", "duration", "snap_length"}

// captureHandler relays CaptureLink; errors are written by gw with m, as
// every other REST call's.
func captureHandler(c meshnetv1.LinkServiceClient, gw *runtime.ServeMux, m runtime.Marshaler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) { runtime.HTTPError(r.Context(), gw, m, w, r, err) }
		req := &meshnetv1.CaptureLinkRequest{
			Namespace: r.PathValue("namespace"), Pod: r.PathValue("pod"), Interface: r.PathValue("interface"),
		}
		if err := captureParams(r, req); err != nil {
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
		// Refusals (a bad request, no such link, no right to capture)
		// come before the first piece, while the status can still say so.
		first, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		w.Header().Set("Content-Type", "application/x-pcapng")
		rc := http.NewResponseController(w)
		for msg := first; ; {
			if _, err := w.Write(msg.GetData()); err != nil {
				return // the client left; ctx ends the call
			}
			if err := rc.Flush(); err != nil {
				return
			}
			if msg, err = stream.Recv(); errors.Is(err, io.EOF) {
				return
			} else if err != nil {
				// A failure half way: the body is cut off, not ended, so
				// that the client sees the stream is incomplete.
				panic(http.ErrAbortHandler)
			}
		}
	}
}

// captureParams reads the query into req, naming any parameter it does not
// know or cannot read.
func captureParams(r *http.Request, req *meshnetv1.CaptureLinkRequest) error {
	q := r.URL.Query()
	for k := range q {
		known := false
		for _, p := range captureQuery {
			known = known || k == p
		}
		if !known {
			return fmt.Errorf("%s: unknown query parameter (known: %s)", k, strings.Join(captureQuery, ", "))
		}
	}
	if s := q.Get("max_packets"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("max_packets: %q is not a whole number of packets", s)
		}
		req.MaxPackets = uint32(n)
	}
	if s := q.Get("snap_length"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("snap_length: %q is not a whole number of bytes", s)
		}
		req.SnapLength = uint32(n)
	}
	if s := q.Get("duration"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration: %q is not a duration like \"5s\" or \"1m\"", s)
		}
		req.Duration = durationpb.New(d)
	}
	return nil
}
