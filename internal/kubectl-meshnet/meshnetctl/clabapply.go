package meshnetctl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
)

// step is what apply does with one object, as its dry run found it.
type step struct {
	// live is the object before, nil when there is none.
	live *unstructured.Unstructured
	// recreate: the pod is deleted first (--recreate-pods).
	recreate bool
}

// applyLab applies objs, the objects of lab, in their order (ConfigMaps,
// Topologies, Pods), and prints one line per object as kubectl does. All
// of them are first applied as a server dry run: a refusal of any applies
// none.
func (o *options) applyLab(ctx context.Context, w io.Writer, lab *clabfile.Lab, objs clabfile.Objects, a clabApply) error {
	desired, err := unstructuredObjects(objs)
	if err != nil {
		return err
	}
	steps, err := o.planApply(ctx, lab.Name, desired, a)
	if err != nil {
		return err
	}
	for i, u := range desired {
		live := steps[i].live
		if steps[i].recreate {
			if err := o.deleteAndWait(ctx, w, live, a.timeout); err != nil {
				return err
			}
			live = nil
		}
		after := u.DeepCopy()
		if err := o.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(after), a.applyOptions()...); err != nil {
			return fmt.Errorf("%s: %w", ref(u), err)
		}
		result := "serverside-applied"
		if !changed(live, after) {
			result = "unchanged"
		}
		fmt.Fprintf(w, "%s %s\n", ref(u), result)
	}
	if a.wait {
		if err := o.waitLab(ctx, w, lab, a.timeout); err != nil {
			return err
		}
		return o.warnExecFailed(ctx, lab)
	}
	return nil
}

// applyOptions are the options of each apply: the field manager, and
// --force-conflicts.
func (a clabApply) applyOptions() []client.ApplyOption {
	opts := []client.ApplyOption{client.FieldOwner(fieldManager)}
	if a.force {
		opts = append(opts, client.ForceOwnership)
	}
	return opts
}

// planApply reads each object as it is and applies it as a server dry
// run, collecting every refusal: nothing is applied unless all pass. An
// error that is not about one object (the namespace missing, no right
// to apply) ends it at once.
func (o *options) planApply(ctx context.Context, labName string, desired []*unstructured.Unstructured, a clabApply) ([]step, error) {
	steps := make([]step, len(desired))
	var refused []string
	// When apply changed each ConfigMap last, this one included.
	configMapChanged := map[string]time.Time{}
	for i, u := range desired {
		live, err := o.live(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; nothing applied", ref(u), err)
		}
		steps[i].live = live
		if why := notTheLabs(live, labName); why != "" {
			refused = append(refused, ref(u)+": "+why)
			continue
		}
		dry := u.DeepCopy()
		err = o.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(dry), append(a.applyOptions(), client.DryRunAll)...)
		switch {
		case err == nil:
			if u.GetKind() == "ConfigMap" {
				configMapChanged[u.GetName()] = appliedAt(dry)
			}
		case podSpecImmutable(u, err) && a.recreate:
			steps[i].recreate = true
		case podSpecImmutable(u, err):
			refused = append(refused, fmt.Sprintf("%s: the file changes its spec, which cannot change once the pod exists: delete it first (kubectl delete pod %s -n %s), or apply with --recreate-pods\n    (%s)",
				ref(u), u.GetName(), u.GetNamespace(), firstLine(err.Error())))
		case apierrors.IsConflict(err):
			refused = append(refused, fmt.Sprintf("%s: %s\n    (the file sets these fields too: --force-conflicts takes them over, as with kubectl apply --server-side)", ref(u), err))
		case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
			refused = append(refused, ref(u)+": "+err.Error())
		default:
			return nil, fmt.Errorf("%s: %w; nothing applied", ref(u), err)
		}
	}
	if len(refused) > 0 {
		noun := "object"
		if len(refused) > 1 {
			noun = "objects"
		}
		return nil, fmt.Errorf("nothing applied to namespace %s: %d %s refused:\n  %s", desired[0].GetNamespace(), len(refused), noun, strings.Join(refused, "\n  "))
	}
	o.stalePods(desired, steps, configMapChanged, a.recreate)
	return steps, nil
}

