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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnetd/dataserver"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
	"github.com/meshnet/meshnet/internal/meshnetd/nscache"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/meshnetd/topotrack"
	"github.com/meshnet/meshnet/internal/meshnetd/underlay"
	"github.com/meshnet/meshnet/internal/partition"
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
	// NoUnderlayGuard leaves the node's VXLAN port open to anyone who
	// reaches it (podlinks.Config.UnderlayGuard): for a node whose
	// firewall is another's to hold.
	NoUnderlayGuard bool
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
	// StateDir holds the pod store (StateDir/pods) and, with TLS, the
	// serving certificate (StateDir/pki).
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

	port, err := grpcPort(cfg.GRPCAddr)
	if err != nil {
		return err
	}
	// Before any connection of its own to the API server, which could
	// take one of them as its local port.
	if err := reservePorts(cfg.GRPCAddr, cfg.HTTPAddr); err != nil {
		log.Warn("meshnetd's ports not reserved: an outgoing connection of the node may take one", "error", err)
	}
	k, err := newKube(cfg)
	if err != nil {
		return err
	}
	store, err := openStore(cfg.StateDir, log)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := startWatches(ctx, cfg, k, store)
	if err != nil {
		return err
	}
	defer w.topologies.Close()

	tr, err := newTransport(ctx, cfg, k.kube, log)
	if err != nil {
		return err
	}
	defer tr.stop()
	pool, trustDone := newPool(cfg, tr, log)
	defer pool.Close()
	podLinks, err := podlinks.New(podlinks.Config{
		NodeName: cfg.NodeName, NodeIP: cfg.NodeIP, NodeNetns: cfg.NodeNetns, MacvlanParents: cfg.MacvlanParents, PeerPort: port, Peers: pool,
		UnderlayGuard: !cfg.NoUnderlayGuard,
		Store:         store, Topologies: w.topologies, Pods: w.namespaces, Client: k.client, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	defer podLinks.Close()
	w.topologies.OnDelete(podLinks.TopologyDeleted)
	dataSrv := dataserver.New(dataserver.Config{Reader: w.namespaces, Log: cfg.Log, Links: &daemonclient.Daemons{
		Node: cfg.NodeName, Local: podLinks.LinkServer(), Dial: pool.Conn,
		Resolver: &partition.Resolver{Reader: w.endpoints, Namespace: cfg.DaemonNamespace, Service: cfg.DaemonService, Port: "grpc"},
	}})
	issuer := auth.NewIssuer(func(ctx context.Context, path string) ([]byte, error) {
		return k.kube.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	}, log)
	checker := auth.NewChecker(k.kube, tokenReviewTTL).WithIssuer(issuer)
	srv, err := newServers(ctx, cfg, log, tr, checker, services{
		cni: podLinks.CNIServer(), peer: podLinks.PeerServer(), link: podLinks.LinkServer(), data: dataSrv,
		links:    metrics.NewLinks(store, podLinks.ReadPod, cfg.Log),
		underlay: underlay.NewCollector(podLinks.UnderlayGuard()),
	})
	if err != nil {
		return err
	}

	serveErr := make(chan error, 3)
	srv.serve(serveErr)
	linksDone := make(chan struct{})
	go func() { podLinks.Run(ctx); close(linksDone) }()
	for _, p := range store.List() {
		// State set at runtime survives a daemon restart.
		if err := podLinks.Reapply(ctx, p.Key()); err != nil {
			log.Warn("runtime state not re-applied", "pod", p.Key().String(), "error", err)
		}
	}
	log.Info("meshnetd serving", "tls", cfg.TLS, "socket", cfg.Socket, "grpc_addr", srv.tcpLis.Addr().String(), "http_addr", srv.httpLis.Addr().String(), "node_ip", cfg.NodeIP)

	installed := make(chan error, 1)
	go func() { installed <- installCNI(ctx, cfg, log) }()

	runErr := firstEnd(ctx, serveErr, w.done, trustDone, installed)
	log.Info("meshnetd stopping")
	srv.closeHTTP()
	if uninstalling(k.kube, cfg, log) {
		if err := cniconf.Remove(cfg.CNIConfDir); err != nil {
			log.Error("conflist not removed", "error", err)
		}
	}
	cancel() // the watches and the pods' links' loops
	srv.stopGRPC()
	<-linksDone
	os.Remove(cfg.Socket)
	return runErr
}

// newPool is the connections to other nodes' daemons, with this
// daemon's token; with TLS it trusts meshnet's CA once the CA is
// published, and the channel has the error when it cannot be trusted.
func newPool(cfg Config, tr *transport, log *slog.Logger) (*daemonclient.Pool, <-chan error) {
	var creds credentials.PerRPCCredentials
	if cfg.TokenFile != "" {
		creds = auth.TokenFile{Path: cfg.TokenFile, Insecure: !cfg.TLS}
	} else {
		log.Warn("no --token-file: calls to other nodes' meshnetd will be refused")
	}
	pool := daemonclient.NewPool(tr.peer, creds)
	trustDone := make(chan error, 1)
	if tr.trust != nil { // the CA is awaited beside the rest
		go func() {
			if err := tr.trust(pool); err != nil {
				trustDone <- err
			}
		}()
	}
	return pool, trustDone
}

// firstEnd waits for what ends meshnetd: ctx, a server's or the cache's
// end, the CA that cannot be trusted, or the CNI plugin's installation
// failing (its success ends nothing).
func firstEnd(ctx context.Context, serveErr, cacheDone, trustDone, installed <-chan error) error {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			return fmt.Errorf("grpc server: %w", err)
		case err := <-cacheDone:
			return fmt.Errorf("kubernetes cache stopped: %w", err)
		case err := <-trustDone:
			return err
		case err := <-installed:
			if err != nil {
				return err
			}
			installed = nil
		}
	}
	return nil
}

