package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/auth"
)

// Bodies bounds what request bodies cost meshnetd: anyone who reaches the
// port can send one, so none is read before its caller's token is accepted,
// none is larger than the largest request meshnet's API admits, none takes
// longer than Timeout to arrive, and all of those being read at once hold
// at most InFlight bytes.
type Bodies struct {
	// Max is the largest body taken, in bytes.
	Max int64
	// InFlight bounds the bytes of the bodies being read and decoded at
	// once; a body past it is refused (429) rather than queued.
	InFlight int64
	// Timeout bounds the time a body takes to arrive.
	Timeout time.Duration
	// Authenticate accepts a bearer token or says why not; every call that
	// takes a body needs one (auth.Checker.Authenticate).
	Authenticate func(ctx context.Context, token string) error
}

// guard wraps next with b's bounds; errors are written by gw with m, as
// every other REST call's.
func (b Bodies) guard(next http.Handler, gw *runtime.ServeMux, m runtime.Marshaler) http.Handler {
	inFlight := semaphore.NewWeighted(b.InFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		fail := func(c codes.Code, format string, args ...any) {
			r.Close = true // the unread body is not drained for the next request
			runtime.HTTPError(r.Context(), gw, m, w, r, status.Errorf(c, format, args...))
		}
		token, err := auth.BearerToken(r.Header.Values("Authorization"))
		if err == nil {
			err = b.Authenticate(r.Context(), token)
		}
		if err != nil {
			r.Close = true
			runtime.HTTPError(r.Context(), gw, m, w, r, err)
			return
		}
		if r.ContentLength > b.Max {
			fail(codes.InvalidArgument, "request body of %d bytes: meshnetd takes at most %d (a request for the largest Topology the CRD admits)", r.ContentLength, b.Max)
			return
		}
		weight := r.ContentLength
		if weight < 0 { // chunked: as much as it may grow to
			weight = b.Max
		}
		if !inFlight.TryAcquire(weight) {
			fail(codes.ResourceExhausted, "meshnetd is reading %d bytes of other requests' bodies; retry", b.InFlight)
			return
		}
		defer inFlight.Release(weight)
		r.Body = timedBody{http.MaxBytesReader(w, r.Body, b.Max), b.Timeout}
		// Not supported by every connection (HTTP/2 before the body's
		// first read is one that is): then the server's own timeouts hold.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(b.Timeout))
		next.ServeHTTP(w, r)
	})
}

// timedBody says, of a body that did not arrive within Bodies.Timeout, just
// that: the error the connection gives ("read tcp ...: i/o timeout")
// names neither the body nor the limit.
type timedBody struct {
	io.ReadCloser
	timeout time.Duration
}

func (b timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("request body not received within %v, meshnetd's time for a body", b.timeout)
	}
	return n, err
}
