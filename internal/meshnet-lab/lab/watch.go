package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// WaitTopologies waits until done accepts the Topologies of namespace,
// sorted by name. It lists once and then follows a watch, so that waiting
// on hundreds of objects costs the API server one event each rather than a
// full list per poll. done returns what it still waits for, which the error
// names when ctx ends first.
func (l *Lab) WaitTopologies(ctx context.Context, namespace string, done func([]*v1beta1.Topology) (pending string)) error {
	for {
		pending, err := l.waitTopologies(ctx, namespace, done)
		if err == nil && pending == "" {
			return nil
		}
		if ctx.Err() != nil {
			if pending == "" {
				pending = fmt.Sprint(err)
			}
			return fmt.Errorf("Topologies of %s: waiting for %s: %w", namespace, pending, ctx.Err())
		}
		// The watch ended (API server restart, expired resourceVersion):
		// list again.
	}
}

func (l *Lab) waitTopologies(ctx context.Context, namespace string, done func([]*v1beta1.Topology) string) (string, error) {
	var list v1beta1.TopologyList
	if err := l.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("list Topologies: %w", err)
	}
	seen := map[string]*v1beta1.Topology{}
	for i := range list.Items {
		seen[list.Items[i].Name] = &list.Items[i]
	}
	sorted := func() []*v1beta1.Topology {
		return slices.SortedFunc(maps.Values(seen), func(a, b *v1beta1.Topology) int { return strings.Compare(a.Name, b.Name) })
	}
	pending := done(sorted())
	if pending == "" {
		return "", nil
	}
	w, err := l.Client.Watch(ctx, &v1beta1.TopologyList{}, client.InNamespace(namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return pending, fmt.Errorf("watch Topologies: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return pending, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return pending, errors.New("watch Topologies ended")
			}
			if ev.Type == watch.Error {
				return pending, fmt.Errorf("watch Topologies: %v", ev.Object)
			}
			topo, ok := ev.Object.(*v1beta1.Topology)
			if !ok {
				continue // a bookmark
			}
			if ev.Type == watch.Deleted {
				delete(seen, topo.Name)
			} else {
				seen[topo.Name] = topo
			}
			if pending = done(sorted()); pending == "" {
				return "", nil
			}
		}
	}
}
