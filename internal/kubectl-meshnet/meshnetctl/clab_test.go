package meshnetctl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
)

var (
	frrLab     = filepath.Join("..", "..", "..", "examples", "frr-ospf", "frr-ospf.clab.yml")
	frrObjects = filepath.Join("..", "clabfile", "testdata", "frr-ospf.objects.yaml")
	refusedLab = filepath.Join("..", "clabfile", "testdata", "refused", "refused.clab.yml")
)

// TestClabPrint: --print prints the converter's manifests, the namespace
// only with -n, and warns of each ignored setting; it reads no kubeconfig.
func TestClabPrint(t *testing.T) {
	want, err := os.ReadFile(frrObjects)
	if err != nil {
		t.Fatal(err)
	}
	noKubeconfig := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "lab"}, string(want)},
		{nil, strings.ReplaceAll(string(want), "  namespace: lab\n", "")},
	} {
		var out, errw bytes.Buffer
		args := append([]string{"clab", "apply", frrLab, "--print", "--kubeconfig", noKubeconfig}, tc.args...)
		if code := Main(args, &out, &errw); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errw.String())
		}
		if out.String() != tc.want {
			t.Errorf("%v printed\n%s\nwant\n%s", args, out.String(), tc.want)
		}
		wantErr := "Warning: topology.groups.routers.binds[1]: \"__clabNodeName__/frr.conf:/etc/frr/frr.conf\": containerlab mounts it writable; " +
			"here it comes from a ConfigMap, which a pod sees read-only: writing to it fails (and would not change the lab's file anyway)\n"
		if errw.String() != wantErr {
			t.Errorf("%v warned\n%s\nwant\n%s", args, errw.String(), wantErr)
		}
	}
}

// failingClient is a client that fails the test at any call.
func failingClient(t *testing.T) client.WithWatch {
	fail := func(what string) error {
		t.Errorf("the command called the API server (%s)", what)
		return nil
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme()).Build(), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return fail("get")
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return fail("list")
		},
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return fail("apply")
		},
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return fail("create")
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return fail("patch")
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return fail("delete")
		},
	})
}

// TestClabParseErrors: a file that does not convert is refused with every
// problem the converter found, one a line, and nothing reaches the API
// server.
func TestClabParseErrors(t *testing.T) {
	data, err := os.ReadFile(refusedLab)
	if err != nil {
		t.Fatal(err)
	}
	_, perr := clabfile.Parse(data, os.DirFS(filepath.Dir(refusedLab)), nil)
	if perr == nil {
		t.Fatal("testdata/refused converts")
	}
	problems := strings.Split(perr.Error(), "\n")
	for _, args := range [][]string{{"apply", refusedLab}, {"apply", refusedLab, "--wait", "--recreate-pods"}} {
		var out, errw bytes.Buffer
		o := &options{client: failingClient(t), namespace: "lab", stderr: &errw,
			rules: clientcmd.NewDefaultClientConfigLoadingRules(), overrides: &clientcmd.ConfigOverrides{}}
		cmd := newClabCommand(o)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&errw)
		err := cmd.ExecuteContext(context.Background())
		if err == nil {
			t.Fatalf("%v: no error", args)
		}
		want := refusedLab + ": 7 problems, nothing applied:\n  " + strings.Join(problems, "\n  ")
		if len(problems) != 7 || err.Error() != want {
			t.Errorf("%v: error\n%s\nwant\n%s", args, err, want)
		}
		if out.Len() != 0 {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
}

// TestClabArgs: missing, extra and conflicting arguments and flags are
// named.
func TestClabArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"clab", "frob"}, `unknown command "frob" for "kubectl meshnet clab" (its commands: apply, delete)`},
		{[]string{"clab", "apply"}, "LAB.clab.yml is required: see 'kubectl meshnet clab apply --help'"},
		{[]string{"clab", "delete", "a.clab.yml", "b.clab.yml"}, `unexpected argument "b.clab.yml": kubectl meshnet clab delete takes LAB.clab.yml`},
		{[]string{"clab", "apply", frrLab, "--print", "--wait"}, "--wait: --print applies nothing (it prints the manifests), so it cannot be combined with --wait"},
		{[]string{"clab", "apply", frrLab, "--print", "--force-conflicts"}, "--force-conflicts: --print applies nothing (it prints the manifests), so it cannot be combined with --force-conflicts"},
		{[]string{"clab", "apply", frrLab, "--timeout", "1m"}, "--timeout: bounds --wait and --recreate-pods; give one of them"},
		{[]string{"clab", "apply", frrLab, "--wait", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"clab", "apply", frrLab, "--wait", "--timeout", "soon"}, `invalid argument "soon" for "--timeout" flag: time: invalid duration "soon"`},
		{[]string{"clab", "delete", frrLab, "--wait=false", "--timeout", "1m"}, "--timeout: bounds --wait, which --wait=false turns off"},
		{[]string{"clab", "apply", "nope.clab.yml", "--print"}, "open nope.clab.yml: no such file or directory"},
		{[]string{"clab", "apply", frrLab, "--print", "-n", "Lab"}, `namespace "Lab": a lowercase RFC 1123 label must consist of`},
	} {
		var out, errw bytes.Buffer
		code := Main(tc.args, &out, &errw)
		lines := strings.Split(strings.TrimSpace(errw.String()), "\n")
		if got := lines[len(lines)-1]; code != 1 || !strings.HasPrefix(got, "error: "+tc.want) {
			t.Errorf("%v: exit %d, %q; want 1 and %q", tc.args, code, errw.String(), "error: "+tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v printed %q", tc.args, out.String())
		}
	}
}

