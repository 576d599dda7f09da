// Package daemontest calls meshnetd as hostile callers do, for the tests
// and benchmarks of its bounds in the kernel tier (the emulated lab) and
// the node tier (meshnetd as installed).
package daemontest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/metadata"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// Flood is a crowd of callers without a valid token, all asking for one
// cable pull: PerSecond requests a second from 32 callers (a quarter over
// gRPC, the rest REST), each with a token never seen before, and 8 more
// sending 100 MB bodies back to back (half announced, half chunked).
type Flood struct {
	// Web sends the REST requests: PUT URL (a link's state path).
	Web *http.Client
	URL string
	// Links and Pull are the gRPC calls'.
	Links meshnetv1.LinkServiceClient
	Pull  *meshnetv1.SetLinkStateRequest

	PerSecond int

	// Sent and Refused count the flood's requests.
	Sent, Refused atomic.Int64
	n             atomic.Int64
}

// BodyBytes is the size of the flood's large bodies.
const BodyBytes = 100 << 20

// Run floods until ctx ends, then returns.
func (f *Flood) Run(ctx context.Context) {
	var wg sync.WaitGroup
	limit := rate.NewLimiter(rate.Limit(f.PerSecond), max(1, f.PerSecond/10))
	for w := range 32 {
		wg.Go(func() {
			for limit.Wait(ctx) == nil {
				f.Sent.Add(1)
				if w%4 == 0 {
					md := metadata.Pairs("authorization", "Bearer "+f.garbage())
					if _, err := f.Links.SetLinkState(metadata.NewOutgoingContext(ctx, md), f.Pull); err != nil {
						f.Refused.Add(1)
					}
					continue
				}
				if code, err := f.put(ctx, strings.NewReader(`{"state":"LINK_STATE_DOWN"}`), -1); err == nil && code != http.StatusOK {
					f.Refused.Add(1)
				}
			}
		})
	}
	for w := range 8 {
		wg.Go(func() {
			length := int64(BodyBytes)
			if w%2 == 1 {
				length = -1 // chunked
			}
			for ctx.Err() == nil {
				f.Sent.Add(1)
				if code, err := f.put(ctx, Spaces(BodyBytes), length); err == nil && code != http.StatusOK {
					f.Refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

func (f *Flood) garbage() string {
	return fmt.Sprintf("garbage-%d-%d", time.Now().UnixNano(), f.n.Add(1))
}

func (f *Flood) put(ctx context.Context, body io.Reader, length int64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", f.URL, body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+f.garbage())
	resp, err := f.Web.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Spaces is a body of n spaces (valid JSON whitespace, never a request).
func Spaces(n int64) io.Reader { return io.LimitReader(spaces{}, n) }

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// Percentile is the q quantile (0 to 1) of ds, which must not be empty.
func Percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
