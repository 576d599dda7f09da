package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestHangingCallsGiveTheirPlacesBack runs a real gRPC server behind
// TapHandle: MaxUnverifiedCalls calls with made-up tokens send their
// headers and never a message. While they hang, a new valid token's call
// is refused (the places are full); at the deadline the server ends them
// and the valid call gets through. A call whose token was reviewed in time
// outlives the deadline.
func TestHangingCallsGiveTheirPlacesBack(t *testing.T) {
	var reviews atomic.Int32
	c := NewChecker(reviewer("good", &reviews), time.Minute)
	c.unverifiedFor = time.Second
	policy := Policy{"/x.X/Change": {Verb: "patch", Resource: "topologies"}}
	hold := make(chan struct{}) // the reviewed call's handler waits on it
	srv := grpc.NewServer(grpc.InTapHandle(TapHandle(c, policy)),
		grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
			var m emptypb.Empty
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(s.Context())
			token, _ := BearerToken(md.Get("authorization"))
			if _, err := c.Authenticate(s.Context(), token); err != nil {
				return err
			}
			if token == "good" {
				select {
				case <-hold:
				case <-s.Context().Done():
					return context.Cause(s.Context())
				}
			}
			return s.SendMsg(&emptypb.Empty{})
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	ctx := context.Background()
	open := func(token string) grpc.ClientStream {
		t.Helper()
		s, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), desc, "/x.X/Change")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	call := func(token string) error {
		s := open(token)
		// io.EOF: the server ended the stream already (refused it); its
		// status comes from RecvMsg.
		if err := s.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		s.CloseSend()
		return s.RecvMsg(&emptypb.Empty{})
	}

	start := time.Now()
	var hanging []grpc.ClientStream
	for i := range MaxUnverifiedCalls {
		hanging = append(hanging, open(fmt.Sprintf("made-up-%d", i)))
	}
	// The headers reach the server asynchronously: wait until they hold
	// every place.
	for c.unverified.TryAcquire(1) {
		c.unverified.Release(1)
		time.Sleep(5 * time.Millisecond)
	}
	if err := call("good"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a new valid token while %d calls hang: %v, want ResourceExhausted", MaxUnverifiedCalls, err)
	}
	var last error
	for i, s := range hanging {
		last = s.RecvMsg(&emptypb.Empty{})
		if code := status.Code(last); (code != codes.Canceled && code != codes.DeadlineExceeded) || time.Since(start) < c.unverifiedFor {
			t.Errorf("hanging call %d: %v after %v, want ended at the deadline (%v)", i, last, time.Since(start), c.unverifiedFor)
		}
	}
	t.Logf("%d hanging calls ended %v after their headers: %v", len(hanging), time.Since(start).Round(time.Millisecond), last)

	// The places are free: the valid call gets one, its token is reviewed
	// at once, and it is not ended at the deadline.
	ended := make(chan error, 1)
	go func() { ended <- call("good") }()
	time.Sleep(2 * c.unverifiedFor)
	close(hold)
	if err := <-ended; err != nil {
		t.Fatalf("the valid call, reviewed in time, past the deadline: %v", err)
	}
}
