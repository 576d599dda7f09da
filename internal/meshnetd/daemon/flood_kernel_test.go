//go:build kernel

package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
	"github.com/meshnet/meshnet/internal/meshnetd/daemon/daemontest"
)

// flood is what TestKernelDaemonFlood and BenchmarkKernelDaemonFlood
// measure: while callers without a valid token send rate requests a
// second (REST and gRPC, each with a token never seen before) and 8 of
// them keep 100 MB bodies going (announced and chunked), the operator
// pulls r1's cable and puts it back through REST, again and again.
type flood struct {
	daemontest.Flood
	changes []time.Duration // of the operator's calls
	failed  []string
	peakKiB int           // node-a meshnetd's VmHWM after the flood
	cpu     time.Duration // node-a meshnetd's processor time during it
}

func runFlood(t testing.TB, l *lab, d time.Duration, perSecond int) *flood {
	t.Helper()
	pid := l.a.PID()
	if pid == 0 {
		t.Fatal("node-a's meshnetd is not running")
	}
	t.Logf("node-a meshnetd before the flood: VmHWM %d KiB", peakKiB(t, l.a))
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return l.a.Dial(ctx, addr) }
	web := &http.Client{Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	base := fmt.Sprintf("http://%s:%d/v1/namespaces/%s/pods/r1/links/eth1/state", l.a.IP, labnet.HTTPPort, ns)
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", l.a.IP, labnet.GRPCPort), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return l.a.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	f := &flood{Flood: daemontest.Flood{
		Web: web, URL: base, Links: meshnetv1.NewLinkServiceClient(conn), PerSecond: perSecond,
		Pull: &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: meshnetv1.LinkState_LINK_STATE_DOWN},
	}}
	cpuBefore, err := proccpu.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	// The operator, meanwhile, with a token meshnetd has not seen: once the
	// flood has taken every review a new token may have.
	time.Sleep(time.Second)
	for i := 0; ctx.Err() == nil; i++ {
		state := []string{"LINK_STATE_DOWN", "LINK_STATE_UP"}[i%2]
		start := time.Now()
		req, _ := http.NewRequest("PUT", base, strings.NewReader(`{"state":"`+state+`"}`))
		req.Header.Set("Authorization", "Bearer "+l.token)
		resp, err := web.Do(req)
		took := time.Since(start)
		switch {
		case err != nil:
			f.failed = append(f.failed, fmt.Sprintf("%s after %v: %v", state, took, err))
		default:
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				f.failed = append(f.failed, fmt.Sprintf("%s after %v: HTTP %d %s", state, took, resp.StatusCode, body))
			}
		}
		f.changes = append(f.changes, took)
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if got := l.a.PID(); got != pid {
		t.Fatalf("node-a's meshnetd restarted during the flood (pid %d, now %d)\n%s", pid, got, l.a.Log())
	}
	f.peakKiB = peakKiB(t, l.a)
	cpuAfter, err := proccpu.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	f.cpu = cpuAfter - cpuBefore
	// The last change the operator asked for is the kernel's.
	if len(f.changes)%2 == 1 {
		l.setState(t, l.a, "r1", "LINK_STATE_UP")
	}
	return f
}

// peakKiB is the most memory n's meshnetd has held, in KiB.
func peakKiB(t testing.TB, n *labnet.Node) int {
	t.Helper()
	peak, err := n.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	return int(peak >> 10)
}

func (f *flood) p(q float64) time.Duration { return daemontest.Percentile(f.changes, q) }

// TestKernelDaemonFlood: a flood of callers without a valid token (REST
// and gRPC, new tokens each time, 100 MB bodies announced and chunked)
// neither restarts meshnetd nor takes its memory past 128 MiB, and the
// operator's cable pulls during it all succeed; after it the link is as
// the operator left it.
func TestKernelDaemonFlood(t *testing.T) {
	l := newLab(t)
	f := runFlood(t, l, 8*time.Second, 1000)
	t.Logf("flood: %d requests sent, %d refused; operator: %d changes, p50 %v, p99 %v; meshnetd VmHWM %d KiB, %.1f CPU-s",
		f.Sent.Load(), f.Refused.Load(), len(f.changes), f.p(0.5), f.p(0.99), f.peakKiB, f.cpu.Seconds())
	if len(f.failed) > 0 {
		t.Errorf("the operator's changes during the flood failed:\n%s", strings.Join(f.failed, "\n"))
	}
	if f.Refused.Load() < f.Sent.Load()/2 {
		t.Errorf("only %d of %d flood requests were refused", f.Refused.Load(), f.Sent.Load())
	}
	if f.peakKiB > 128<<10 {
		t.Errorf("meshnetd's VmHWM reached %d KiB during the flood, more than 128 MiB", f.peakKiB)
	}
	l.wantUp(t)
}

// BenchmarkKernelDaemonFlood is the flood: 1,000 requests/s of
// callers without a valid token for 30 s, 8 of them with 100 MB bodies;
// it reports the operator's cable pulls' p50 and p99 during it and
// meshnetd's peak memory.
func BenchmarkKernelDaemonFlood(b *testing.B) {
	for range b.N {
		l := newLab(b)
		f := runFlood(b, l, 30*time.Second, 1000)
		b.ReportMetric(float64(f.Sent.Load())/30, "flood-req/s")
		b.ReportMetric(float64(f.p(0.5).Milliseconds()), "p50-ms")
		b.ReportMetric(float64(f.p(0.99).Milliseconds()), "p99-ms")
		b.ReportMetric(float64(f.peakKiB)/1024, "VmHWM-MiB")
		b.ReportMetric(f.cpu.Seconds(), "meshnetd-CPU-s")
		if len(f.failed) > 0 {
			b.Errorf("the operator's changes during the flood failed:\n%s", strings.Join(f.failed, "\n"))
		}
	}
}
