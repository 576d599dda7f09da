package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
)

// put sends a SetLinkState body as given (a reader of unknown length goes
// chunked) and returns the status and body of the answer.
func put(t *testing.T, url, token string, body io.Reader, length int64) (int, string) {
	t.Helper()
	req, err := http.NewRequest("PUT", url+"/v1/namespaces/lab/pods/r1/links/eth1/state", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// endless is a body that never ends, counting what was read of it.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// stalled sends a few bytes and then nothing until the test ends.
type stalled struct {
	sent bool
	done <-chan struct{}
}

func (s *stalled) Read(p []byte) (int, error) {
	if !s.sent {
		s.sent = true
		return copy(p, `{"state":`), nil
	}
	<-s.done
	return 0, io.EOF
}

// TestBodiesBounded: a body is refused before it is read when the caller
// has no token or a refused one, or announces more than the largest
// request; it is cut at the bound when it goes past it unannounced, and
// when it arrives too slowly; a body past the bytes in flight is refused
// at once. None of these reaches the gRPC server; a valid call does.
func TestBodiesBounded(t *testing.T) {
	calls := &atomic.Int32{}
	f := startStub(t, gateway.Config{Bodies: &gateway.Bodies{
		Max: 1 << 20, InFlight: 5 << 18, Timeout: 300 * time.Millisecond,
		Authenticate: func(ctx context.Context, token string) error {
			if token != "good" {
				return status.Error(codes.Unauthenticated, "token rejected by the API server")
			}
			return nil
		},
	}}, stub{calls: calls})
	valid := `{"state":"LINK_STATE_DOWN"}`
	if code, body := put(t, f.url, "good", strings.NewReader(valid), int64(len(valid))); code != 200 {
		t.Fatalf("a valid call: HTTP %d %s", code, body)
	}
	if calls.Load() != 1 {
		t.Fatalf("a valid call reached the server %d times", calls.Load())
	}

	huge := int64(100 << 20)
	for _, tc := range []struct {
		name, token string
		want        int
		says        string
	}{
		{"no token", "", 401, "authorization: Bearer"},
		{"a refused token", "garbage", 401, "token rejected"},
		{"100 MB announced", "good", 400, "at most 1048576"},
	} {
		e := &endless{}
		start := time.Now()
		code, body := put(t, f.url, tc.token, io.LimitReader(e, huge), huge)
		if code != tc.want || !strings.Contains(body, tc.says) {
			t.Errorf("%s: HTTP %d %s, want %d saying %q", tc.name, code, body, tc.want, tc.says)
		}
		// The client may have sent what the socket buffers took before the
		// answer: far less than the body.
		if read := e.read.Load(); read > 16<<20 {
			t.Errorf("%s: %d bytes of the body were sent before the answer (%v)", tc.name, read, time.Since(start))
		}
	}

	e := &endless{}
	if code, body := put(t, f.url, "good", io.LimitReader(e, huge), -1); code != 400 || !strings.Contains(body, "too large") {
		t.Errorf("100 MB chunked: HTTP %d %s, want 400 saying it is too large", code, body)
	}

	done := make(chan struct{})
	defer close(done)
	start := time.Now()
	if code, body := put(t, f.url, "good", &stalled{done: done}, 512<<10); code != 400 || !strings.Contains(body, "not received within 300ms") || time.Since(start) > 5*time.Second {
		t.Errorf("a stalled body: HTTP %d %s after %v, want 400 saying it was not received within the 300ms timeout", code, body, time.Since(start))
	}

	// One stalled body of 1 MiB in flight; a second one is past the 1.25 MiB.
	hold := make(chan struct{})
	held := make(chan int, 1)
	go func() {
		code, _ := put(t, f.url, "good", &stalled{done: hold}, 1<<20)
		held <- code
	}()
	time.Sleep(100 * time.Millisecond)
	if code, body := put(t, f.url, "good", strings.NewReader(fmt.Sprintf("%-*s", 1<<19, valid)), 1<<19); code != 429 || !strings.Contains(body, "retry") {
		t.Errorf("a body past the bytes in flight: HTTP %d %s, want 429", code, body)
	}
	close(hold)
	<-held
	if calls.Load() != 1 {
		t.Errorf("refused bodies reached the server: %d calls, want the one valid call", calls.Load())
	}
}
