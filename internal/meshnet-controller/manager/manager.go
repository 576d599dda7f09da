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

	"google.golang.org/grpc/credentials"
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
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsAddr},
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
