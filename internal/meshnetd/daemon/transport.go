package daemon

import (
	"context"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"

	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/pki"
)

// transport is how meshnetd's TCP ports and its calls to other nodes'
// daemons are secured: TLS with a serving certificate meshnet-controller
// signs for this node, or (without --tls) plaintext, every field nil.
type transport struct {
	// server is the ports' TLS configuration.
	server *tls.Config
	// peer is for calls to other nodes' daemons, checked against the
	// address dialled; gateway for the in-process gateway, which dials
	// loopback and checks this node's IP (the certificate names it).
	peer, gateway credentials.TransportCredentials
	// trust waits for meshnet's CA and trusts it for peer and gateway,
	// then lets pool reconnect at once.
	trust func(pool *daemonclient.Pool) error
	stop  func()
}

// newTransport asks for this node's serving certificate (with cfg.TLS),
// and waits for it in the background: until it is signed the ports serve
// no handshake.
func newTransport(ctx context.Context, cfg Config, kube kubernetes.Interface, log *slog.Logger) (*transport, error) {
	if !cfg.TLS {
		log.Warn("meshnetd serves plaintext (no --tls): tokens cross the node network in clear")
		return &transport{stop: func() {}}, nil
	}
	serving, err := pki.NewServing(ctx, kube, pki.ServingOptions{Node: cfg.NodeName, IP: cfg.NodeIP, Dir: filepath.Join(cfg.StateDir, "pki"), Log: log})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := serving.Wait(ctx, 10*time.Minute); err != nil {
			log.Error("meshnetd serves no TLS handshake until its certificate is signed", "error", err)
		}
	}()
	peer, gw := pki.NewClient(""), pki.NewClient(cfg.NodeIP.String())
	return &transport{
		server:  serving.ServerTLS(),
		peer:    peer,
		gateway: gw,
		stop:    serving.Stop,
		trust: func(pool *daemonclient.Pool) error {
			roots, err := pki.Trust(ctx, kube, log, cfg.DaemonNamespace, cfg.CAConfigMap, 2*time.Second)
			if err != nil {
				return err
			}
			peer.SetRoots(roots)
			gw.SetRoots(roots)
			pool.ResetConnectBackoff()
			if renewed, err := serving.Trusted(roots); err != nil {
				log.Error("serving certificate of a replaced CA not discarded", "error", err)
			} else if renewed {
				log.Info("serving certificate of a replaced CA discarded; a new one is asked for")
			}
			log.Info("meshnetd trusts the CA of meshnet-controller", "configmap", cfg.DaemonNamespace+"/"+cfg.CAConfigMap)
			return nil
		},
	}, nil
}
