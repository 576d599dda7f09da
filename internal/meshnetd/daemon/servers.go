package daemon

import (
	"context"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/access"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/cniplugin"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
	"github.com/meshnet/meshnet/internal/meshnetd/topoview"
	"github.com/meshnet/meshnet/internal/version/versionmetric"
)

// services are what meshnetd's ports serve.
type services struct {
	cni  meshnetv1.CNIServiceServer
	peer meshnetv1.PeerServiceServer
	link meshnetv1.LinkServiceServer
	data meshnetv1.DataServiceServer
	// links are the link metrics of /metrics.
	links prometheus.Collector
	// underlay are the underlay guard's drops.
	underlay prometheus.Collector
}

// servers are meshnetd's three servers, listening: the CNIService on the
// root-only unix socket, the node's gRPC port, and its HTTP port (REST
// through the gateway, /metrics, the topology page).
type servers struct {
	unix, tcp             *grpc.Server
	unixHealth, tcpHealth *health.Server
	http                  *http.Server
	gw                    *gateway.Gateway
	unixLis, tcpLis       net.Listener
	httpLis               net.Listener
	serveHTTP             func(net.Listener) error
}

// newServers listens on cfg's socket and ports and builds the servers of
// svc on them, behind the bounds, the panic recovery, the metrics and the
// token check every call passes.
func newServers(ctx context.Context, cfg Config, log *slog.Logger, tr *transport, checker *auth.Checker, svc services) (_ *servers, err error) {
	s := &servers{}
	defer func() {
		if err != nil {
			s.closeListeners()
		}
	}()
	if s.unixLis, err = listenUnix(cfg.Socket); err != nil {
		return nil, err
	}
	if s.tcpLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.GRPCAddr, err)
	}
	s.tcpLis = netutil.LimitListener(s.tcpLis, maxConns)
	if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	s.httpLis = netutil.LimitListener(s.httpLis, maxConns)

	policy := access.Policy(cfg.ReadOpen)
	rpc := metrics.NewRPC()
	// A panic in a handler (a bug) fails its call, Internal, and is
	// logged; it does not take the node's links' daemon down.
	recovered := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		log.Error("panic in a call", "method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "meshnetd of node %s failed on %s: %v", cfg.NodeName, method, p)
	})
	opts := serverBounds(checker, policy)
	if tr.server != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tr.server)))
	}
	s.tcp = grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered), rpc.UnaryServerInterceptor(), auth.UnaryInterceptor(checker, policy)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovered), rpc.StreamServerInterceptor(), auth.StreamInterceptor(checker, policy),
			newStreams(maxStreams, maxStreamsPerCaller).interceptor()))...)
	meshnetv1.RegisterPeerServiceServer(s.tcp, svc.peer)
	meshnetv1.RegisterLinkServiceServer(s.tcp, svc.link)
	meshnetv1.RegisterDataServiceServer(s.tcp, svc.data)
	s.tcpHealth = health.NewServer()
	healthpb.RegisterHealthServer(s.tcp, s.tcpHealth)
	reflection.Register(s.tcp)

	s.unix = grpc.NewServer(grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered)))
	meshnetv1.RegisterCNIServiceServer(s.unix, svc.cni)
	s.unixHealth = health.NewServer()
	healthpb.RegisterHealthServer(s.unix, s.unixHealth)

	registry := prometheus.NewRegistry()
	registry.MustRegister(svc.links, svc.underlay, rpc, versionmetric.Collector("meshnetd"))
	if s.gw, err = newGateway(ctx, cfg, tr, checker, registry, s.tcpLis.Addr()); err != nil {
		return nil, err
	}
	// No ReadTimeout or WriteTimeout: watches and captures last as long as
	// their callers want; a body has its own deadline (gateway.Bodies).
	s.http = &http.Server{Handler: s.gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, TLSConfig: tr.server, ErrorLog: stdlog.New(serverErrors{log}, "", 0)}
	s.serveHTTP = s.http.Serve
	if tr.server != nil {
		s.serveHTTP = func(l net.Listener) error { return s.http.ServeTLS(l, "", "") }
	}
	return s, nil
}

// newGateway is the HTTP port's handler: REST for the gRPC port at
// grpcAddr, /metrics of registry, the topology page.
func newGateway(ctx context.Context, cfg Config, tr *transport, checker *auth.Checker, registry *prometheus.Registry, grpcAddr net.Addr) (*gateway.Gateway, error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), daemonclient.MessageSizes()}
	if tr.gateway != nil {
		dial[0] = grpc.WithTransportCredentials(tr.gateway)
	}
	return gateway.New(ctx, gateway.Config{
		Endpoint:    loopback(grpcAddr),
		DialOptions: dial,
		Services:    []gateway.Register{meshnetv1.RegisterLinkServiceHandler, meshnetv1.RegisterDataServiceHandler},
		Gatherer:    registry,
		// Every link of every namespace on the node is named there: read
		// as the API server's own /metrics is, unless reads are open.
		MetricsAccess: func(r *http.Request) error {
			if cfg.ReadOpen {
				return nil
			}
			return checker.HTTP(r, auth.Access{Verb: "get", Path: "/metrics"})
		},
		Profiling: cfg.Profiling,
		Topology:  topoview.Handler(),
		Bodies: &gateway.Bodies{
			Max: meshnetv1.MaxRESTBodyBytes, InFlight: bodiesInFlight, Timeout: bodyTimeout,
			Authenticate: func(ctx context.Context, token string) error {
				_, err := checker.Authenticate(ctx, token)
				return err
			},
		},
	})
}

// serve starts the three servers, sending each one's end to errs, and
// reports them serving.
func (s *servers) serve(errs chan<- error) {
	go func() { errs <- s.unix.Serve(s.unixLis) }()
	go func() { errs <- s.tcp.Serve(s.tcpLis) }()
	go func() { errs <- s.serveHTTP(s.httpLis) }()
	s.unixHealth.SetServingStatus(cniplugin.HealthService, healthpb.HealthCheckResponse_SERVING)
	s.tcpHealth.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// closeHTTP reports the servers not serving and closes the HTTP port.
func (s *servers) closeHTTP() {
	s.unixHealth.Shutdown()
	s.tcpHealth.Shutdown()
	s.http.Close()
}

// stopGRPC lets the gRPC calls in flight end, for at most 10 s.
func (s *servers) stopGRPC() {
	stopped := make(chan struct{})
	go func() { s.unix.GracefulStop(); s.tcp.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.unix.Stop()
		s.tcp.Stop()
	}
	s.gw.Close()
}

func (s *servers) closeListeners() {
	for _, l := range []net.Listener{s.unixLis, s.tcpLis, s.httpLis} {
		if l != nil {
			l.Close()
		}
	}
}
