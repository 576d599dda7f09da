package daemon

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// serverStream is a stream with a context: what the quota reads of a call.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

func streamOf(addr, token string, forwarded ...string) serverStream {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 40000}})
	md := metadata.MD{}
	if token != "" {
		md.Set("authorization", "Bearer "+token)
	}
	if len(forwarded) > 0 {
		md.Set("x-forwarded-for", forwarded...)
	}
	return serverStream{ctx: metadata.NewIncomingContext(ctx, md)}
}

// TestStreamsQuota: a caller holds at most its share of long-lived calls
// and the node at most its total; an ended call frees its place; unary and
// client-streaming calls are not counted.
func TestStreamsQuota(t *testing.T) {
	s := newStreams(3, 2)
	hold := make(chan struct{})
	started := make(chan struct{}, 8)
	watch := &grpc.StreamServerInfo{FullMethod: "/meshnet.v1.LinkService/WatchLinks", IsServerStream: true}
	open := func(ss serverStream) chan error {
		done := make(chan error, 1)
		go func() {
			done <- s.interceptor()(nil, ss, watch, func(any, grpc.ServerStream) error { started <- struct{}{}; <-hold; return nil })
		}()
		return done
	}
	refused := func(ss serverStream) error {
		return s.interceptor()(nil, ss, watch, func(any, grpc.ServerStream) error { return nil })
	}
	alice, bob := streamOf("192.0.2.1", "alice"), streamOf("192.0.2.2", "bob")
	a1, a2 := open(alice), open(alice)
	<-started
	<-started
	if err := refused(alice); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice's third watch: %v, want ResourceExhausted (2 per caller)", err)
	}
	b1 := open(bob)
	<-started
	if err := refused(streamOf("192.0.2.3", "carol")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth watch on the node: %v, want ResourceExhausted (3 per node)", err)
	}
	unary := &grpc.StreamServerInfo{FullMethod: "/x/Chat", IsServerStream: true, IsClientStream: true}
	if err := s.interceptor()(nil, alice, unary, func(any, grpc.ServerStream) error { return nil }); err != nil {
		t.Fatalf("a bidirectional call past the quota: %v, want it not counted", err)
	}
	close(hold)
	for _, done := range []chan error{a1, a2, b1} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s.open != 0 || len(s.byCaller) != 0 {
		t.Fatalf("after every call ended: %d open, %v by caller", s.open, s.byCaller)
	}
}

// TestCallerOf: a call is its token's; without one, its address's, and a
// REST call's (from the gateway on loopback) the client's it forwards.
func TestCallerOf(t *testing.T) {
	if callerOf(streamOf("192.0.2.1", "t")) != callerOf(streamOf("192.0.2.9", "t")) {
		t.Error("one token from two addresses: two callers, want one")
	}
	if callerOf(streamOf("192.0.2.1", "")) == callerOf(streamOf("192.0.2.2", "")) {
		t.Error("two addresses without tokens: one caller, want two")
	}
	if callerOf(streamOf("127.0.0.1", "", "198.51.100.7")) == callerOf(streamOf("127.0.0.1", "", "198.51.100.8")) {
		t.Error("two REST clients through the gateway: one caller, want two")
	}
	if callerOf(streamOf("192.0.2.1", "", "198.51.100.7")) != callerOf(streamOf("192.0.2.1", "", "198.51.100.8")) {
		t.Error("a direct caller's x-forwarded-for was believed")
	}
}
