// Package restapi holds what meshnetd's REST API (internal/meshnetd/gateway) and the
// controller's aggregated API (internal/meshnet-controller/relay) say alike: the JSON
// marshaler, the refusal of unknown query parameters, a capture's
// parameters and its pcapng stream, and the paths they serve.
package restapi

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
	"google.golang.org/protobuf/encoding/protojson"
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

// TopologyPath is where meshnetd serves the topology page (gateway.Config.Topology); a namespace's page is
// TopologyPath + "?namespace=NS".
const TopologyPath = "/topology/"

// DefaultMarshaler is protojson with the field names of the OpenAPI
// document (lowerCamelCase json_name), unpopulated fields written, and
// unknown fields in requests refused (400) rather than silently dropped. A
// client that needs the proto names (e.g. Grafana frames with exact
// snake_case names) takes a JSONPb with UseProtoNames.
func DefaultMarshaler() runtime.Marshaler {
	return &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}
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
