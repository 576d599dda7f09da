package meshnetctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
)

// labKinds are the kinds of a lab's objects, in the order to delete them.
var labKinds = []struct {
	name string
	list func() client.ObjectList
}{
	{"linkfault.networkop.co.uk", func() client.ObjectList { return &v1beta1.LinkFaultList{} }},
	{"pod", func() client.ObjectList { return &corev1.PodList{} }},
	{"service", func() client.ObjectList { return &corev1.ServiceList{} }},
	{"topology.networkop.co.uk", func() client.ObjectList { return &v1beta1.TopologyList{} }},
	{"configmap", func() client.ObjectList { return &corev1.ConfigMapList{} }},
}

// deleteLab deletes the objects of lab name in the namespace, found by
// its label, printing each as kubectl delete does, and waits until they
// are gone when wait is set.
func (o *options) deleteLab(ctx context.Context, w io.Writer, name string, wait bool, timeout time.Duration) error {
	deleted := map[types.UID]string{}
	for _, k := range labKinds {
		objs, err := o.labObjects(ctx, name, k.list())
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := o.client.Delete(ctx, obj); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return err
			}
			printDeleted(w, k.name, obj.GetName(), o.namespace)
			deleted[obj.GetUID()] = k.name + "/" + obj.GetName()
		}
	}
	if len(deleted) == 0 {
		fmt.Fprintf(o.stderr, "No resources found in %s namespace.\n", o.namespace)
		return nil
	}
	if !wait {
		return nil
	}
	return o.waitGone(ctx, name, deleted, timeout)
}

// labObjects lists the objects of lab name in the namespace into list.
func (o *options) labObjects(ctx context.Context, name string, list client.ObjectList) ([]client.Object, error) {
	if err := o.client.List(ctx, list, client.InNamespace(o.namespace), client.MatchingLabels{clabfile.LabLabel: name}); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	objs := make([]client.Object, 0, len(items))
	for _, it := range items {
		objs = append(objs, it.(client.Object))
	}
	return objs, nil
}

// waitGone waits until none of the deleted objects (by uid) is left.
func (o *options) waitGone(ctx context.Context, name string, deleted map[types.UID]string, timeout time.Duration) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		for _, k := range labKinds {
			objs, err := o.labObjects(ctx, name, k.list())
			if err != nil {
				return false, err
			}
			for _, obj := range objs {
				if ref, ok := deleted[obj.GetUID()]; ok {
					left = append(left, ref)
				}
			}
		}
		return len(left) == 0, nil
	})
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %v waiting for lab %s's objects to go; still there: %s", timeout, name, strings.Join(left, ", "))
	}
	return err
}

// waitLab waits until every node of lab has its pod Ready and its
// Topology converged at its generation, saying on stderr what it waits
// for whenever that changes.
func (o *options) waitLab(ctx context.Context, w io.Writer, lab *clabfile.Lab, timeout time.Duration) error {
	start := time.Now()
	pending, said := "", ""
	// The requests are not cut by the timeout: a wait that ends says so,
	// with what it waited for.
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		now, err := o.labPending(ctx, lab)
		if err != nil {
			return false, err
		}
		if pending = now; pending != said && pending != "" {
			fmt.Fprintf(o.stderr, "waiting for %s\n", pending)
			said = pending
		}
		return pending == "", nil
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("interrupted while waiting for lab %s, which is applied: %s", lab.Name, or(pending, "nothing left to wait for"))
	case err != nil && wait.Interrupted(err):
		return fmt.Errorf("timed out after %v waiting for lab %s: %s", timeout, lab.Name, pending)
	case err != nil:
		return err
	}
	fmt.Fprintf(w, "lab %s ready in %v: %d pods Ready, %d Topologies converged\n",
		lab.Name, time.Since(start).Round(100*time.Millisecond), len(lab.Nodes), len(lab.Nodes))
	return nil
}

