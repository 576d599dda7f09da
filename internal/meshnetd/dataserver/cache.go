package dataserver

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/meshnetd/nscache"
)

// NewReader returns the reader a Server reads Pods and Topologies through:
// informers of a namespace run while someone reads it (and for idle after),
// so a daemon watches the namespaces its data API is asked about, not the
// cluster. Pods are trimmed to what the frames and the wiring use. Run it.
func NewReader(cfg *rest.Config, scheme *runtime.Scheme) (*nscache.Reader, error) {
	return nscache.New(nscache.Config{
		Rest: cfg, Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: trimPod}},
	})
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
