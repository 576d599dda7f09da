package daemon

import (
	"crypto/sha256"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshnet/meshnet/internal/auth"
)

// Bounds of meshnetd's long-lived calls (WatchLinks, CaptureLink, and their
// REST forms): each holds a goroutine and buffers, a capture also a socket
// in the pod, for as long as its caller keeps it open. The relay of
// meshnet-controller is one caller for all the users it relays.
const (
	maxStreams          = 256
	maxStreamsPerCaller = 64
)

// streams counts the long-lived calls open, in all and per caller.
type streams struct {
	max, perCaller int

	mu       sync.Mutex
	open     int
	byCaller map[string]int
}

func newStreams(max, perCaller int) *streams {
	return &streams{max: max, perCaller: perCaller, byCaller: map[string]int{}}
}

// interceptor refuses a server-streaming call past either bound
// (ResourceExhausted); other calls pass.
func (s *streams) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !info.IsServerStream || info.IsClientStream {
			return handler(srv, ss)
		}
		caller := callerOf(ss)
		if err := s.enter(caller); err != nil {
			return err
		}
		defer s.leave(caller)
		return handler(srv, ss)
	}
}

func (s *streams) enter(caller string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.open >= s.max:
		return status.Errorf(codes.ResourceExhausted, "meshnetd serves %d watches and captures at once, all taken; retry later", s.max)
	case s.byCaller[caller] >= s.perCaller:
		return status.Errorf(codes.ResourceExhausted, "you hold %d watches and captures on this meshnetd, the most one caller may; end one first", s.perCaller)
	}
	s.open++
	s.byCaller[caller]++
	return nil
}

func (s *streams) leave(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.byCaller[caller]--; s.byCaller[caller] == 0 {
		delete(s.byCaller, caller)
	}
}

// callerOf names who makes a call: its token (hashed) when it has one,
// else its address; a REST call's is the client's, which the gateway
// forwards from loopback.
func callerOf(ss grpc.ServerStream) string {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if token, err := auth.BearerToken(md.Get("authorization")); err == nil {
		sum := sha256.Sum256([]byte(token))
		return "token:" + string(sum[:])
	}
	addr := ""
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		addr, _, _ = net.SplitHostPort(p.Addr.String())
	}
	if ip := net.ParseIP(addr); ip != nil && ip.IsLoopback() {
		if fwd := md.Get("x-forwarded-for"); len(fwd) > 0 {
			addr = fwd[0]
		}
	}
	return "addr:" + addr
}
