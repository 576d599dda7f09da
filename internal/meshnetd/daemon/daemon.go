// Package daemon assembles meshnetd: the Kubernetes cache and client, the
// pod store, the CNIService on a root-only unix socket, the node's TCP gRPC
// server (PeerService, LinkService, DataService, health and reflection,
// behind one authenticating interceptor) and its HTTP server (REST through
// grpc-gateway, /metrics, /healthz, /readyz, /openapi.json, the topology
// page /topology/). On start it installs the CNI plugin and chains it after
// the primary CNI; a clean shutdown removes the chain again. With TLS on,
// both TCP ports serve a certificate meshnet-controller signs for this node
// (package pki), and calls to other nodes' daemons are TLS too.
//
// Anyone who reaches a node can call its TCP ports, so what a caller can
// make meshnetd hold is bounded whoever it is (serverBounds, gateway.Bodies,
// the long-lived calls' quota): connections, message and body sizes, the
// time a body takes, calls per connection, and no request read before its
// token is accepted or paced (auth.TapHandle).
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/access"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/cniplugin"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver"
	"github.com/meshnet/meshnet/internal/meshnetd/gateway"
	"github.com/meshnet/meshnet/internal/meshnetd/linklock"
	"github.com/meshnet/meshnet/internal/meshnetd/linkserver"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/meshnetd/topotrack"
	"github.com/meshnet/meshnet/internal/meshnetd/topoview"
	"github.com/meshnet/meshnet/internal/meshnetd/wiring"
	"github.com/meshnet/meshnet/internal/partition"
	"github.com/meshnet/meshnet/internal/pki"
)

// Config is meshnetd's configuration, one field a flag.
type Config struct {
	NodeName string
	NodeIP   netip.Addr
	// NodeNetns is the node's network namespace; /proc/self/ns/net when
	// empty (the daemon runs with hostNetwork).
	NodeNetns string
	// MacvlanParents are NICs trusted as macvlan parents whatever their
	// kind (links.Macvlan.Trusted): a node whose NICs are veths.
	MacvlanParents []string
	// MemoryLimit is the container's memory limit in bytes (0: none);
	// meshnetd's Go memory limit is kept at 90% of it less the kernel
	// memory charged to the container (memlimit.go), so that the collector
	// works harder before the kernel kills.
	MemoryLimit int64
	// Socket is the CNIService's unix socket, made mode 0600.
	Socket string
	// GRPCAddr is the TCP address of PeerService and the other services;
	// its port is every node's meshnetd port.
	GRPCAddr string
	// HTTPAddr serves REST, /metrics, /healthz, /readyz and /openapi.json.
	HTTPAddr string
	// ReadOpen leaves read-only calls (GetLink, ListLinks, WatchLinks,
	// DataService, /metrics) open to callers without a token. Closed, a
	// read needs a token allowed to list the namespace's Topologies, and
	// /metrics one allowed to get it (a non-resource URL).
	ReadOpen bool
	// DaemonNamespace and DaemonService name meshnetd's own Service, whose
	// EndpointSlices find the other nodes' daemons for the data API.
	DaemonNamespace, DaemonService string
	// Profiling serves net/http/pprof on the HTTP port (/debug/pprof/).
	Profiling bool
	// DaemonSet is the DaemonSet running meshnetd, in DaemonNamespace: while
	// it exists, a stopping meshnetd keeps its conflist. Empty: always
	// removed on stop.
	DaemonSet string
	// StateDir holds the pod store (StateDir/pods), runtime link state
	// (StateDir/links) and, with TLS, the serving certificate (StateDir/pki).
	StateDir string
	// CNIBinDir and CNIConfDir are the runtime's CNI directories.
	CNIBinDir, CNIConfDir string
	// CNIPlugin is the meshnet-cni binary to install into CNIBinDir.
	CNIPlugin string
	// Kubeconfig is a kubeconfig file; in-cluster config when empty.
	Kubeconfig string
	// TokenFile is this daemon's service-account token, sent to peers.
	TokenFile string
	// TLS serves the gRPC and HTTP ports with a certificate meshnet-
	// controller signs (pki.NewServing, kept in StateDir/pki) and calls
	// peers over TLS trusting the CA published in ConfigMap
	// DaemonNamespace/CAConfigMap. Off: plaintext, and tokens cross the
	// node network in clear.
	TLS         bool
	CAConfigMap string
	// KubeQPS and KubeBurst bound the daemon's API requests; client-go's
	// defaults (5 and 10) make a node wiring many pods at once wait on its
	// own rate limiter.
	KubeQPS   float32
	KubeBurst int
	Log       *slog.Logger
}

