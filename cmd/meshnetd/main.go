// Command meshnetd is meshnet's per-node daemon: it wires the links of the
// node's pods at CNI ADD and removes them at DEL.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/meshnet/meshnet/internal/meshnetd/daemon"
	"github.com/meshnet/meshnet/internal/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "meshnetd:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		cfg       daemon.Config
		nodeIP    string
		logFormat string
		qps       float64
	)
	exe, _ := os.Executable()
	flag.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	flag.StringVar(&nodeIP, "node-ip", os.Getenv("NODE_IP"), "IP of this node, the VTEP of its VXLAN links (default $NODE_IP)")
	flag.StringVar(&cfg.NodeNetns, "node-netns", "/proc/self/ns/net", "the node's network namespace")
	flag.StringVar(&cfg.Socket, "socket", "/run/meshnet/cni.sock", "unix socket of the CNI service (mode 0600)")
	flag.StringVar(&cfg.GRPCAddr, "grpc-addr", ":51111", "TCP address of the gRPC services; its port is every node's meshnetd port")
	flag.StringVar(&cfg.HTTPAddr, "http-addr", ":51112", "TCP address of REST, /metrics, /healthz, /readyz and /openapi.json")
	flag.BoolVar(&cfg.ReadOpen, "read-open", false, "serve read-only calls (GetLink, ListLinks, WatchLinks, the data API, /metrics) without a token; off: a read needs a token allowed to list the namespace's Topologies, /metrics one allowed to get it")
	flag.StringVar(&cfg.DaemonNamespace, "daemon-namespace", envOr("POD_NAMESPACE", "meshnet"), "namespace of meshnetd's Service (default $POD_NAMESPACE, else meshnet)")
	flag.StringVar(&cfg.DaemonService, "daemon-service", "meshnetd", "name of meshnetd's Service, whose EndpointSlices find the other nodes' daemons")
	flag.StringVar(&cfg.DaemonSet, "daemonset", "", "name of the DaemonSet running meshnetd: while it exists, stopping keeps the conflist (pods created meanwhile wait); empty: the conflist is removed on every stop")
	flag.StringVar(&cfg.StateDir, "state-dir", "/var/lib/meshnet", "directory of the pod store and (--tls) the serving certificate and key")
	flag.StringVar(&cfg.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "CNI plugin directory to install meshnet into")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI configuration directory of the primary CNI")
	flag.StringVar(&cfg.CNIPlugin, "cni-plugin", filepath.Join(filepath.Dir(exe), "meshnet-cni"), "meshnet-cni binary to install")
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	flag.StringVar(&cfg.TokenFile, "token-file", "/var/run/secrets/meshnetd/token", "service-account token for audience meshnetd (a projected token), sent to other nodes' meshnetd")
	flag.BoolVar(&cfg.TLS, "tls", false, "serve gRPC and HTTP over TLS with a certificate meshnet-controller signs (asked for through the CertificateSigningRequest API, kept in --state-dir/pki, renewed before expiry), and call other nodes' meshnetd over TLS; deploy/ sets it. Off: plaintext, and tokens cross the node network in clear")
	flag.StringVar(&cfg.CAConfigMap, "ca-configmap", "meshnet-ca", "ConfigMap in --daemon-namespace where meshnet-controller publishes the CA of meshnetd's certificates (ca.crt), with --tls")
	flag.Float64Var(&qps, "kube-api-qps", 50, "requests per second to the API server")
	flag.IntVar(&cfg.KubeBurst, "kube-api-burst", 100, "burst of requests to the API server")
	macvlanParents := flag.String("macvlan-parents", os.Getenv("MACVLAN_PARENTS"), "comma-separated NICs of the node trusted as macvlan parents whatever their kind (a kind node's eth0 is a veth); others must not be a veth, a bridge or a bridge's port (default $MACVLAN_PARENTS)")
	underlayGuard := flag.Bool("underlay-guard", true, "keep the node's VXLAN port to the links' own ends: an nftables table (inet meshnet) drops a datagram carrying a link's VNI from anyone but that link's far end, and every datagram to the links' ports the node would forward (from its pods); false leaves the port open to anyone who reaches it")
	flag.Int64Var(&cfg.MemoryLimit, "memory-limit", envInt("MEMORY_LIMIT"), "the container's memory limit in bytes (default $MEMORY_LIMIT, which the DaemonSet sets from limits.memory); meshnetd's Go memory limit is 90% of it less the kernel memory charged to the container (its interfaces), unless GOMEMLIMIT is set")
	flag.BoolVar(&cfg.Profiling, "pprof", false, "serve net/http/pprof on the HTTP port, /debug/pprof/ (off by default)")
	flag.StringVar(&logFormat, "log-format", "json", "log format: json or text")
	showVersion := flag.Bool("version", false, "print meshnetd's version, commit and Go version, and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("meshnetd", version.Get())
		return nil
	}

	var h slog.Handler
	switch logFormat {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, nil)
	case "text":
		h = slog.NewTextHandler(os.Stderr, nil)
	default:
		return fmt.Errorf("--log-format %q: want json or text", logFormat)
	}
	cfg.Log = slog.New(h)
	// client-go's certificate manager logs through klog: the same lines.
	klog.SetSlogLogger(cfg.Log)
	cfg.KubeQPS = float32(qps)
	cfg.NoUnderlayGuard = !*underlayGuard
	for _, nic := range strings.Split(*macvlanParents, ",") {
		if nic = strings.TrimSpace(nic); nic != "" {
			cfg.MacvlanParents = append(cfg.MacvlanParents, nic)
		}
	}
	ip, err := netip.ParseAddr(nodeIP)
	if err != nil {
		return fmt.Errorf("--node-ip %q: %w", nodeIP, err)
	}
	cfg.NodeIP = ip
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return daemon.Run(ctx, cfg)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func envInt(key string) int64 {
	n, _ := strconv.ParseInt(os.Getenv(key), 10, 64)
	return n
}