// labObject is an object of lab (none for ""), named name.
func labObject[T client.Object](obj T, name, lab string) T {
	obj.SetNamespace("lab")
	obj.SetName(name)
	if lab != "" {
		obj.SetLabels(map[string]string{clabfile.LabLabel: lab})
	}
	return obj
}

// TestClabDelete: delete removes the lab's objects by its label, pods
// first, and nothing else; again it finds nothing and succeeds. A file
// that no longer converts still names its lab.
func TestClabDelete(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(
		labObject(&corev1.ConfigMap{}, "r1-etc-frr-daemons", "frr-ospf"),
		labObject(&v1beta1.Topology{}, "r1", "frr-ospf"),
		labObject(&corev1.Pod{}, "r1", "frr-ospf"),
		labObject(&corev1.Pod{}, "r2", "another"),
		labObject(&corev1.ConfigMap{}, "mine", ""),
	).Build()
	// The file has lost a bound file since it was applied.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lab.clab.yml"), []byte("name: frr-ospf\ntopology:\n  nodes:\n    r1:\n      kind: linux\n      binds: [gone.conf:/etc/gone.conf]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lab.clab.yml")
	var out, errw bytes.Buffer
	o := &options{client: c, namespace: "lab", stderr: &errw}
	cmd := newClabCommand(o)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"delete", file})
	cmd.SetOut(&out)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `pod "r1" deleted from lab namespace
topology.networkop.co.uk "r1" deleted from lab namespace
configmap "r1-etc-frr-daemons" deleted from lab namespace
`
	if out.String() != want {
		t.Errorf("delete printed\n%s\nwant\n%s", out.String(), want)
	}
	if !strings.HasPrefix(errw.String(), "Warning: "+file+" does not convert (kubectl meshnet clab apply --print says why); deleting lab frr-ospf by its name\n") {
		t.Errorf("delete warned %q", errw.String())
	}
	for _, obj := range []client.Object{labObject(&corev1.Pod{}, "r2", ""), labObject(&corev1.ConfigMap{}, "mine", "")} {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("delete removed what is not the lab's: %v", err)
		}
	}
	out.Reset()
	errw.Reset()
	cmd.SetArgs([]string{"delete", frrLab})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out.String() != "" || errw.String() != "No resources found in lab namespace.\n" {
		t.Errorf("deleting again: %q, %q", out.String(), errw.String())
	}
}

