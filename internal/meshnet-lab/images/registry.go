package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an in-memory OCI registry (go-containerregistry's) serving
// plain HTTP on one address. Nodes name it as the mirror of the public
// registries, so an image pushed here as library/alpine:latest is what a
// pod's `image: alpine` pulls.
type Registry struct {
	Addr string // host:port
	srv  *http.Server
	lis  net.Listener
}

// ServeRegistry starts a registry listening on addr.
func ServeRegistry(addr string, log *slog.Logger) (*Registry, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listen on %s: %w", addr, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{Addr: lis.Addr().String(), lis: lis,
		srv: &http.Server{Handler: registry.New(registry.Logger(slog.NewLogLogger(log.Handler(), slog.LevelDebug)))}}
	go func() { _ = r.srv.Serve(lis) }()
	return r, nil
}

// Push stores img under repo:tag, where repo is the path a mirror is
// asked for: "library/alpine" for docker.io's alpine, "pause" for
// registry.k8s.io/pause, "meshnet/meshnet" for ghcr.io/meshnet/meshnet.
func (r *Registry) Push(ctx context.Context, repoTag string, img v1.Image) error {
	ref, err := name.ParseReference(r.Addr+"/"+strings.TrimPrefix(repoTag, "/"), name.Insecure)
	if err != nil {
		return fmt.Errorf("image reference %s: %w", repoTag, err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Close stops serving.
func (r *Registry) Close() error {
	if err := r.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
