package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// RPC measures how long meshnetd's gRPC calls take, by full method name
// and status code. It is a prometheus.Collector; register it with the
// registry /metrics serves.
type RPC struct {
	seconds *prometheus.HistogramVec
}

// NewRPC returns an RPC whose histogram spans 0.5 ms to ~16 s.
func NewRPC() *RPC {
	return &RPC{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meshnet_grpc_server_handling_seconds",
		Help:    "Time meshnetd took to answer a gRPC call (REST calls included: the gateway forwards them over gRPC).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"method", "code"})}
}

// Describe implements prometheus.Collector.
func (r *RPC) Describe(ch chan<- *prometheus.Desc) { r.seconds.Describe(ch) }

// Collect implements prometheus.Collector.
func (r *RPC) Collect(ch chan<- prometheus.Metric) { r.seconds.Collect(ch) }

// UnaryServerInterceptor times unary calls. Chain it before the auth
// interceptor so that refused calls are counted too.
func (r *RPC) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		r.seconds.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// StreamServerInterceptor times streaming calls, from open to close.
func (r *RPC) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		r.seconds.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return err
	}
}