// loopback is the address the in-process gateway dials: the gRPC listener's
// port on loopback, whatever address it listens on.
func loopback(a net.Addr) string {
	_, port, _ := net.SplitHostPort(a.String())
	return net.JoinHostPort("127.0.0.1", port)
}

// serverErrors takes net/http's server errors into slog: handshakes cut
// short (the liveness probe's TCP connect, a client speaking plain HTTP to
// the TLS port) at debug level, anything else as a warning.
type serverErrors struct{ log *slog.Logger }

func (e serverErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		e.log.Debug("http server", "error", msg)
	} else {
		e.log.Warn("http server", "error", msg)
	}
	return len(p), nil
}

// tokenReviewTTL is how long a reviewed token is trusted.
const tokenReviewTTL = 30 * time.Second

// Bounds of what a caller of meshnetd's TCP ports can make it hold, whoever
// it is: meshnetd is privileged on every node, and a node whose meshnetd
// falls over creates no topology pod until it is back.
const (
	// maxConns bounds each port's open connections; past it a new one
	// waits in the listen backlog.
	maxConns = 1024
	// maxStreamsPerConn bounds a gRPC connection's concurrent calls.
	maxStreamsPerConn = 128
	// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
	handshakeTimeout = 10 * time.Second
	// idleTimeout closes a connection with no call for that long.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds an HTTP request's headers (a token is 1 to 2 KiB).
	maxHeaderBytes = 64 << 10
	// bodiesInFlight bounds the REST bodies being read at once: one of the
	// largest, or many of the usual (a few hundred bytes); bodyTimeout the
	// time one takes to arrive.
	bodiesInFlight = meshnetv1.MaxRESTBodyBytes
	bodyTimeout    = 30 * time.Second
)

// serverBounds are the gRPC server's options that bound a caller's cost:
// message size, concurrent calls and pings per connection, idle
// connections, handshakes, and the token check before a request is read
// (auth.TapHandle).
func serverBounds(checker *auth.Checker, policy auth.Policy) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(meshnetv1.MaxMessageBytes),
		grpc.MaxSendMsgSize(meshnetv1.MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.InTapHandle(auth.TapHandle(checker, policy)),
	}
}

