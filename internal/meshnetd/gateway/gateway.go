// Package gateway is meshnetd's HTTP side: the REST mapping of its gRPC API
// (grpc-gateway v2, forwarding each call, with its Authorization header, to
// the gRPC server so that the same interceptors check it), the OpenAPI
// document, Prometheus metrics, and health endpoints.
//
//	/v1/...        REST (see /openapi.json); gRPC codes map to HTTP statuses
//	               (Unauthenticated 401, PermissionDenied 403, InvalidArgument 400,
//	               NotFound 404, FailedPrecondition 400)
//	/openapi.json  the OpenAPI v2 document
//	/topology/     the topology page, when Config.Topology is set
//	/metrics       Prometheus metrics
//	/healthz       200 while the process serves HTTP
//	/readyz        200 when the gRPC health service says SERVING, else 503
//
// With Config.Bodies, a request body is read only once its caller's token
// is accepted, and within bounds of size, time and bytes in flight.
package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshnet/meshnet/api/openapi"
	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/restapi"
)

// Register adds one gRPC service's REST handlers to mux, calling it over
// conn (a generated RegisterXServiceHandler).
type Register func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error

// Config is what a Gateway serves.
type Config struct {
	// Endpoint is the gRPC server's address ("127.0.0.1:51111").
	Endpoint string
	// DialOptions for Endpoint; nil dials without TLS (a loopback
	// endpoint in the same process).
	DialOptions []grpc.DialOption
	// Services to map; nil maps LinkService only.
	Services []Register
	// Marshaler writes and reads the REST bodies; nil is restapi.DefaultMarshaler.
	Marshaler runtime.Marshaler
	// Gatherer is served on /metrics; nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// MetricsAccess decides who may read /metrics (a gRPC status: 401,
	// 403); nil lets anyone.
	MetricsAccess func(*http.Request) error
	// Profiling serves net/http/pprof on /debug/pprof/: off unless asked
	// for, as it costs CPU when used and tells about the process.
	Profiling bool
	// OpenAPI is served on /openapi.json; nil serves openapi.Document.
	OpenAPI []byte
	// ReadyTimeout bounds /readyz's health check; 0 means 2s.
	ReadyTimeout time.Duration
	// Topology is served on /topology/ (the topology page, which reads the
	// REST data API of the same origin); nil serves none.
	Topology http.Handler
	// Bodies bounds the REST calls' request bodies; nil leaves them
	// unbounded (a gateway behind another that bounds them).
	Bodies *Bodies
}

// Gateway is an http.Handler; Close releases its connection to the gRPC
// server.
type Gateway struct {
	http.Handler
	conn *grpc.ClientConn
}

// New returns the gateway for cfg. ctx bounds the REST handlers' lifetime.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	opts := cfg.DialOptions
	if opts == nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(cfg.Endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: dial gRPC server %s: %w", cfg.Endpoint, err)
	}
	m := cfg.Marshaler
	if m == nil {
		m = restapi.DefaultMarshaler()
	}
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, m))
	services := cfg.Services
	if services == nil {
		services = []Register{meshnetv1.RegisterLinkServiceHandler}
	}
	for _, register := range services {
		if err := register(ctx, gw, conn); err != nil {
			conn.Close()
			return nil, fmt.Errorf("gateway: register REST handlers: %w", err)
		}
	}
	doc := cfg.OpenAPI
	if doc == nil {
		doc = openapi.Document
	}
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	health := healthpb.NewHealthClient(conn)

	mux := http.NewServeMux()
	var rest http.Handler = gw
	if cfg.Bodies != nil {
		rest = cfg.Bodies.guard(gw, gw, m)
	}
	mux.Handle("/", rest)
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
	if cfg.Gatherer != nil {
		metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			if cfg.MetricsAccess != nil {
				if err := cfg.MetricsAccess(r); err != nil {
					runtime.HTTPError(r.Context(), gw, m, w, r, err)
					return
				}
			}
			metrics.ServeHTTP(w, r)
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET "+restapi.CapturePath, captureHandler(meshnetv1.NewLinkServiceClient(conn), gw, m))
	if cfg.Topology != nil {
		mux.Handle("GET "+restapi.TopologyPath, http.StripPrefix(strings.TrimSuffix(restapi.TopologyPath, "/"), cfg.Topology))
	}
	if cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		switch {
		case err != nil:
			http.Error(w, "gRPC health check: "+err.Error(), http.StatusServiceUnavailable)
		case res.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			http.Error(w, "gRPC health: "+res.GetStatus().String(), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	return &Gateway{Handler: mux, conn: conn}, nil
}

// Close closes the connection to the gRPC server.
func (g *Gateway) Close() error { return g.conn.Close() }
