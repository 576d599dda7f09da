// Package daemonclient is how other processes reach meshnetds: one gRPC
// connection per meshnetd address, for the callers that talk to many
// daemons (the controller, the data API's fan-out and the daemons' calls to
// their peers), and Daemons, which reads a node's link ends from its
// meshnetd.
package daemonclient

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// Pool dials each address once and reuses the connection. It is safe for
// concurrent use.
type Pool struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewPool returns a pool whose connections send perRPC (the caller's token;
// nil for none) with every call. transport nil means plaintext, for meshnetd
// serving without TLS.
func NewPool(transport credentials.TransportCredentials, perRPC credentials.PerRPCCredentials) *Pool {
	if transport == nil {
		transport = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(transport), MessageSizes(), grpc.WithDefaultServiceConfig(retryPaced),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: 20 * time.Second})}
	if perRPC != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(perRPC))
	}
	return &Pool{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// retryPaced has gRPC try a call again, up to 4 more times over about 6 s,
// when meshnetd refused it with RESOURCE_EXHAUSTED before running it: a
// caller's token it has not seen yet, past the few it reads at once
// (auth.MaxUnverifiedCalls), or a full quota of watches. A meshnetd's
// first burst of far-end calls to a peer came with a token the peer had
// never seen: 8 were read, the other 24 refused, and their links left
// pending. Every meshnet call is idempotent (a desired state, or a read),
// and a refused one did nothing.
const retryPaced = `{"methodConfig": [{"name": [{}], "retryPolicy": {
	"maxAttempts": 5, "initialBackoff": "0.4s", "maxBackoff": "3s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// reconnect paces the dials of a meshnetd that cannot be reached: at most
// MaxDelay apart, where gRPC's default grows to two minutes. A node away for
// minutes (rebooted, cut off) is called again within seconds of its return:
// its owed far ends made at the next pass, the controller's ApplyPods
// served, not refused for up to two minutes more.
var reconnect = backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}

// MessageSizes lets a call carry the largest messages meshnet's API admits
// (an ApplyPod or its answer for the largest Topology), past gRPC's default
// of 4 MiB.
func MessageSizes() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(meshnetv1.MaxMessageBytes), grpc.MaxCallSendMsgSize(meshnetv1.MaxMessageBytes))
}

// Conn returns the connection to addr (host:port).
func (p *Pool) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to meshnetd at %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// ResetConnectBackoff has every connection try again at once: after the
// credentials became able to connect (meshnetd learned its CA), rather than
// after gRPC's backoff of up to two minutes.
func (p *Pool) ResetConnectBackoff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.ResetConnectBackoff()
	}
}

// Close closes every connection.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for addr, c := range p.conns {
		if err := c.Close(); err != nil && first == nil {
			first = fmt.Errorf("close connection to %s: %w", addr, err)
		}
		delete(p.conns, addr)
	}
	return first
}
