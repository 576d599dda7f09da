//go:build cluster

package meshnetctl_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterClab runs kubectl meshnet clab against a real API server
// with the FRR lab of internal/kubectl-meshnet/clabfile/testdata: apply makes its 18
// objects, labelled; a second apply writes nothing and says so; a file
// that changes a pod's spec is refused naming the pod, applying nothing,
// and --recreate-pods replaces it; --wait waits for the status; delete
// removes the lab and nothing else, and deleting again succeeds.
func TestClusterClab(t *testing.T) {
	// As cmd/kubectl-meshnet does: the client logs nothing a user sees.
	ctrllog.SetLogger(logr.Discard())
	env := clustertest.Start(t)
	ctx := context.Background()
	kubeconfig := env.Kubeconfig(t)
	const ns = "lab"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// Objects of the namespace that are not the lab's.
	other := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-the-lab"}},
		&v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1", Labels: map[string]string{clabfile.LabLabel: "another"}}},
	}
	for _, obj := range other {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	applied, unchanged := appliedLines(t, "serverside-applied"), appliedLines(t, "unchanged")
	// The commands run as a user runs them, in the lab's directory.
	t.Chdir(copyLab(t))
	const file = "frr-ospf.clab.yml"
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		var out, errw bytes.Buffer
		code := meshnetctl.Main(append(args, "--kubeconfig", kubeconfig), &out, &errw)
		t.Logf("$ kubectl meshnet %s\n%s%s", strings.Join(args, " "), errw.String(), out.String())
		if code != wantCode {
			t.Fatalf("kubectl meshnet %v: exit %d, want %d\n%s%s", args, code, wantCode, out.String(), errw.String())
		}
		return out.String(), errw.String()
	}

	out, stderr := run(0, "clab", "apply", file, "-n", ns)
	if want := applied; out != want {
		t.Errorf("first apply printed\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(stderr, "Warning: topology.groups.routers.binds[1]: ") {
		t.Errorf("the ignored setting is not warned about:\n%s", stderr)
	}
	before := labVersions(t, env, "frr-ospf", 18)
	_, stderr = run(1, "clab", "apply", file, "-n", "nope")
	if !strings.Contains(stderr, `Error from server (NotFound): configmap/host1-exec: namespaces "nope" not found; nothing applied`) {
		t.Errorf("apply to a namespace that does not exist: stderr\n%s", stderr)
	}

	out, _ = run(0, "clab", "apply", file, "-n", ns)
	if want := unchanged; out != want {
		t.Errorf("second apply printed\n%s\nwant\n%s", out, want)
	}
	if after := labVersions(t, env, "frr-ospf", 18); !equalMaps(before, after) {
		t.Errorf("the second apply wrote objects: resourceVersions %v, then %v", before, after)
	}

	// A cable pulled (state, which the file does not set) stays pulled; a
	// field the file sets that another manager changed is a conflict,
	// which --force-conflicts takes over.
	patchTopology(t, env, ns, "router2", `[{"op":"add","path":"/spec/links/0/state","value":"down"}]`, "kubectl-meshnet")
	out, _ = run(0, "clab", "apply", file, "-n", ns)
	if !strings.Contains(out, "topology.networkop.co.uk/router2 unchanged\n") {
		t.Errorf("apply after a cable pull printed\n%s", out)
	}
	patchTopology(t, env, ns, "router2", `[{"op":"replace","path":"/spec/links/1/mtu","value":9000}]`, "kubectl-edit")
	_, stderr = run(1, "clab", "apply", file, "-n", ns)
	if !strings.Contains(stderr, `topology.networkop.co.uk/router2: Apply failed with 1 conflict: conflict with "kubectl-edit" using networkop.co.uk/v1beta1: .spec.links[uid=2].mtu`) ||
		!strings.Contains(stderr, "--force-conflicts takes them over") {
		t.Errorf("a conflict: stderr\n%s", stderr)
	}
	out, _ = run(0, "clab", "apply", file, "-n", ns, "--force-conflicts")
	if !strings.Contains(out, "topology.networkop.co.uk/router2 serverside-applied\n") || strings.Count(out, "serverside-applied") != 1 {
		t.Errorf("apply --force-conflicts printed\n%s", out)
	}
	var router2 v1beta1.Topology
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "router2"}, &router2); err != nil {
		t.Fatal(err)
	}
	if l := router2.Spec.Links; l[0].State == nil || *l[0].State != v1beta1.LinkDown || l[1].MTU == nil || *l[1].MTU != 1400 {
		t.Errorf("router2's links after --force-conflicts: %+v", l)
	}

	// A changed bind: its ConfigMap is applied, and its running pod, which
	// does not take it up, is warned about, at every apply until it is
	// re-created. (The API server's times are in seconds.)
	time.Sleep(time.Second)
	edit(t, filepath.Join("router3", "frr.conf"), "hostname router3\n", "hostname router3-edited\n")
	const stale = "Warning: pod/router3 was created before configmap/router3-etc-frr-frr-conf changed, and keeps the old content"
	out, stderr = run(0, "clab", "apply", file, "-n", ns)
	if !strings.Contains(out, "configmap/router3-etc-frr-frr-conf serverside-applied\n") || strings.Count(out, "serverside-applied") != 1 ||
		!strings.Contains(stderr, stale) {
		t.Errorf("apply of a changed bind printed\n%s%s", out, stderr)
	}
	out, stderr = run(0, "clab", "apply", file, "-n", ns)
	if strings.Contains(out, "serverside-applied") || !strings.Contains(stderr, stale) {
		t.Errorf("apply again after a changed bind printed\n%s%s", out, stderr)
	}
	before = labVersions(t, env, "frr-ospf", 18)

	// router1 gets an environment variable (its spec changes), router2's
	// frr.conf changes (its ConfigMap).
	edit(t, file, "    router1:\n      group: routers\n", "    router1:\n      group: routers\n      env:\n        OSPF_AREA: \"0\"\n")
	edit(t, filepath.Join("router2", "frr.conf"), "hostname router2\n", "hostname router2-edited\n")
	_, stderr = run(1, "clab", "apply", file, "-n", ns)
	if !strings.Contains(stderr, "error: nothing applied to namespace lab: 1 object refused:\n  pod/router1: the file changes its spec") ||
		!strings.Contains(stderr, "--recreate-pods") {
		t.Errorf("a changed pod spec: stderr\n%s", stderr)
	}
	if after := labVersions(t, env, "frr-ospf", 18); !equalMaps(before, after) {
		t.Errorf("a refused apply wrote objects: resourceVersions %v, then %v", before, after)
	}
	out, _ = run(0, "clab", "apply", file, "-n", ns, "--recreate-pods")
	for _, line := range []string{
		"configmap/router2-etc-frr-frr-conf serverside-applied\n",
		"configmap/router1-etc-frr-frr-conf unchanged\n",
		"pod \"router1\" deleted from lab namespace\npod/router1 serverside-applied\n",
		"pod \"router2\" deleted from lab namespace\npod/router2 serverside-applied\n",
		"pod \"router3\" deleted from lab namespace\npod/router3 serverside-applied\n",
		"pod/host1 unchanged\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("apply --recreate-pods does not print %q:\n%s", line, out)
		}
	}

	// --wait: the status as the kubelet and meshnet-controller write it.
	_, stderr = run(1, "clab", "apply", file, "-n", ns, "--wait", "--timeout", "2s")
	if !strings.Contains(stderr, "error: timed out after 2s waiting for lab frr-ospf: pods host1, host2, router1, router2, router3: not scheduled; "+
		"Topologies host1, host2, router1, router3: no status for generation 1 yet (is meshnet-controller running?); "+
		"Topology router2: no status for generation 4 yet (is meshnet-controller running?)\n") {
		t.Errorf("apply --wait that times out: stderr\n%s", stderr)
	}
	markReady(t, env, ns)
	out, _ = run(0, "clab", "apply", file, "-n", ns, "--wait")
	if !strings.Contains(out, "lab frr-ospf ready in ") {
		t.Errorf("apply --wait on a ready lab printed\n%s", out)
	}

	out, _ = run(0, "clab", "delete", file, "-n", ns)
	if n := strings.Count(out, " deleted from lab namespace\n"); n != 18 || !strings.HasPrefix(out, "pod \"host1\" deleted") {
		t.Errorf("delete printed %d deletions, want 18, pods first:\n%s", n, out)
	}
	labVersions(t, env, "frr-ospf", 0)
	for _, obj := range other {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("delete removed what is not the lab's: %v", err)
		}
	}
	out, stderr = run(0, "clab", "delete", file, "-n", ns)
	if out != "" || stderr != "No resources found in lab namespace.\n" {
		t.Errorf("deleting again: %q, %q", out, stderr)
	}

	// A node named like another lab's object is not taken over.
	if err := os.CopyFS("r1", os.DirFS("router1")); err != nil {
		t.Fatal(err)
	}
	edit(t, file, "    router2:\n", "    r1:\n      group: routers\n    router2:\n")
	_, stderr = run(1, "clab", "apply", file, "-n", ns)
	if !strings.Contains(stderr, "topology.networkop.co.uk/r1: it exists and is lab another's (label containerlab=another)") {
		t.Errorf("another lab's object: stderr\n%s", stderr)
	}
	labVersions(t, env, "frr-ospf", 0)
}

