package podlinks

import (
	"errors"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/capture"
	"github.com/meshnet/meshnet/internal/pcapfilter"
)

// Bounds of CaptureLink's request. A snap length is a buffer meshnetd
// allocates: at most libpcap's largest.
const (
	MaxCaptureDuration = 24 * time.Hour
	MinSnapLength      = 34
	MaxSnapLength      = 262144
	// MaxFilterLength bounds a capture filter's text, which is compiled
	// here: longer than any filter a person writes.
	MaxFilterLength = 4096
)

// CaptureLink implements meshnetv1.LinkServiceServer.
func (s linkServer) CaptureLink(req *meshnetv1.CaptureLinkRequest, stream grpc.ServerStreamingServer[meshnetv1.CaptureLinkResponse]) error {
	rc := s.rc
	var v violations
	v.namespace(req.GetNamespace())
	v.pod("pod", req.GetPod())
	v.ifname("interface", req.GetInterface())
	var d time.Duration
	if req.Duration != nil {
		if err := req.GetDuration().CheckValid(); err != nil {
			v.add("duration", "%v", err)
		} else if d = req.GetDuration().AsDuration(); d <= 0 || d > MaxCaptureDuration {
			v.add("duration", "%v is not between 0s and %v; leave it out for no limit", d, MaxCaptureDuration)
		}
	}
	if n := req.GetSnapLength(); n > 0 && (n < MinSnapLength || n > MaxSnapLength) {
		v.add("snap_length", "%d is not between %d bytes (an Ethernet and an IPv4 header) and %d; 0 keeps packets whole", n, MinSnapLength, MaxSnapLength)
	}
	var filter []bpf.Instruction
	if f := req.GetFilter(); len(f) > MaxFilterLength {
		v.add("filter", "%d characters; at most %d", len(f), MaxFilterLength)
	} else if prog, err := pcapfilter.Compile(f, req.GetSnapLength()); err != nil {
		v.add("filter", "%v", err)
	} else {
		filter = prog
	}
	if err := v.err(); err != nil {
		return err
	}
	p, l, err := rc.lookupLink(req.GetNamespace(), req.GetPod(), req.GetInterface())
	if err != nil {
		return err
	}
	n, err := openPod(p) // a namespace that is gone is the caller's to know, not an internal error
	if err != nil {
		return err
	}
	n.Close()
	log := rc.log.With("pod", p.Key().String(), "link", l.LocalIntf)
	log.Info("capture started", "max_packets", req.GetMaxPackets(), "duration", d, "snap_length", req.GetSnapLength(), "filter", req.GetFilter())
	st, err := capture.Run(stream.Context(), p.Netns, l.LocalIntf,
		capture.Options{Count: int(req.GetMaxPackets()), Duration: d, SnapLength: int(req.GetSnapLength()), Filter: filter, FilterText: req.GetFilter()},
		streamWriter{stream})
	log.Info("capture ended", "packets", st.Packets, "dropped", st.Dropped, "error", err)
	if err != nil {
		if stream.Context().Err() != nil {
			return status.FromContextError(stream.Context().Err()).Err()
		}
		if errors.Is(err, capture.ErrFilter) && errors.Is(err, unix.ENOMEM) {
			// The kernel charges a filter to the socket's option memory.
			return status.Errorf(codes.InvalidArgument, "filter: its program of %d instructions is more than the pod's network namespace takes (its net.core.optmem_max): make the filter shorter", len(filter))
		}
		return status.Errorf(codes.Internal, "capture %s on %s: %v", p.Key(), l.LocalIntf, err)
	}
	return stream.Send(&meshnetv1.CaptureLinkResponse{Packets: uint64(st.Packets), Dropped: st.Dropped})
}

// streamWriter sends what is written as the next pieces of a capture.
type streamWriter struct {
	stream grpc.ServerStreamingServer[meshnetv1.CaptureLinkResponse]
}

func (w streamWriter) Write(p []byte) (int, error) {
	// Stats handlers may read a sent message later, and the writer reuses
	// p: a copy.
	if err := w.stream.Send(&meshnetv1.CaptureLinkResponse{Data: append([]byte(nil), p...)}); err != nil {
		return 0, err
	}
	return len(p), nil
}
