// Command meshnet-controller turns Topology edits into ApplyPod calls on the
// meshnetd of each pod's node and writes the kernel's state back to the
// status. Replicas elect a leader; only the leader acts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/meshnet-controller/controller"
	"github.com/meshnet/meshnet/internal/meshnet-controller/relay"
	"github.com/meshnet/meshnet/internal/meshnet-controller/signer"
	"github.com/meshnet/meshnet/internal/partition"
	"github.com/meshnet/meshnet/internal/pki"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "meshnet-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		r             controller.Reconciler
		resolver      partition.Resolver
		tokenFile     string
		insecureConn  bool
		leaderElect   bool
		leaderNS      string
		lease         time.Duration
		renew         time.Duration
		retry         time.Duration
		metricsAddr   string
		probeAddr     string
		pprofAddr     string
		relayAddr     string
		relayNS       string
		relaySecret   string
		relayService  string
		caSecret      string
		caConfigMap   string
		daemonAccount string
	)
	flag.StringVar(&resolver.Namespace, "daemon-namespace", "meshnet", "namespace of the meshnetd Service")
	flag.StringVar(&resolver.Service, "daemon-service", "meshnetd", "name of the meshnetd Service")
	flag.StringVar(&resolver.Port, "daemon-port", "grpc", "name of the meshnetd Service's gRPC port")
	flag.StringVar(&tokenFile, "token-file", "/var/run/secrets/meshnetd/token", "service-account token for audience meshnetd (a projected token), sent to meshnetd")
	flag.BoolVar(&insecureConn, "daemon-plaintext", true, "talk to meshnetd without TLS (meshnetd without --tls). false (deploy/): keep meshnetd's CA (--ca-secret, published in --ca-configmap), sign meshnetd's serving certificates, and call meshnetd over TLS")
	flag.StringVar(&caSecret, "ca-secret", "meshnet-ca", "Secret in --daemon-namespace holding meshnetd's CA and its key, made empty by deploy/ and filled at first start")
	flag.StringVar(&caConfigMap, "ca-configmap", "meshnet-ca", "ConfigMap in --daemon-namespace where meshnetd's CA certificate is published (ca.crt), for meshnetd, grpcurl and curl")
	flag.StringVar(&daemonAccount, "daemon-service-account", "meshnetd", "service account of meshnetd in --daemon-namespace: the only one whose certificate requests are signed")
	flag.DurationVar(&r.Resync, "resync", 30*time.Second, "how often converged Topologies are re-applied, correcting drift")
	flag.DurationVar(&r.CallTimeout, "call-timeout", 5*time.Second, "timeout of one ApplyPod call, plus 10ms for each link of the pod")
	flag.IntVar(&r.Workers, "workers", 200, "how many Topologies are reconciled at once; a pass mostly waits on meshnetd and the API server")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader so that only one replica acts")
	flag.StringVar(&leaderNS, "leader-election-namespace", "meshnet", "namespace of the leader election Lease")
	// A leader that cannot renew its Lease within the renew deadline (the
	// API server away that long) exits, and its restart campaigns again:
	// the kernel state stays with the daemons meanwhile.
	flag.DurationVar(&lease, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the last renewal before it takes the Lease over")
	flag.DurationVar(&renew, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew its Lease before it gives up leadership and exits")
	flag.DurationVar(&retry, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the controller's /metrics; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "address of net/http/pprof (/debug/pprof/); \"0\" (the default) serves none")
	flag.StringVar(&relayAddr, "relay-bind-address", "0", "address of the aggregated API (APIService v1alpha1.meshnet.networkop.co.uk), which kubectl meshnet capture reaches through the API server (deploy/ serves it on :8443); \"0\" (the default) serves none")
	flag.StringVar(&relayNS, "relay-namespace", "meshnet", "namespace of the relay's Service and of the Secret holding its certificate")
	flag.StringVar(&relaySecret, "relay-secret", "meshnet-relay-tls", "Secret holding the relay's serving certificate and CA, made empty by deploy/ and filled at first start (deploy/'s Role names meshnet-relay-tls in meshnet)")
	flag.StringVar(&relayService, "relay-service", "meshnet-controller", "Service the APIService names; the serving certificate is for it")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	// client-go's and the relay's k8s.io/apiserver controllers log through
	// klog: the same JSON lines.
	klog.SetSlogLogger(logger)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "meshnet-controller.networkop.co.uk",
		LeaderElectionNamespace: leaderNS,
		LeaseDuration:           &lease,
		RenewDeadline:           &renew,
		RetryPeriod:             &retry,
		// A leader stopped (a rollout, a drain) hands the Lease over as
		// it exits, so that a standby leads within its retry period, not
		// once the Lease expires: a LinkFault's edges are not held up. Safe
		// as the process ends when the manager does.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("cache not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	resolver.Reader = mgr.GetCache()
	r.Client = mgr.GetClient()
	r.Daemons = &resolver
	r.Recorder = mgr.GetEventRecorder("meshnet-controller")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var transport credentials.TransportCredentials
	if !insecureConn {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		ca, err := pki.EnsureCA(ctx, kube, logger, pki.Names{Namespace: resolver.Namespace, Secret: caSecret, ConfigMap: caConfigMap})
		if err != nil {
			return err
		}
		transport = credentials.NewTLS(pki.ClientTLS(ca.Pool(), ""))
		s := &signer.Signer{Reader: mgr.GetCache(), Kube: kube, CA: ca, Log: logger,
			Requester: serviceaccount.MakeUsername(resolver.Namespace, daemonAccount)}
		if err := s.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if insecureConn {
		logger.Warn("meshnet-controller calls meshnetd in plaintext (--daemon-plaintext): its token crosses the node network in clear")
	}
	r.Pool = daemonclient.NewPool(transport, auth.TokenFile{Path: tokenFile, Insecure: insecureConn})
	defer r.Pool.Close()
	if relayAddr != "0" {
		opts := relay.Options{Addr: relayAddr, Namespace: relayNS, Secret: relaySecret, Service: relayService}
		if err := relay.AddToManager(ctx, mgr, &resolver, r.Pool, logger, opts); err != nil {
			return err
		}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