// watches are meshnetd's read sources, each watching no more than it
// serves: the EndpointSlices of the daemons, the Topologies of this node's
// pods (one watch each), and the Pods and Topologies of the namespaces
// being read.
type watches struct {
	endpoints  cache.Cache
	namespaces *nscache.Reader
	topologies *topotrack.Tracker
	// done has the EndpointSlice cache's end.
	done <-chan error
}

// startWatches starts the watches, until ctx ends, once the daemons'
// EndpointSlices are in the cache.
func startWatches(ctx context.Context, cfg Config, k *kube, store *podstore.Store) (*watches, error) {
	endpoints, err := partition.NewCache(ctx, k.rest, k.scheme, cfg.DaemonNamespace)
	if err != nil {
		return nil, err
	}
	namespaces, err := dataserver.NewReader(k.rest, k.scheme)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- endpoints.Start(ctx) }()
	if !endpoints.WaitForCacheSync(ctx) {
		return nil, errors.New("the daemons' EndpointSlice cache did not sync")
	}
	go namespaces.Run(ctx)
	topologies := topotrack.New(k.client)
	topologies.Follow(store)
	return &watches{endpoints: endpoints, namespaces: namespaces, topologies: topologies, done: done}, nil
}

// openStore opens the pod store in stateDir/pods, and moves into it the
// runtime records that meshnetd kept in stateDir/links before they were a
// part of each pod's record.
func openStore(stateDir string, log *slog.Logger) (*podstore.Store, error) {
	store, err := podstore.Open(filepath.Join(stateDir, "pods"))
	if err != nil {
		return nil, err
	}
	adopted, dropped, err := store.AdoptRuntimes(filepath.Join(stateDir, "links"))
	for _, k := range adopted {
		log.Info("runtime record moved into the pod's record", "pod", k.String())
	}
	for _, k := range dropped {
		log.Info("runtime record of a pod no longer wired here removed", "pod", k.String())
	}
	if err != nil {
		return nil, err
	}
	return store, nil
}

// grpcPort is the port of the gRPC address, which other nodes' daemons
// call this one's on.
func grpcPort(addr string) (int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("grpc address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 {
		return 0, fmt.Errorf("grpc address %q needs a port", addr)
	}
	return port, nil
}

// kube is meshnetd's way to the API server.
type kube struct {
	rest   *rest.Config
	scheme *runtime.Scheme
	client client.WithWatch
	kube   kubernetes.Interface
}

// newKube makes the API clients of cfg's kubeconfig (in-cluster without
// one), paced at cfg's QPS.
func newKube(cfg Config) (*kube, error) {
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	restCfg.QPS, restCfg.Burst = cfg.KubeQPS, cfg.KubeBurst
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kc, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &kube{rest: restCfg, scheme: scheme, client: c, kube: kc}, nil
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
