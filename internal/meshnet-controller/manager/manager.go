// Package manager assembles meshnet-controller: one controller-runtime
// manager, whose replicas elect a leader, running the Topology reconciler,
// meshnetd's CA and certificate signer (when meshnetd is called over TLS)
// and the relay (the aggregated API). The command's main only reads its
// flags into a Config and sets up the process's logging.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	gwruntime "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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

// LeaderElectionID names the Lease the replicas elect a leader with.
const LeaderElectionID = "meshnet-controller.networkop.co.uk"

// Config is what meshnet-controller runs with; each field is a flag of the
// command, which documents it.
type Config struct {
	// Resync, CallTimeout and Workers tune the reconciler
	// (controller.Reconciler's fields of the same names).
	Resync, CallTimeout time.Duration
	Workers             int
	// Daemons names meshnetd's Service and its gRPC port; its Reader is the
	// manager's cache.
	Daemons partition.Resolver
	// TokenFile is the token sent to meshnetd.
	TokenFile string
	// Plaintext calls meshnetd without TLS. Otherwise meshnetd's CA is kept
	// in the Secret CASecret, published in the ConfigMap CAConfigMap (both
	// in Daemons.Namespace), and the certificate requests of
	// DaemonAccount are signed.
	Plaintext                            bool
	CASecret, CAConfigMap, DaemonAccount string

	LeaderElect                               bool
	LeaderElectionNamespace                   string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// MetricsAddr, ProbeAddr and PprofAddr are the manager's servers; "0"
	// serves none.
	MetricsAddr, ProbeAddr, PprofAddr string
	// MetricsSecure serves /metrics over HTTPS (a certificate the manager
	// makes) to callers the API server says may get the non-resource URL
	// /metrics (TokenReview, SubjectAccessReview), as meshnetd serves its
	// own: the metrics name every namespace's Topologies. Off, anyone who
	// reaches the port reads them.
	MetricsSecure bool
	// Relay is the aggregated API; Relay.Addr "0" serves none.
	Relay relay.Options

	Log *slog.Logger
}

// Run runs meshnet-controller until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		LeaseDuration:           &cfg.LeaseDuration,
		RenewDeadline:           &cfg.RenewDeadline,
		RetryPeriod:             &cfg.RetryPeriod,
		// A leader stopped (a rollout, a drain) hands the Lease over as
		// it exits, so that a standby leads within its retry period, not
		// once the Lease expires: a LinkFault's edges are not held up. Safe
		// as the process ends when the manager does.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsOptions(cfg),
		HealthProbeBindAddress:        cfg.ProbeAddr,
		PprofBindAddress:              cfg.PprofAddr,
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
	daemons := cfg.Daemons
	daemons.Reader = mgr.GetCache()

	transport, err := daemonTransport(ctx, cfg, mgr, restCfg, log)
	if err != nil {
		return err
	}
	pool := daemonclient.NewPool(transport, auth.TokenFile{Path: cfg.TokenFile, Insecure: cfg.Plaintext})
	defer pool.Close()
	if cfg.Relay.Addr != "0" {
		if err := relay.AddToManager(ctx, mgr, &daemons, pool, log, cfg.Relay); err != nil {
			return err
		}
	}
	r := &controller.Reconciler{
		Client: mgr.GetClient(), Daemons: &daemons, Pool: pool, Recorder: mgr.GetEventRecorder("meshnet-controller"),
		Resync: cfg.Resync, CallTimeout: cfg.CallTimeout, Workers: cfg.Workers,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// daemonTransport is how meshnetd is called: over TLS verified against
// meshnet's CA, which this controller keeps and signs meshnetd's
// certificates with, or in plaintext (nil).
func daemonTransport(ctx context.Context, cfg Config, mgr ctrl.Manager, restCfg *rest.Config, log *slog.Logger) (credentials.TransportCredentials, error) {
	if cfg.Plaintext {
		log.Warn("meshnet-controller calls meshnetd in plaintext (--daemon-plaintext): its token crosses the node network in clear")
		return nil, nil
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ca, err := pki.EnsureCA(ctx, kube, log, pki.Names{Namespace: cfg.Daemons.Namespace, Secret: cfg.CASecret, ConfigMap: cfg.CAConfigMap})
	if err != nil {
		return nil, err
	}
	s := &signer.Signer{Reader: mgr.GetCache(), Kube: kube, CA: ca, Log: log,
		Requester: serviceaccount.MakeUsername(cfg.Daemons.Namespace, cfg.DaemonAccount)}
	if err := s.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return credentials.NewTLS(pki.ClientTLS(ca.Pool(), "")), nil
}

// metricsOptions serves /metrics as cfg says.
func metricsOptions(cfg Config) metricsserver.Options {
	o := metricsserver.Options{BindAddress: cfg.MetricsAddr}
	if cfg.MetricsSecure {
		o.SecureServing = true
		o.FilterProvider = metricsAccess
	}
	return o
}

// metricsAccess admits to /metrics whom meshnetd admits to its own
// (internal/auth): a token for the audience meshnetd whose user may get
// the non-resource URL /metrics. Others get 401 or 403 saying why.
func metricsAccess(c *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	kube, err := kubernetes.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics access: %w", err)
	}
	checker := auth.NewChecker(kube, metricsReviewTTL)
	return func(_ logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := checker.HTTP(r, auth.Access{Verb: "get", Path: "/metrics"}); err != nil {
				http.Error(w, status.Convert(err).Message(), gwruntime.HTTPStatusFromCode(status.Code(err)))
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// metricsReviewTTL is how long a scraper's reviews are kept: a scrape
// every 15 s costs the API server none.
const metricsReviewTTL = 30 * time.Second