// TestLabPending: what --wait says it waits for, nodes that wait for the
// same named together.
func TestLabPending(t *testing.T) {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	converged := func(gen int64) v1beta1.TopologyStatus {
		return v1beta1.TopologyStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen}}}
	}
	pod := func(name string, spec corev1.PodSpec, status corev1.PodStatus) *corev1.Pod {
		p := labObject(&corev1.Pod{}, name, "lab1")
		p.Spec, p.Status = spec, status
		return p
	}
	topo := func(name string, status v1beta1.TopologyStatus) *v1beta1.Topology {
		tp := labObject(&v1beta1.Topology{}, name, "lab1")
		tp.Generation, tp.Status = 2, status
		return tp
	}
	pulling := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull access denied\nmore"}}}}}
	failing := v1beta1.TopologyStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1beta1.ReasonLinksPending, Message: "1 of 2 links wired", ObservedGeneration: 2}}}
	c := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(
		pod("a", corev1.PodSpec{NodeName: "n1"}, corev1.PodStatus{Conditions: ready}), topo("a", converged(2)),
		pod("b", corev1.PodSpec{}, corev1.PodStatus{}), topo("b", converged(1)),
		pod("c", corev1.PodSpec{}, corev1.PodStatus{}), topo("c", failing),
		pod("d", corev1.PodSpec{NodeName: "n1"}, pulling),
	).Build()
	o := &options{client: c, namespace: "lab"}
	got, err := o.labPending(context.Background(), &clabfile.Lab{Name: "lab1", Nodes: []string{"a", "b", "c", "d"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "pods b, c: not scheduled; pod d: ErrImagePull: pull access denied; Topology b: no status for generation 2 yet (is meshnet-controller running?); " +
		"Topology c: Ready=False LinksPending: 1 of 2 links wired; Topology d: not found"
	if got != want {
		t.Errorf("labPending:\n got %q\nwant %q", got, want)
	}
}

// TestChanged: an apply that changed only the status and the bookkeeping
// changed nothing.
func TestChanged(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{
		"kind":     "Pod",
		"metadata": map[string]any{"name": "r1", "resourceVersion": "1", "labels": map[string]any{"a": "b"}},
		"status":   map[string]any{"phase": "Pending"},
	}}
	after := live.DeepCopy()
	after.SetResourceVersion("2")
	after.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: fieldManager}})
	after.Object["status"] = map[string]any{"phase": "Running"}
	if changed(live, after) {
		t.Error("a new status and resourceVersion count as a change")
	}
	after.SetLabels(map[string]string{"a": "c"})
	if !changed(live, after) || !changed(nil, after) {
		t.Error("a new label, or a new object, is no change")
	}
}

// TestNotTheLabs: apply takes over no object of another lab, of none, or
// being deleted.
func TestNotTheLabs(t *testing.T) {
	obj := func(labels map[string]string, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetLabels(labels)
		if deleting {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}
		return u
	}
	for _, tc := range []struct {
		live *unstructured.Unstructured
		want string
	}{
		{nil, ""},
		{obj(map[string]string{clabfile.LabLabel: "frr"}, false), ""},
		{obj(map[string]string{clabfile.LabLabel: "other"}, false), "it exists and is lab other's (label containerlab=other)"},
		{obj(nil, false), "it exists and is no lab's (no label containerlab)"},
		{obj(map[string]string{clabfile.LabLabel: "frr"}, true), "it is being deleted"},
	} {
		if got := notTheLabs(tc.live, "frr"); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("notTheLabs(%v) = %q, want it to start %q", tc.live, got, tc.want)
		}
	}
}
