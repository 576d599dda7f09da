package dataserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/partition"
)

// NewCache returns the informer cache a Server reads: the Pods of every
// node, trimmed to what the frames use (every meshnetd holds them all, so
// they must stay small), every Topology, and the EndpointSlices of
// daemonNamespace indexed for partition.Resolver. Start it and wait for its
// sync before serving.
func NewCache(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, daemonNamespace string) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                {Transform: trimPod},
			&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{daemonNamespace: {}}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("data API cache: %w", err)
	}
	if err := partition.IndexEndpointSlices(ctx, c); err != nil {
		return nil, fmt.Errorf("data API cache: %w", err)
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &v1beta1.Topology{}, &discoveryv1.EndpointSlice{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("data API cache: %w", err)
		}
	}
	return c, nil
}

// trimPod keeps of a Pod what Frames reads: its node, phase, host IP,
// readiness and deletion.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, HostIP: p.Status.HostIP},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}
