package gateway

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
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

// captureQuery are the query parameters of a capture over HTTP
// (CaptureParams reads them, here and in the controller's aggregated API).
var captureQuery = []string{"max_packets", "duration", "snap_length", "filter"}

// captureHandler relays CaptureLink; errors are written by gw with m, as
// every other REST call's.
func captureHandler(c meshnetv1.LinkServiceClient, gw *runtime.ServeMux, m runtime.Marshaler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) { runtime.HTTPError(r.Context(), gw, m, w, r, err) }
		req := &meshnetv1.CaptureLinkRequest{
			Namespace: r.PathValue("namespace"), Pod: r.PathValue("pod"), Interface: r.PathValue("interface"),
		}
		if err := CaptureParams(r.URL.Query(), req); err != nil {
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
		WriteCapture(w, stream, fail)
	}
}

// WriteCapture writes a CaptureLink stream to w as application/x-pcapng,
// each piece flushed as it comes. A refusal (a bad request, no such link,
// no right to capture) comes before the first piece, while the status can
// still say so: fail writes it. A failure half way cuts the body off
// rather than ending it, so that the client sees the stream is incomplete.
func WriteCapture(w http.ResponseWriter, stream grpc.ServerStreamingClient[meshnetv1.CaptureLinkResponse], fail func(error)) {
	first, err := stream.Recv()
	if err != nil {
		fail(err)
		return
	}
	w.Header().Set("Content-Type", "application/x-pcapng")
	rc := http.NewResponseController(w)
	for msg := first; ; {
		if _, err := w.Write(msg.GetData()); err != nil {
			return // the client left; its context ends the call
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if msg, err = stream.Recv(); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// CaptureParams reads q, captureQuery's parameters, into req, naming any
// parameter it does not know or cannot read.
func CaptureParams(q url.Values, req *meshnetv1.CaptureLinkRequest) error {
	if err := KnownParams(q, captureQuery...); err != nil {
		return err
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
	req.Filter = q.Get("filter") // compiled, and refused, by CaptureLink
	if s := q.Get("duration"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration: %q is not a duration like \"5s\" or \"1m\"", s)
		}
		req.Duration = durationpb.New(d)
	}
	return nil
}

// KnownParams names a parameter of q that is not one of known, the first
// in sorted order; nil when there is none. A request that takes none
// passes no known.
func KnownParams(q url.Values, known ...string) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if slices.Contains(known, k) {
			continue
		}
		if len(known) == 0 {
			return fmt.Errorf("%s: unknown query parameter (this request takes none)", k)
		}
		return fmt.Errorf("%s: unknown query parameter (known: %s)", k, strings.Join(known, ", "))
	}
	return nil
}
