// Command meshnet-controller turns Topology edits into ApplyPod calls on the
// meshnetd of each pod's node and writes the kernel's state back to the
// status. Replicas elect a leader; only the leader acts.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/meshnet/meshnet/internal/meshnet-controller/manager"
	"github.com/meshnet/meshnet/internal/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "meshnet-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg manager.Config
	flag.StringVar(&cfg.Daemons.Namespace, "daemon-namespace", "meshnet", "namespace of the meshnetd Service")
	flag.StringVar(&cfg.Daemons.Service, "daemon-service", "meshnetd", "name of the meshnetd Service")
	flag.StringVar(&cfg.Daemons.Port, "daemon-port", "grpc", "name of the meshnetd Service's gRPC port")
	flag.StringVar(&cfg.TokenFile, "token-file", "/var/run/secrets/meshnetd/token", "service-account token for audience meshnetd (a projected token), sent to meshnetd")
	flag.BoolVar(&cfg.Plaintext, "daemon-plaintext", true, "talk to meshnetd without TLS (meshnetd without --tls). false (deploy/): keep meshnetd's CA (--ca-secret, published in --ca-configmap), sign meshnetd's serving certificates, and call meshnetd over TLS")
	flag.StringVar(&cfg.CASecret, "ca-secret", "meshnet-ca", "Secret in --daemon-namespace holding meshnetd's CA and its key, made empty by deploy/ and filled at first start")
	flag.StringVar(&cfg.CAConfigMap, "ca-configmap", "meshnet-ca", "ConfigMap in --daemon-namespace where meshnetd's CA certificate is published (ca.crt), for meshnetd, grpcurl and curl")
	flag.StringVar(&cfg.DaemonAccount, "daemon-service-account", "meshnetd", "service account of meshnetd in --daemon-namespace: the only one whose certificate requests are signed")
	flag.DurationVar(&cfg.Resync, "resync", 30*time.Second, "how often converged Topologies are re-applied, correcting drift")
	flag.DurationVar(&cfg.CallTimeout, "call-timeout", 5*time.Second, "timeout of one ApplyPod call, plus 10ms for each link of the pod")
	flag.IntVar(&cfg.Workers, "workers", 200, "how many Topologies are reconciled at once; a pass mostly waits on meshnetd and the API server")
	flag.BoolVar(&cfg.LeaderElect, "leader-elect", true, "elect a leader so that only one replica acts")
	flag.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "meshnet", "namespace of the leader election Lease")
	// A leader that cannot renew its Lease within the renew deadline (the
	// API server away that long) exits, and its restart campaigns again:
	// the kernel state stays with the daemons meanwhile.
	flag.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the last renewal before it takes the Lease over")
	flag.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew its Lease before it gives up leadership and exits")
	flag.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease")
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "address of the controller's /metrics; 0 disables it")
	flag.BoolVar(&cfg.MetricsSecure, "metrics-secure", true, "serve /metrics over HTTPS (a self-signed certificate) to callers allowed to get the non-resource URL /metrics, as meshnetd's; false serves plain HTTP to anyone")
	flag.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&cfg.PprofAddr, "pprof-bind-address", "0", "address of net/http/pprof (/debug/pprof/); \"0\" (the default) serves none")
	flag.StringVar(&cfg.Relay.Addr, "relay-bind-address", "0", "address of the aggregated API (APIService v1alpha1.meshnet.networkop.co.uk), which kubectl meshnet capture reaches through the API server (deploy/ serves it on :8443); \"0\" (the default) serves none")
	flag.StringVar(&cfg.Relay.Namespace, "relay-namespace", "meshnet", "namespace of the relay's Service and of the Secret holding its certificate")
	flag.StringVar(&cfg.Relay.Secret, "relay-secret", "meshnet-relay-tls", "Secret holding the relay's serving certificate and CA, made empty by deploy/ and filled at first start (deploy/'s Role names meshnet-relay-tls in meshnet)")
	flag.StringVar(&cfg.Relay.Service, "relay-service", "meshnet-controller", "Service the APIService names; the serving certificate is for it")
	showVersion := flag.Bool("version", false, "print meshnet-controller's version, commit and Go version, and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("meshnet-controller", version.Get())
		return nil
	}

	cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(cfg.Log.Handler()))
	// client-go's and the relay's k8s.io/apiserver controllers log through
	// klog: the same JSON lines.
	klog.SetSlogLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return manager.Run(ctx, cfg)
}