// stalePods marks the pods that were created before apply last changed
// a ConfigMap they use to be re-created (recreate), or warns of them: a
// running pod keeps what it had, since a bind is mounted by subPath,
// which the kubelet never updates, and exec ran when the container
// started. The times are the API server's: the pod's creation, the
// ConfigMap's managedFields entry of apply (which this apply's dry run
// moved to now when it changes the ConfigMap), so that a pod stays stale
// at every apply until it is re-created.
func (o *options) stalePods(desired []*unstructured.Unstructured, steps []step, configMapChanged map[string]time.Time, recreate bool) {
	for i, u := range desired {
		if u.GetKind() != "Pod" || steps[i].live == nil || steps[i].recreate {
			continue
		}
		var pod corev1.Pod
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pod) != nil {
			continue
		}
		created := steps[i].live.GetCreationTimestamp().Time
		var newer []string
		for _, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil && configMapChanged[v.ConfigMap.Name].After(created) {
				newer = append(newer, "configmap/"+v.ConfigMap.Name)
			}
		}
		switch {
		case len(newer) == 0:
		case recreate:
			steps[i].recreate = true
		default:
			fmt.Fprintf(o.stderr, "Warning: %s was created before %s changed, and keeps the old content (a bind is mounted by subPath, exec ran at its start) until it is re-created: delete it and apply again, or apply with --recreate-pods\n",
				ref(u), strings.Join(newer, ", "))
		}
	}
}

// appliedAt is when apply (the field manager's Apply entry) last changed
// u; zero when it never did.
func appliedAt(u *unstructured.Unstructured) time.Time {
	for _, m := range u.GetManagedFields() {
		if m.Manager == fieldManager && m.Operation == metav1.ManagedFieldsOperationApply && m.Time != nil {
			return m.Time.Time
		}
	}
	return time.Time{}
}

// live reads the object u names as it is, nil when there is none.
func (o *options) live(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	if err := o.client.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return live, nil
}

// notTheLabs says why apply must not take over live: it is another lab's,
// or no lab's, or it is going; "" when it may.
func notTheLabs(live *unstructured.Unstructured, labName string) string {
	if live == nil {
		return ""
	}
	if live.GetDeletionTimestamp() != nil {
		return "it is being deleted; apply again once it is gone"
	}
	owner, ok := live.GetLabels()[clabfile.LabLabel]
	switch {
	case !ok:
		return fmt.Sprintf("it exists and is no lab's (no label %s): delete it, or apply the lab to another namespace", clabfile.LabLabel)
	case owner != labName:
		return fmt.Sprintf("it exists and is lab %s's (label %s=%s): delete that lab, or apply this one to another namespace", owner, clabfile.LabLabel, owner)
	}
	return ""
}

// podSpecImmutable: err is the API server's refusal to change the spec of
// the existing pod u.
func podSpecImmutable(u *unstructured.Unstructured, err error) bool {
	var status apierrors.APIStatus
	if u.GetKind() != "Pod" || !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(status.Status().Details.Causes, func(c metav1.StatusCause) bool {
		return c.Field == "spec" && c.Type == metav1.CauseTypeForbidden
	})
}

// deleteAndWait deletes live (the pod it was, not one made since) and
// waits until it is gone, for it to be created anew.
func (o *options) deleteAndWait(ctx context.Context, w io.Writer, live *unstructured.Unstructured, timeout time.Duration) error {
	uid := live.GetUID()
	err := o.client.Delete(ctx, live, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w", ref(live), err)
	}
	printDeleted(w, kindName(live.GetKind(), live.GroupVersionKind().Group), live.GetName(), live.GetNamespace())
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		now, err := o.live(ctx, live)
		return now == nil || now.GetUID() != uid, err
	})
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("%s was deleted and is still going after %v; apply again once it is gone", ref(live), timeout)
	}
	return err
}

// changed reports whether after, an object as applied, differs from live,
// as it was (nil when there was none), in more than its status and
// bookkeeping (resourceVersion, managedFields, generation): the status of
// a pod changes meanwhile.
func changed(live, after *unstructured.Unstructured) bool {
	if live == nil {
		return true
	}
	return !equality.Semantic.DeepEqual(content(live), content(after))
}

func content(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy().Object
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
		delete(md, "managedFields")
		delete(md, "generation")
	}
	return c
}

// unstructuredObjects are objs as --print prints them, in that order:
// apply sends exactly the manifests --print shows.
func unstructuredObjects(objs clabfile.Objects) ([]*unstructured.Unstructured, error) {
	var buf bytes.Buffer
	if err := objs.WriteYAML(&buf); err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(&buf))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the lab's manifests: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("read the lab's manifests: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("read the lab's manifests: %w", err)
		}
		out = append(out, u)
	}
}

// ref names an object as kubectl prints it: pod/router1.
func ref(u *unstructured.Unstructured) string {
	return kindName(u.GetKind(), u.GroupVersionKind().Group) + "/" + u.GetName()
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
