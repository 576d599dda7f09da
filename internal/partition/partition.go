// Package partition decides which meshnetd owns a pod's links: the daemon on
// the node that hosts the pod, found through the daemon Service's
// EndpointSlices by nodeName. EndpointSlices scale past 1,000 nodes, where a
// single Endpoints object does not.
package partition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeNameField indexes EndpointSlices by the nodes of their endpoints.
const NodeNameField = "meshnet.nodeName"

// ErrNoDaemon means no ready meshnetd serves the node.
var ErrNoDaemon = errors.New("no ready meshnetd on node")

// IndexEndpointSlices is the field index Resolver needs on a cache.
func IndexEndpointSlices(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &discoveryv1.EndpointSlice{}, NodeNameField, func(o client.Object) []string {
		var nodes []string
		for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
			if ep.NodeName != nil {
				nodes = append(nodes, *ep.NodeName)
			}
		}
		return nodes
	})
}

// Finder finds a node's meshnetd: a Resolver, or a test's stand-in.
type Finder interface {
	DaemonFor(ctx context.Context, node string) (string, error)
}

// Resolver finds a node's meshnetd.
type Resolver struct {
	// Reader is a cache indexed with IndexEndpointSlices.
	Reader client.Reader
	// Namespace and Service name the daemon's Service; Port names its gRPC port.
	Namespace, Service, Port string
}

// DaemonFor returns the address (host:port) of the ready meshnetd on node.
func (r *Resolver) DaemonFor(ctx context.Context, node string) (string, error) {
	var slices discoveryv1.EndpointSliceList
	err := r.Reader.List(ctx, &slices,
		client.InNamespace(r.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: r.Service},
		client.MatchingFields{NodeNameField: node})
	if err != nil {
		return "", fmt.Errorf("list endpointslices of %s/%s for node %s: %w", r.Namespace, r.Service, node, err)
	}
	for _, s := range slices.Items {
		port, ok := r.port(&s)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName == nil || *ep.NodeName != node || len(ep.Addresses) == 0 {
				continue
			}
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			return net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))), nil
		}
	}
	return "", fmt.Errorf("%w %s (service %s/%s)", ErrNoDaemon, node, r.Namespace, r.Service)
}

func (r *Resolver) port(s *discoveryv1.EndpointSlice) (int32, bool) {
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == r.Port && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}

// NewCache returns a cache of the EndpointSlices of namespace, indexed for
// Resolver. Start it and wait for its sync before resolving.
func NewCache(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, namespace string) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {}},
	})
	if err != nil {
		return nil, fmt.Errorf("EndpointSlice cache: %w", err)
	}
	if err := IndexEndpointSlices(ctx, c); err != nil {
		return nil, fmt.Errorf("EndpointSlice cache: %w", err)
	}
	if _, err := c.GetInformer(ctx, &discoveryv1.EndpointSlice{}); err != nil {
		return nil, fmt.Errorf("EndpointSlice cache: %w", err)
	}
	return c, nil
}
