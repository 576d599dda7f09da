package daemonclient

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/auth"
)

// bearer sends a fixed token without TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

type peers struct {
	meshnetv1.UnimplementedPeerServiceServer
	served atomic.Int32
}

func (p *peers) CreateRemoteEnd(context.Context, *meshnetv1.CreateRemoteEndRequest) (*meshnetv1.CreateRemoteEndResponse, error) {
	p.served.Add(1)
	return &meshnetv1.CreateRemoteEndResponse{}, nil
}

// TestBurstWithANewTokenIsServed: a meshnetd's first burst of far-end
// calls to a peer carries a token the peer has not seen; the peer reads
// auth.MaxUnverifiedCalls of them and refuses the rest with
// RESOURCE_EXHAUSTED until the token is reviewed. The pool's callers try
// those again, and every call of the burst is served.
func TestBurstWithANewTokenIsServed(t *testing.T) {
	cs := fake.NewClientset()
	var reviews atomic.Int32
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		time.Sleep(100 * time.Millisecond) // the API server's round trip, while the burst arrives
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		return true, &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{
			Authenticated: true, Audiences: tr.Spec.Audiences, User: authnv1.UserInfo{Username: "system:serviceaccount:meshnet:meshnetd"},
		}}, nil
	})
	checker := auth.NewChecker(cs, time.Minute)
	policy := auth.Policy{meshnetv1.PeerService_CreateRemoteEnd_FullMethodName: {Authenticated: true}}
	srv := grpc.NewServer(grpc.InTapHandle(auth.TapHandle(checker, policy)), grpc.UnaryInterceptor(auth.UnaryInterceptor(checker, policy)))
	p := &peers{}
	meshnetv1.RegisterPeerServiceServer(srv, p)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	pool := NewPool(nil, bearer("a-new-token"))
	defer pool.Close()
	conn, err := pool.Conn(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := meshnetv1.NewPeerServiceClient(conn)
	const burst = 64
	var wg sync.WaitGroup
	errs := make([]error, burst)
	for i := range burst {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, errs[i] = c.CreateRemoteEnd(ctx, &meshnetv1.CreateRemoteEndRequest{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d of the burst: %v", i, err)
		}
	}
	if got := p.served.Load(); got != burst {
		t.Errorf("the peer served %d calls, want %d", got, burst)
	}
	t.Logf("%d calls served after %d token reviews", p.served.Load(), reviews.Load())
}

// TestDaemonAwayIsDialledEverySeconds: a meshnetd that cannot be reached
// (its node rebooting, cut off) is dialled again at most reconnect's
// MaxDelay apart, so a call made once it is back finds it within seconds.
// Here its port closes every connection at once, as gRPC sees a daemon
// away, for 35 s while a caller keeps calling: with gRPC's default
// backoff the dials drift to 10 s apart and more (up to two minutes).
func TestDaemonAwayIsDialledEverySeconds(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var mu sync.Mutex
	var dials []time.Time
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			dials = append(dials, time.Now())
			mu.Unlock()
			c.Close()
		}
	}()
	pool := NewPool(nil, nil)
	defer pool.Close()
	conn, err := pool.Conn(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := meshnetv1.NewPeerServiceClient(conn)
	start := time.Now()
	const away = 35 * time.Second
	for time.Since(start) < away {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := client.CreateRemoteEnd(ctx, &meshnetv1.CreateRemoteEndRequest{})
		cancel()
		if err == nil {
			t.Fatal("a call to a daemon that is away was served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	ends := append(append([]time.Time{start}, dials...), time.Now())
	limit := time.Duration(float64(reconnect.MaxDelay)*(1+reconnect.Jitter)) + time.Second
	for i := 1; i < len(ends); i++ {
		if gap := ends[i].Sub(ends[i-1]); gap > limit {
			t.Fatalf("%d dials in %v, %v apart at %v: want at most %v apart", len(dials), away, gap.Round(time.Millisecond), ends[i-1].Sub(start).Round(time.Millisecond), limit)
		}
	}
	t.Logf("%d dials in %v", len(dials), away)
}