// Run serves until ctx ends, then stops cleanly and removes meshnet's
// conflist.
func Run(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" || !cfg.NodeIP.IsValid() {
		return errors.New("node name and node IP are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("node", cfg.NodeName)
	core.InitializeClock() // netem's time conversions need it
	startMemLimiter(ctx, cfg.MemoryLimit, log)
	ctrllog.SetLogger(logr.FromSlogHandler(cfg.Log.Handler()))

	_, portStr, err := net.SplitHostPort(cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc address %q: %w", cfg.GRPCAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 {
		return fmt.Errorf("grpc address %q needs a port", cfg.GRPCAddr)
	}
	// Before any connection of its own to the API server, which could
	// take one of them as its local port.
	if err := reservePorts(cfg.GRPCAddr, cfg.HTTPAddr); err != nil {
		log.Warn("meshnetd's ports not reserved: an outgoing connection of the node may take one", "error", err)
	}

	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = cfg.KubeQPS, cfg.KubeBurst
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	// Each read source watches no more than it serves: the EndpointSlices
	// of the daemons, the Topologies of this node's pods (one watch each),
	// and the Pods and Topologies of the namespaces being read.
	endpoints, err := partition.NewCache(ctx, restCfg, scheme, cfg.DaemonNamespace)
	if err != nil {
		return err
	}
	nsReader, err := dataserver.NewReader(restCfg, scheme)
	if err != nil {
		return err
	}
	kclient, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	store, err := podstore.Open(filepath.Join(cfg.StateDir, "pods"))
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- endpoints.Start(ctx) }()
	if !endpoints.WaitForCacheSync(ctx) {
		return errors.New("the daemons' EndpointSlice cache did not sync")
	}
	go nsReader.Run(ctx)
	topologies := topotrack.New(kclient)
	defer topologies.Close()
	topologies.Follow(store)

	trustDone := make(chan error, 1)
	var (
		serverTLS      *tls.Config
		peerTLS, gwTLS credentials.TransportCredentials
		trust          func(*daemonclient.Pool)
	)
	if cfg.TLS {
		serving, err := pki.NewServing(ctx, kube, pki.ServingOptions{Node: cfg.NodeName, IP: cfg.NodeIP, Dir: filepath.Join(cfg.StateDir, "pki"), Log: log})
		if err != nil {
			return err
		}
		defer serving.Stop()
		go func() {
			if err := serving.Wait(ctx, 10*time.Minute); err != nil {
				log.Error("meshnetd serves no TLS handshake until its certificate is signed", "error", err)
			}
		}()
		serverTLS = serving.ServerTLS()
		// Peers are checked against the address dialled; the gateway dials
		// loopback and checks this node's IP, which the certificate names.
		peer, gwClient := pki.NewClient(""), pki.NewClient(cfg.NodeIP.String())
		peerTLS, gwTLS = peer, gwClient
		// Once the pool exists (below), the CA is awaited beside the rest.
		trust = func(pool *daemonclient.Pool) {
			roots, err := pki.Trust(ctx, kube, log, cfg.DaemonNamespace, cfg.CAConfigMap, 2*time.Second)
			if err != nil {
				trustDone <- err
				return
			}
			peer.SetRoots(roots)
			gwClient.SetRoots(roots)
			pool.ResetConnectBackoff()
			if renewed, err := serving.Trusted(roots); err != nil {
				log.Error("serving certificate of a replaced CA not discarded", "error", err)
			} else if renewed {
				log.Info("serving certificate of a replaced CA discarded; a new one is asked for")
			}
			log.Info("meshnetd trusts the CA of meshnet-controller", "configmap", cfg.DaemonNamespace+"/"+cfg.CAConfigMap)
		}
	} else {
		log.Warn("meshnetd serves plaintext (no --tls): tokens cross the node network in clear")
	}
	var creds credentials.PerRPCCredentials
	if cfg.TokenFile != "" {
		creds = auth.TokenFile{Path: cfg.TokenFile, Insecure: !cfg.TLS}
	} else {
		log.Warn("no --token-file: calls to other nodes' meshnetd will be refused")
	}
	pool := daemonclient.NewPool(peerTLS, creds)
	defer pool.Close()
	if trust != nil {
		go trust(pool)
	}
	locks := &linklock.Locks{}
	var linkSrv *linkserver.Server // serves before any DEL reaches Forget
	wirer, err := wiring.New(wiring.Config{
		NodeName: cfg.NodeName, NodeIP: cfg.NodeIP, NodeNetns: cfg.NodeNetns, MacvlanParents: cfg.MacvlanParents, PeerPort: port, Peers: pool,
		Store: store, Locks: locks, Topologies: topologies, Pods: nsReader, Client: kclient, Log: cfg.Log,
		Forget:  func(k podstore.Key) error { return linkSrv.Forget(k) },
		Changed: func(k podstore.Key) { linkSrv.Touch(k) },
		Hold:    func(k podstore.Key) func() { return linkSrv.Hold(k) },
	})
	if err != nil {
		return err
	}
	defer wirer.Close()
	linkSrv, err = linkserver.New(linkserver.Config{
		Pods: store, StateDir: filepath.Join(cfg.StateDir, "links"), Locks: locks, Remote: wirer, Links: wirer, Node: cfg.NodeName, NodeIP: cfg.NodeIP, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	dataSrv := dataserver.New(dataserver.Config{Reader: nsReader, Log: cfg.Log, Links: &daemonclient.Daemons{
		Node: cfg.NodeName, Local: linkSrv, Dial: pool.Conn,
		Resolver: &partition.Resolver{Reader: endpoints, Namespace: cfg.DaemonNamespace, Service: cfg.DaemonService, Port: "grpc"},
	}})

	policy := access.Policy(cfg.ReadOpen)
	issuer := auth.NewIssuer(func(ctx context.Context, path string) ([]byte, error) {
		return kube.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	}, log)
	checker := auth.NewChecker(kube, tokenReviewTTL).WithIssuer(issuer)
	rpc := metrics.NewRPC()
	serverOpts := []grpc.ServerOption{}
	if serverTLS != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	// A panic in a handler (a bug) fails its call, Internal, and is
	// logged; it does not take the node's links' daemon down.
	recovered := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		cfg.Log.Error("panic in a call", "node", cfg.NodeName, "method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "meshnetd of node %s failed on %s: %v", cfg.NodeName, method, p)
	})
	tcp := grpc.NewServer(append(append(serverOpts, serverBounds(checker, policy)...),
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered), rpc.UnaryServerInterceptor(), auth.UnaryInterceptor(checker, policy)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recovered), rpc.StreamServerInterceptor(), auth.StreamInterceptor(checker, policy),
			newStreams(maxStreams, maxStreamsPerCaller).interceptor()))...)
	meshnetv1.RegisterPeerServiceServer(tcp, wirer.PeerServer(linkSrv))
	meshnetv1.RegisterLinkServiceServer(tcp, linkSrv)
	meshnetv1.RegisterDataServiceServer(tcp, dataSrv)
	tcpHealth := health.NewServer()
	healthpb.RegisterHealthServer(tcp, tcpHealth)
	reflection.Register(tcp)

	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.NewLinks(store, linkSrv.ReadPod, cfg.Log), rpc)

	unix := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recovered)))
	meshnetv1.RegisterCNIServiceServer(unix, wirer.CNIServer())
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(unix, healthSrv)

	unixLis, err := listenUnix(cfg.Socket)
	if err != nil {
		return err
	}
	tcpLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		unixLis.Close()
		return fmt.Errorf("listen on %s: %w", cfg.GRPCAddr, err)
	}
	tcpLis = netutil.LimitListener(tcpLis, maxConns)
	gwDial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), daemonclient.MessageSizes()}
	if gwTLS != nil {
		gwDial[0] = grpc.WithTransportCredentials(gwTLS)
	}
	gw, err := gateway.New(ctx, gateway.Config{
		Endpoint:    loopback(tcpLis.Addr()),
		DialOptions: gwDial,
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
	if err != nil {
		unixLis.Close()
		tcpLis.Close()
		return err
	}
	defer gw.Close()
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		unixLis.Close()
		tcpLis.Close()
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	httpLis = netutil.LimitListener(httpLis, maxConns)
	// No ReadTimeout or WriteTimeout: watches and captures last as long as
	// their callers want; a body has its own deadline (gateway.Bodies).
	httpSrv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, TLSConfig: serverTLS, ErrorLog: stdlog.New(serverErrors{log}, "", 0)}
	serveHTTP := httpSrv.Serve
	if serverTLS != nil {
		serveHTTP = func(l net.Listener) error { return httpSrv.ServeTLS(l, "", "") }
	}

	serveErr := make(chan error, 3)
	go func() { serveErr <- unix.Serve(unixLis) }()
	go func() { serveErr <- tcp.Serve(tcpLis) }()
	go func() { serveErr <- serveHTTP(httpLis) }()
	statusDone := make(chan struct{})
	go func() { wirer.Run(ctx); close(statusDone) }()
	watchDone := make(chan struct{})
	go func() { linkSrv.Run(ctx); close(watchDone) }()
	healthSrv.SetServingStatus(cniplugin.HealthService, healthpb.HealthCheckResponse_SERVING)
	tcpHealth.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, p := range store.List() {
		// State set at runtime survives a daemon restart.
		if err := linkSrv.Reapply(ctx, p.Key()); err != nil {
			log.Warn("runtime state not re-applied", "pod", p.Key().String(), "error", err)
		}
	}
	log.Info("meshnetd serving", "tls", cfg.TLS, "socket", cfg.Socket, "grpc_addr", tcpLis.Addr().String(), "http_addr", httpLis.Addr().String(), "node_ip", cfg.NodeIP)

	installed := make(chan error, 1)
	go func() { installed <- installCNI(ctx, cfg, log) }()

	var runErr error
	for runErr == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			runErr = fmt.Errorf("grpc server: %w", err)
		case err := <-cacheDone:
			runErr = fmt.Errorf("kubernetes cache stopped: %w", err)
		case err := <-trustDone:
			runErr = err
		case err := <-installed:
			runErr, installed = err, nil
		}
	}
	log.Info("meshnetd stopping")
	healthSrv.Shutdown()
	tcpHealth.Shutdown()
	httpSrv.Close()
	if uninstalling(kube, cfg, log) {
		if err := cniconf.Remove(cfg.CNIConfDir); err != nil {
			log.Error("conflist not removed", "error", err)
		}
	}
	cancel()
	stopped := make(chan struct{})
	go func() { unix.GracefulStop(); tcp.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		unix.Stop()
		tcp.Stop()
	}
	<-statusDone
	<-watchDone
	os.Remove(cfg.Socket)
	return runErr
}