// patchTopology changes the Topology name with a JSON patch, as the
// field manager owner.
func patchTopology(t *testing.T, env *clustertest.Env, ns, name, patch, owner string) {
	t.Helper()
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Patch(context.Background(), topo, client.RawPatch(types.JSONPatchType, []byte(patch)), client.FieldOwner(owner)); err != nil {
		t.Fatal(err)
	}
}

// appliedLines are the lines apply prints for the FRR lab, each object
// with result, in the order of objects.yaml.
func appliedLines(t *testing.T, result string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "clabfile", "testdata", "frr-ospf.objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	kind := ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case line == "kind: ConfigMap":
			kind = "configmap"
		case line == "kind: Topology":
			kind = "topology.networkop.co.uk"
		case line == "kind: Pod":
			kind = "pod"
		case strings.HasPrefix(line, "  name: ") && kind != "":
			b.WriteString(kind + "/" + strings.TrimPrefix(line, "  name: ") + " " + result + "\n")
			kind = ""
		}
	}
	return b.String()
}

// labVersions are the resourceVersions of lab's objects by kind and
// name, of which there must be n.
func labVersions(t *testing.T, env *clustertest.Env, lab string, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{clabfile.LabLabel: lab}
	got := map[string]string{}
	var cms corev1.ConfigMapList
	var topos v1beta1.TopologyList
	var pods corev1.PodList
	for _, l := range []client.ObjectList{&cms, &topos, &pods} {
		if err := env.Client.List(ctx, l, sel); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cms.Items {
		got["configmap/"+c.Name] = c.ResourceVersion
	}
	for _, tp := range topos.Items {
		got["topology/"+tp.Name] = tp.ResourceVersion
	}
	for _, p := range pods.Items {
		got["pod/"+p.Name] = p.ResourceVersion
	}
	if len(got) != n {
		t.Fatalf("lab %s has %d objects, want %d: %v", lab, len(got), n, got)
	}
	return got
}

// markReady writes the status of every pod and Topology of the namespace
// as Ready, as the kubelet and meshnet-controller would.
func markReady(t *testing.T, env *clustertest.Env, ns string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var topos v1beta1.TopologyList
	if err := env.Client.List(ctx, &topos, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range topos.Items {
		tp := &topos.Items[i]
		tp.Status.ObservedGeneration = tp.Generation
		tp.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonConverged,
			Message: "as specified", ObservedGeneration: tp.Generation, LastTransitionTime: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
}

// copyLab copies the FRR lab into a directory of the test's, to edit.
func copyLab(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "..", "examples", "frr-ospf")
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestClusterContainerlabNodeNames: a containerlab node's name that is not
// a pod name (PC1) is taken wherever a command takes a pod, as the pod the
// converter named for it (pc1), found by its label; a name of no node, or
// of nodes of two labs, is refused, naming what to do.
func TestClusterContainerlabNodeNames(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	env := clustertest.Start(t)
	ctx := context.Background()
	kubeconfig := env.Kubeconfig(t)
	const ns = "caps"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, topo := range []*v1beta1.Topology{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pc1", Labels: map[string]string{clabfile.LabLabel: "a", clabfile.NodeLabel: "PC1"}},
			Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{{UID: 1, PeerPod: "spine-1", LocalIntf: "eth1", PeerIntf: "eth1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spine-1", Labels: map[string]string{clabfile.LabLabel: "a", clabfile.NodeLabel: "Spine_1"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spine-1-b", Labels: map[string]string{clabfile.LabLabel: "b", clabfile.NodeLabel: "Spine_1"}}},
	} {
		if err := env.Client.Create(ctx, topo); err != nil {
			t.Fatal(err)
		}
	}
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		var out, errw bytes.Buffer
		code := meshnetctl.Main(append(args, "-n", ns, "--kubeconfig", kubeconfig), &out, &errw)
		t.Logf("$ kubectl meshnet %s\n%s%s", strings.Join(args, " "), errw.String(), out.String())
		if code != wantCode {
			t.Fatalf("kubectl meshnet %v: exit %d, want %d", args, code, wantCode)
		}
		return out.String(), errw.String()
	}
	if out, _ := run(0, "links", "PC1"); !strings.Contains(out, "pc1   eth1") || !strings.Contains(out, "spine-1:eth1") {
		t.Errorf("links PC1 does not list pc1's link:\n%s", out)
	}
	if _, stderr := run(1, "links", "PC_9"); !strings.Contains(stderr, `pod "PC_9": not a pod name, and no containerlab node of that name in namespace caps`) {
		t.Errorf("links PC_9: %s", stderr)
	}
	if _, stderr := run(1, "links", "Spine_1"); !strings.Contains(stderr, "containerlab node Spine_1 of several labs in namespace caps: spine-1 (lab a), spine-1-b (lab b); name the pod") {
		t.Errorf("links Spine_1: %s", stderr)
	}
}
