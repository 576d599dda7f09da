// Package daemon assembles meshnetd: the Kubernetes cache and client, the
// pod store, the CNIService on a root-only unix socket, and the node's TCP
// gRPC server, on which PeerService and any further Service (LinkService,
// DataService) are served behind one authenticating interceptor. On start it
// installs the CNI plugin and chains it after the primary CNI; a clean
// shutdown removes the chain again.
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
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
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
	"github.com/meshnet/meshnet/internal/cniplugin"
	"github.com/meshnet/meshnet/internal/linklock"
	"github.com/meshnet/meshnet/internal/podstore"
	"github.com/meshnet/meshnet/internal/wiring"
)

// Config is meshnetd's configuration, one field a flag.
type Config struct {
	NodeName string
	NodeIP   netip.Addr
	// NodeNetns is the node's network namespace; /proc/self/ns/net when
	// empty (the daemon runs with hostNetwork).
	NodeNetns string
	// Socket is the CNIService's unix socket, made mode 0600.
	Socket string
	// GRPCAddr is the TCP address of PeerService and the other services;
	// its port is every node's meshnetd port.
	GRPCAddr string
	// StateDir holds the pod store (StateDir/pods).
	StateDir string
	// CNIBinDir and CNIConfDir are the runtime's CNI directories.
	CNIBinDir, CNIConfDir string
	// CNIPlugin is the meshnet-cni binary to install into CNIBinDir.
	CNIPlugin string
	// Kubeconfig is a kubeconfig file; in-cluster config when empty.
	Kubeconfig string
	// TokenFile is this daemon's service-account token, sent to peers.
	TokenFile string
	// KubeQPS and KubeBurst bound the daemon's API requests; client-go's
	// defaults (5 and 10) make a node wiring many pods at once wait on its
	// own rate limiter.
	KubeQPS   float32
	KubeBurst int
	Log       *slog.Logger
}

// Deps are what meshnetd's services share. Services that change links take
// their locks from Locks.
type Deps struct {
	Config Config
	Store  *podstore.Store
	Locks  *linklock.Locks
	// Cache holds this node's Pods and all Topologies.
	Cache  cache.Cache
	Client client.Client
	Kube   kubernetes.Interface
	Auth   *auth.Checker
	Wirer  *wiring.Wirer
	Log    *slog.Logger
}

// Service is a gRPC service on meshnetd's TCP server. Register returns the
// access policy of its methods: a method missing from every policy is
// refused.
type Service interface {
	Register(s *grpc.Server, d *Deps) auth.Policy
}

// ServiceFunc adapts a function to a Service.
type ServiceFunc func(s *grpc.Server, d *Deps) auth.Policy

// Register implements Service.
func (f ServiceFunc) Register(s *grpc.Server, d *Deps) auth.Policy { return f(s, d) }

// PeerPolicy guards PeerService: the caller must be allowed to patch the
// status of Topologies in the namespace of the pod whose end it asks for,
// which meshnetd's service account is, and a pod's user is not.
func PeerPolicy() auth.Policy {
	access := func(ns func(any) string) auth.Access {
		return auth.Access{Verb: "patch", Group: v1beta1.GroupVersion.Group, Resource: "topologies", Subresource: "status", Namespace: ns}
	}
	end := func(req any) string {
		if r, ok := req.(interface{ GetEnd() *meshnetv1.LinkEnd }); ok {
			return r.GetEnd().GetPod().GetNamespace()
		}
		return ""
	}
	return auth.Policy{
		meshnetv1.PeerService_CreateRemoteEnd_FullMethodName: access(end),
		meshnetv1.PeerService_DeleteRemoteEnd_FullMethodName: access(end),
		meshnetv1.PeerService_SetRemoteState_FullMethodName:  access(end),
	}
}

// tokenReviewTTL is how long a reviewed token is trusted.
const tokenReviewTTL = 30 * time.Second

// Run serves until ctx ends, then stops cleanly and removes meshnet's
// conflist.
func Run(ctx context.Context, cfg Config, services ...Service) error {
	if cfg.NodeName == "" || !cfg.NodeIP.IsValid() {
		return errors.New("node name and node IP are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("node", cfg.NodeName)
	core.InitializeClock() // netem's time conversions need it
	ctrllog.SetLogger(logr.FromSlogHandler(cfg.Log.Handler()))

	_, portStr, err := net.SplitHostPort(cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc address %q: %w", cfg.GRPCAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 {
		return fmt.Errorf("grpc address %q needs a port", cfg.GRPCAddr)
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
	kcache, err := cache.New(restCfg, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName)},
		},
	})
	if err != nil {
		return fmt.Errorf("kubernetes cache: %w", err)
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &v1beta1.Topology{}} {
		if _, err := kcache.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("kubernetes cache: %w", err)
		}
	}
	kclient, err := client.New(restCfg, client.Options{Scheme: scheme})
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
	go func() { cacheDone <- kcache.Start(ctx) }()
	if !kcache.WaitForCacheSync(ctx) {
		return errors.New("kubernetes cache did not sync")
	}

	var creds credentials.PerRPCCredentials
	if cfg.TokenFile != "" {
		// TODO(tls): the node network carries the token in clear until
		// meshnetd serves TLS.
		creds = auth.TokenFile{Path: cfg.TokenFile, Insecure: true}
	} else {
		log.Warn("no --token-file: calls to other nodes' meshnetd will be refused")
	}
	locks := &linklock.Locks{}
	wirer, err := wiring.New(wiring.Config{
		NodeName: cfg.NodeName, NodeIP: cfg.NodeIP, NodeNetns: cfg.NodeNetns, PeerPort: port, PeerCreds: creds,
		Store: store, Locks: locks, Cache: kcache, Client: kclient, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	defer wirer.Close()
	deps := &Deps{Config: cfg, Store: store, Locks: locks, Cache: kcache, Client: kclient, Kube: kube,
		Auth: auth.NewChecker(kube, tokenReviewTTL), Wirer: wirer, Log: cfg.Log}

	// The interceptors read policy, which is complete before serving starts.
	policy := auth.Policy{}
	tcp := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor(deps.Auth, policy)),
		grpc.ChainStreamInterceptor(auth.StreamInterceptor(deps.Auth, policy)))
	meshnetv1.RegisterPeerServiceServer(tcp, wirer.PeerServer())
	for m, a := range PeerPolicy() {
		policy[m] = a
	}
	for _, s := range services {
		for m, a := range s.Register(tcp, deps) {
			policy[m] = a
		}
	}

	unix := grpc.NewServer()
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
	serveErr := make(chan error, 2)
	go func() { serveErr <- unix.Serve(unixLis) }()
	go func() { serveErr <- tcp.Serve(tcpLis) }()
	statusDone := make(chan struct{})
	go func() { wirer.Run(ctx); close(statusDone) }()
	healthSrv.SetServingStatus(cniplugin.HealthService, healthpb.HealthCheckResponse_SERVING)
	log.Info("meshnetd serving", "socket", cfg.Socket, "grpc_addr", tcpLis.Addr().String(), "node_ip", cfg.NodeIP)

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
		case err := <-installed:
			runErr, installed = err, nil
		}
	}
	log.Info("meshnetd stopping")
	healthSrv.Shutdown()
	if err := cniconf.Remove(cfg.CNIConfDir); err != nil {
		log.Error("conflist not removed", "error", err)
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
	os.Remove(cfg.Socket)
	return runErr
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