// uninstalling tells whether meshnetd is stopping for good, so that its
// conflist goes with it: when its DaemonSet is gone or being deleted, or
// cannot be read (no DaemonSet runs it). While the DaemonSet stays (a
// rollout, a restart, an upgrade), the conflist stays too: a pod created
// meanwhile fails CNI ADD, which the runtime retries until meshnetd is
// back, instead of starting without its links.
func uninstalling(kube kubernetes.Interface, cfg Config, log *slog.Logger) bool {
	if cfg.DaemonSet == "" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ds, err := kube.AppsV1().DaemonSets(cfg.DaemonNamespace).Get(ctx, cfg.DaemonSet, metav1.GetOptions{})
	switch {
	case err != nil:
		log.Info("removing the conflist: meshnetd's DaemonSet cannot be read", "daemonset", cfg.DaemonSet, "error", err)
		return true
	case ds.DeletionTimestamp != nil:
		log.Info("removing the conflist: meshnetd's DaemonSet is being deleted", "daemonset", cfg.DaemonSet)
		return true
	}
	log.Info("keeping the conflist: meshnetd's DaemonSet stays, pods created meanwhile wait for it", "daemonset", cfg.DaemonSet)
	return false
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster kubernetes config (or pass --kubeconfig): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// listenUnix listens on a root-only unix socket, replacing a stale one.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return lis, nil
}

// installCNI installs the plugin and writes the conflist once the primary
// CNI's configuration exists.
func installCNI(ctx context.Context, cfg Config, log *slog.Logger) error {
	bin, err := cniconf.InstallPlugin(cfg.CNIPlugin, cfg.CNIBinDir)
	if err != nil {
		return err
	}
	for {
		path, primary, err := cniconf.Write(cfg.CNIConfDir, map[string]any{"socket": cfg.Socket})
		if err == nil {
			log.Info("CNI plugin installed", "plugin", bin, "conflist", path, "primary", primary)
			return nil
		}
		if !errors.Is(err, cniconf.ErrNoPrimary) {
			return err
		}
		log.Info("waiting for the primary CNI's configuration", "dir", cfg.CNIConfDir)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}