// labPending says what the nodes of lab whose pod is not Ready or whose
// Topology has not converged wait for, the nodes that wait for the same
// named together: "pods host1, host2: not scheduled; Topologies ...";
// "" when none waits.
func (o *options) labPending(ctx context.Context, lab *clabfile.Lab) (string, error) {
	sel := []client.ListOption{client.InNamespace(o.namespace), client.MatchingLabels{clabfile.LabLabel: lab.Name}}
	var pods corev1.PodList
	if err := o.client.List(ctx, &pods, sel...); err != nil {
		return "", err
	}
	var topos v1beta1.TopologyList
	if err := o.client.List(ctx, &topos, sel...); err != nil {
		return "", err
	}
	podOf := map[string]*corev1.Pod{}
	for i := range pods.Items {
		podOf[pods.Items[i].Name] = &pods.Items[i]
	}
	topoOf := map[string]*v1beta1.Topology{}
	for i := range topos.Items {
		topoOf[topos.Items[i].Name] = &topos.Items[i]
	}
	var groups []string // "pod\x00why", in the order first seen
	names := map[string][]string{}
	add := func(kind, name, why string) {
		if why == "" {
			return
		}
		key := kind + "\x00" + why
		if names[key] == nil {
			groups = append(groups, key)
		}
		names[key] = append(names[key], name)
	}
	for _, n := range lab.Nodes {
		add("pod", n, podPending(podOf[n]))
	}
	for _, n := range lab.Nodes {
		add("Topology", n, topologyPending(topoOf[n]))
	}
	var parts []string
	for _, key := range groups {
		kind, why, _ := strings.Cut(key, "\x00")
		if len(names[key]) > 1 {
			kind = map[string]string{"pod": "pods", "Topology": "Topologies"}[kind]
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", kind, strings.Join(names[key], ", "), why))
	}
	return strings.Join(parts, "; "), nil
}

// podPending says why p is not Ready: a container's waiting reason
// (ErrImagePull, PostStartHookError ...) or the pod's phase; "" when it
// is.
func podPending(p *corev1.Pod) string {
	switch {
	case p == nil:
		return "not found"
	case p.DeletionTimestamp != nil:
		return "being deleted"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason != "" {
			return strings.TrimSuffix(c.State.Waiting.Reason+": "+firstLine(c.State.Waiting.Message), ": ")
		}
	}
	if p.Spec.NodeName == "" {
		return "not scheduled"
	}
	return "not Ready, " + or(string(p.Status.Phase), "no phase yet")
}

// topologyPending says why t has not converged at its generation; "" when
// it has.
func topologyPending(t *v1beta1.Topology) string {
	if t == nil {
		return "not found"
	}
	ready := t.ReadyCondition(t.Generation)
	switch {
	case ready == nil:
		return fmt.Sprintf("no status for generation %d yet (is meshnet-controller running?)", t.Generation)
	case ready.Status != "True":
		return fmt.Sprintf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	}
	return ""
}

// warnExecFailed warns, as kubectl warns, of each exec command of the lab's
// nodes that failed, as containerlab logs them: the hooks that ran them
// wrote each failure to their container's log, and they have all run once
// the pods are Ready (a container is not running before its postStart hook
// ends).
func (o *options) warnExecFailed(ctx context.Context, lab *clabfile.Lab) error {
	var pods corev1.PodList
	if err := o.client.List(ctx, &pods, client.InNamespace(o.namespace), client.MatchingLabels{clabfile.LabLabel: lab.Name}); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(o.rest)
	if err != nil {
		return fmt.Errorf("client for %s: %w", o.rest.Host, err)
	}
	for _, p := range pods.Items {
		if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Lifecycle == nil {
			continue // no exec
		}
		log, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: p.Spec.Containers[0].Name}).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(o.stderr, "Warning: pod %s: its log, which says which exec commands failed, cannot be read: %v\n", p.Name, err)
			continue
		}
		for _, line := range strings.Split(string(log), "\n") {
			if i := strings.Index(line, clabfile.ExecFailed); i >= 0 {
				fmt.Fprintf(o.stderr, "Warning: %s\n", strings.TrimRight(line[i:], "\r"))
			}
		}
	}
	return nil
}
