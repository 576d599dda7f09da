//go:build cluster

package deploy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/auth"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// namespace is where meshnet runs.
const namespace = "meshnet"

// variants are the kustomizations a user applies, with the kubectl
// kustomize flags they need.
var variants = []struct {
	name, dir string
	flags     []string
}{
	{"base", ".", nil},
	{"kind", "overlays/kind", nil},
}

// TestClusterKustomizeRenders renders the base and the kind overlay with
// kubectl kustomize and checks what each workload needs to run.
func TestClusterKustomizeRenders(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			m := render(t, v.dir, v.flags...)

			for _, o := range m.objs {
				// The relay reads the API server's front-proxy settings,
				// which live in kube-system, as every aggregated API does.
				relayReader := o.GetKind() == "RoleBinding" && o.GetName() == "meshnet-controller:extension-apiserver-authentication-reader"
				if o.GetNamespace() != "" && o.GetNamespace() != namespace && (!relayReader || o.GetNamespace() != "kube-system") {
					t.Errorf("%s %s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
				}
			}
			var ns corev1.Namespace
			m.get(t, "Namespace", "", namespace, &ns)
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace %s: pod security %q, want privileged (meshnetd is privileged)", namespace, ns.Labels["pod-security.kubernetes.io/enforce"])
			}
			m.get(t, "CustomResourceDefinition", "", "topologies.networkop.co.uk", &unstructured.Unstructured{})

			ds := checkDaemonSet(t, m)
			checkDeployment(t, m, v.name)
			checkServices(t, m, ds)
			checkRBACRules(t, m)
			checkServiceAccountsBound(t, m)

			wantImage, wantPull := "ghcr.io/meshnet/meshnet:", corev1.PullPolicy("")
			if v.name == "kind" {
				wantImage, wantPull = "meshnet:dev", corev1.PullIfNotPresent
				if !slices.ContainsFunc(ds.Spec.Template.Spec.Tolerations, func(t corev1.Toleration) bool {
					return t.Key == "node-role.kubernetes.io/control-plane" && t.Operator == corev1.TolerationOpExists
				}) {
					t.Errorf("kind: meshnetd does not tolerate control-plane nodes: %+v", ds.Spec.Template.Spec.Tolerations)
				}
			}
			for _, c := range m.containers(t) {
				if !strings.HasPrefix(c.Image, wantImage) {
					t.Errorf("container %s: image %q, want %s...", c.Name, c.Image, wantImage)
				}
				if c.ImagePullPolicy != wantPull {
					t.Errorf("container %s: imagePullPolicy %q, want %q", c.Name, c.ImagePullPolicy, wantPull)
				}
			}
		})
	}
}

// hostMounts are the host directories meshnetd needs, by mount path.
var hostMounts = map[string]string{
	"/var/run/netns":   "/var/run/netns",
	"/run/netns":       "/run/netns",
	"/run/meshnet":     "/run/meshnet",
	"/var/lib/meshnet": "/var/lib/meshnet",
	"/etc/cni/net.d":   "/etc/cni/net.d",
	"/opt/cni/bin":     "/opt/cni/bin",
}

func checkDaemonSet(t *testing.T, m *manifests) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	m.get(t, "DaemonSet", namespace, "meshnetd", &ds)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || !spec.HostPID {
		t.Errorf("meshnetd: hostNetwork %v, hostPID %v; want both", spec.HostNetwork, spec.HostPID)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("meshnetd: dnsPolicy %q, want %q with hostNetwork", spec.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("meshnetd: %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("meshnetd: not privileged: %+v", c.SecurityContext)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		want, ok := hostMounts[vm.MountPath]
		if !ok {
			continue
		}
		mounted[vm.MountPath] = true
		hp := volumes[vm.Name].HostPath
		if hp == nil || hp.Path != want {
			t.Errorf("meshnetd: %s is not the host's %s: %+v", vm.MountPath, want, volumes[vm.Name])
		}
		if strings.HasSuffix(vm.MountPath, "/netns") &&
			(vm.MountPropagation == nil || *vm.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("meshnetd: %s: mount propagation %v, want HostToContainer (new sandboxes' netns must appear)", vm.MountPath, vm.MountPropagation)
		}
	}
	for p := range hostMounts {
		if !mounted[p] {
			t.Errorf("meshnetd: %s is not mounted", p)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != 51111 || ports["http"] != 51112 {
		t.Errorf("meshnetd: ports %v, want grpc 51111 and http 51112", ports)
	}
	args := flagValues(c.Args)
	if args["grpc-addr"] != ":51111" || args["http-addr"] != ":51112" {
		t.Errorf("meshnetd: --grpc-addr %q --http-addr %q do not serve the container ports %v", args["grpc-addr"], args["http-addr"], ports)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = e.ValueFrom.ResourceFieldRef.Resource
		}
	}
	// meshnetd's Go memory limit follows the container's (its --memory-limit).
	if env["MEMORY_LIMIT"] != "limits.memory" || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("meshnetd: MEMORY_LIMIT from %q with limit %v, want limits.memory, and a limit", env["MEMORY_LIMIT"], c.Resources.Limits.Memory())
	}
	if env["NODE_NAME"] != "spec.nodeName" || env["NODE_IP"] != "status.hostIP" {
		t.Errorf("meshnetd: downward API env %v, want NODE_NAME=spec.nodeName NODE_IP=status.hostIP", env)
	}
	checkMeshnetdProbes(t, c)
	checkResources(t, "meshnetd", c)
	if got := ds.Spec.Template.Labels; !labelsMatch(ds.Spec.Selector.MatchLabels, got) {
		t.Errorf("meshnetd: selector %v does not select its pods %v", ds.Spec.Selector.MatchLabels, got)
	}
	return &ds
}

func checkDeployment(t *testing.T, m *manifests, variant string) {
	t.Helper()
	var d appsv1.Deployment
	m.get(t, "Deployment", namespace, "meshnet-controller", &d)
	c := d.Spec.Template.Spec.Containers[0]
	args := flagValues(c.Args)
	if args["leader-elect"] != "true" {
		t.Errorf("controller: --leader-elect=%q, want true", args["leader-elect"])
	}
	if args["leader-election-namespace"] != namespace || args["daemon-namespace"] != namespace ||
		args["daemon-service"] != "meshnetd" || args["daemon-port"] != "grpc" {
		t.Errorf("controller: args %v do not name meshnetd's Service in %s and its port grpc", c.Args, namespace)
	}
	// Two replicas in the base for a fast failover; one on kind, where
	// leader election still keeps a rolling update from running two.
	want := int32(2)
	if variant == "kind" {
		want = 1
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
		t.Errorf("controller: replicas %v, want %d", d.Spec.Replicas, want)
	}
	probePort := portOf(t, c, "probes")
	if args["health-probe-bind-address"] != fmt.Sprintf(":%d", probePort) {
		t.Errorf("controller: --health-probe-bind-address %q, probes port %d", args["health-probe-bind-address"], probePort)
	}
	if metrics := portOf(t, c, "metrics"); args["metrics-bind-address"] != fmt.Sprintf(":%d", metrics) {
		t.Errorf("controller: --metrics-bind-address %q, metrics port %d", args["metrics-bind-address"], metrics)
	}
	checkProbes(t, "controller", c, "probes")
	checkResources(t, "controller", c)
	sc := d.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("controller: not runAsNonRoot: %+v", sc)
	}
}

func checkServices(t *testing.T, m *manifests, ds *appsv1.DaemonSet) {
	t.Helper()
	var svc corev1.Service
	m.get(t, "Service", namespace, "meshnetd", &svc)
	if !labelsMatch(svc.Spec.Selector, ds.Spec.Template.Labels) {
		t.Errorf("Service meshnetd: selector %v does not select the DaemonSet's pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	want := map[string]int32{"grpc": 51111, "http": 51112}
	for _, p := range svc.Spec.Ports {
		if want[p.Name] != p.Port || p.TargetPort != intstr.FromString(p.Name) {
			t.Errorf("Service meshnetd: port %+v", p)
		}
		delete(want, p.Name)
	}
	if len(want) > 0 {
		t.Errorf("Service meshnetd: ports %v missing", want)
	}

	var d appsv1.Deployment
	m.get(t, "Deployment", namespace, "meshnet-controller", &d)
	m.get(t, "Service", namespace, "meshnet-controller-metrics", &svc)
	if !labelsMatch(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("Service meshnet-controller-metrics: selector %v does not select the controller's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") {
		t.Errorf("Service meshnet-controller-metrics: ports %+v, want 8080 -> metrics", svc.Spec.Ports)
	}
}

func checkProbes(t *testing.T, name string, c corev1.Container, port string) {
	t.Helper()
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, p.kind)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString(port) {
			t.Errorf("%s: %s probe %s on port %s, want %s on %s", name, p.kind, g.Path, g.Port.String(), p.path, port)
		}
	}
}

// checkMeshnetdProbes: meshnetd's HTTP port serves TLS (--tls), so
// readiness is GET /readyz over HTTPS, and liveness a TCP connect, which
// holds while the port still waits for its first certificate.
func checkMeshnetdProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	if !slices.Contains(c.Args, "--tls") {
		t.Errorf("meshnetd: args %v, want --tls", c.Args)
	}
	if p := c.LivenessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port != intstr.FromString("http") {
		t.Errorf("meshnetd: liveness probe %+v, want a TCP connect to port http", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" ||
		p.HTTPGet.Port != intstr.FromString("http") || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("meshnetd: readiness probe %+v, want GET /readyz on http over HTTPS", p)
	}
}

func checkResources(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() {
			t.Errorf("%s: %s request %s limit %s, want both", name, r, req.String(), lim.String())
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above limit %s", name, r, req.String(), lim.String())
		}
	}
}

// checkRBACRules refuses wildcards anywhere in a rule.
func checkRBACRules(t *testing.T, m *manifests) {
	t.Helper()
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range m.all(kind) {
			var r rbacv1.ClusterRole // a Role's rules decode alike
			fromUnstructured(t, o, &r)
			if len(r.Rules) == 0 {
				t.Errorf("%s %s has no rules", kind, o.GetName())
			}
			for _, rule := range r.Rules {
				for _, s := range slices.Concat(rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs) {
					if strings.Contains(s, "*") {
						t.Errorf("%s %s: wildcard %q in rule %+v", kind, o.GetName(), s, rule)
					}
				}
			}
		}
	}
}

// checkServiceAccountsBound checks that every ServiceAccount, and every one
// a pod runs as, exists and is bound to a role the manifests define.
func checkServiceAccountsBound(t *testing.T, m *manifests) {
	t.Helper()
	// The API server's own roles that aggregated API servers are bound to.
	roles := map[string]bool{
		"ClusterRole/system:auth-delegator":                          true,
		"Role/kube-system/extension-apiserver-authentication-reader": true,
	}
	for _, o := range m.all("ClusterRole") {
		roles["ClusterRole/"+o.GetName()] = true
	}
	for _, o := range m.all("Role") {
		roles["Role/"+o.GetNamespace()+"/"+o.GetName()] = true
	}
	bound := map[string]bool{}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range m.all(kind) {
			var b rbacv1.RoleBinding
			fromUnstructured(t, o, &b)
			ref := b.RoleRef.Kind + "/" + b.RoleRef.Name
			if b.RoleRef.Kind == "Role" {
				ref = "Role/" + b.Namespace + "/" + b.RoleRef.Name
			}
			if !roles[ref] {
				t.Errorf("%s %s binds %s, which the manifests do not define", kind, b.Name, ref)
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind {
					bound[s.Namespace+"/"+s.Name] = true
				}
			}
		}
	}
	accounts := map[string]bool{}
	for _, o := range m.all("ServiceAccount") {
		accounts[o.GetNamespace()+"/"+o.GetName()] = true
		if !bound[o.GetNamespace()+"/"+o.GetName()] {
			t.Errorf("ServiceAccount %s/%s is not bound", o.GetNamespace(), o.GetName())
		}
	}
	for _, p := range m.podSpecs(t) {
		sa := namespace + "/" + p.ServiceAccountName
		if p.ServiceAccountName == "" || !accounts[sa] {
			t.Errorf("a pod runs as ServiceAccount %q, which the manifests do not define", p.ServiceAccountName)
		}
	}
}

// TestClusterServerSideDryRun applies each rendered variant to a real API
// server with a server-side dry run, which runs admission and validation
// (schemas, RBAC escalation checks) for every object without persisting it.
func TestClusterServerSideDryRun(t *testing.T) {
	env := clustertest.Start(t)
	kubeconfig := env.Kubeconfig(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			m := render(t, v.dir, v.flags...)
			// A dry-run CRD registers no type and a dry-run namespace holds
			// nothing, so those two are applied for real first.
			kubectl(t, kubeconfig, m.yaml(t, "CustomResourceDefinition", "Namespace"), "apply", "--server-side", "-f", "-")
			out := kubectl(t, kubeconfig, m.yaml(t), "apply", "--server-side", "--dry-run=server", "-f", "-")
			if n := strings.Count(out, "(server dry run)"); n != len(m.objs) {
				t.Errorf("dry run reported %d objects, want %d:\n%s", n, len(m.objs), out)
			}
			var ds appsv1.DaemonSet
			err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "meshnetd"}, &ds)
			if !apierrors.IsNotFound(err) {
				t.Errorf("after a dry run, DaemonSet meshnetd: %v, want not found", err)
			}
		})
	}
}

// TestClusterRBACLeastPrivilege applies the RBAC objects for real and asks
// the API server's authorizer what each ServiceAccount may do.
func TestClusterRBACLeastPrivilege(t *testing.T) {
	env := clustertest.Start(t)
	kubeconfig := env.Kubeconfig(t)
	m := render(t, ".")
	kubectl(t, kubeconfig, m.yaml(t, "Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Secret", "ConfigMap", "APIService"),
		"apply", "--server-side", "-f", "-")

	type access struct {
		verb, group, resource, sub, ns string
	}
	topo := func(verb, sub string) access { return access{verb, "networkop.co.uk", "topologies", sub, "lab"} }
	for _, c := range []struct {
		sa      string
		allowed []access
		denied  []access
	}{{
		sa: "meshnetd",
		allowed: []access{
			topo("patch", "status"), topo("get", ""), topo("list", ""), topo("watch", ""),
			{"create", "authentication.k8s.io", "tokenreviews", "", ""},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", ""},
			{"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""}, {"get", "", "pods", "", "lab"},
			{"get", "", "nodes", "", ""},
			{"list", "discovery.k8s.io", "endpointslices", "", namespace},
		},
		denied: []access{
			{"delete", "", "pods", "", "lab"}, {"create", "", "pods", "", "lab"},
			{"get", "", "secrets", "", namespace}, {"list", "", "secrets", "", ""},
			// Its status, never the user's spec.
			topo("patch", ""), topo("update", "status"), topo("delete", ""),
			{"list", "", "nodes", "", ""}, {"patch", "", "nodes", "", ""},
			{"list", "discovery.k8s.io", "endpointslices", "", "lab"},
		},
	}, {
		sa: "meshnet-controller",
		allowed: []access{
			topo("watch", ""), topo("patch", "status"),
			// meshnetd's check of ApplyPod's caller.
			topo("patch", ""),
			{"list", "", "pods", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", ""},
			{"update", "coordination.k8s.io", "leases", "", namespace},
			{"create", "events.k8s.io", "events", "", "lab"},
			// Leader election's Event on the Lease.
			{"create", "", "events", "", namespace},
		},
		denied: []access{
			{"create", "", "pods", "", "lab"}, {"delete", "", "pods", "", "lab"},
			{"get", "", "secrets", "", namespace},
			topo("delete", ""), topo("create", ""),
			{"update", "coordination.k8s.io", "leases", "", "kube-system"},
			{"create", "", "events", "", "lab"},
			{"list", "", "secrets", "", namespace}, {"create", "", "secrets", "", "lab"},
		},
	}, {
		sa: "meshnet-operator",
		allowed: []access{topo("patch", ""), topo("get", ""), topo("list", ""),
			// The same through the API server: meshnet's aggregated API.
			{"get", "meshnet.networkop.co.uk", "pods", "proxy", "lab"}, {"list", "meshnet.networkop.co.uk", "links", "", "lab"},
			{"watch", "meshnet.networkop.co.uk", "links", "", "lab"}},
		denied: []access{
			// The daemons' own check (PeerService): an operator cannot pose as one.
			topo("patch", "status"),
			topo("delete", ""), {"get", "", "pods", "", "lab"}, {"get", "", "secrets", "", namespace},
		},
	}} {
		user := "system:serviceaccount:" + namespace + ":" + c.sa
		check := func(a access, want bool) {
			sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &authzv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns,
				},
			}}
			if err := env.Client.Create(context.Background(), sar); err != nil {
				t.Fatalf("subject access review: %v", err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("%s: %s %s/%s/%s in %q: allowed %v, want %v (%s)", c.sa, a.verb, a.group, a.resource, a.sub, a.ns,
					sar.Status.Allowed, want, sar.Status.Reason)
			}
		}
		for _, a := range c.allowed {
			check(a, true)
		}
		for _, a := range c.denied {
			check(a, false)
		}
	}

	// Rights by name. The relay: its own Secret and APIService, and the
	// API server's front-proxy settings; no other Secret, APIService or
	// ConfigMap. meshnetd's CA: the controller keeps it and signs for
	// meshnet's signer alone; meshnetd asks and reads the CA certificate.
	for _, c := range []struct {
		sa, verb, group, resource, ns, name string
		want                                bool
	}{
		{"meshnet-controller", "get", "", "secrets", namespace, "meshnet-relay-tls", true},
		{"meshnet-controller", "update", "", "secrets", namespace, "meshnet-relay-tls", true},
		// A create could make a token Secret of another account: deploy/
		// makes the relay's Secret, empty.
		{"meshnet-controller", "create", "", "secrets", namespace, "", false},
		{"meshnet-controller", "get", "", "secrets", namespace, "meshnetd-token", false},
		{"meshnet-controller", "patch", "apiregistration.k8s.io", "apiservices", "", "v1alpha1.meshnet.networkop.co.uk", true},
		{"meshnet-controller", "patch", "apiregistration.k8s.io", "apiservices", "", "v1beta1.metrics.k8s.io", false},
		{"meshnet-controller", "create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
		{"meshnet-controller", "get", "", "configmaps", "kube-system", "extension-apiserver-authentication", true},
		{"meshnet-controller", "get", "", "configmaps", "kube-system", "kubeadm-config", false},
		{"meshnet-controller", "get", "", "secrets", namespace, "meshnet-ca", true},
		{"meshnet-controller", "update", "", "secrets", namespace, "meshnet-ca", true},
		{"meshnet-controller", "update", "", "configmaps", namespace, "meshnet-ca", true},
		{"meshnet-controller", "update", "", "configmaps", namespace, "kube-root-ca.crt", false},
		{"meshnet-controller", "approve", "certificates.k8s.io", "signers", "", "meshnet.networkop.co.uk/meshnetd", true},
		{"meshnet-controller", "sign", "certificates.k8s.io", "signers", "", "meshnet.networkop.co.uk/meshnetd", true},
		{"meshnet-controller", "sign", "certificates.k8s.io", "signers", "", "kubernetes.io/kubelet-serving", false},
		{"meshnet-controller", "approve", "certificates.k8s.io", "signers", "", "kubernetes.io/kube-apiserver-client", false},
		{"meshnetd", "create", "certificates.k8s.io", "certificatesigningrequests", "", "", true},
		{"meshnetd", "get", "", "configmaps", namespace, "meshnet-ca", true},
		{"meshnetd", "get", "", "configmaps", namespace, "kube-root-ca.crt", false},
		{"meshnetd", "get", "", "secrets", namespace, "meshnet-ca", false},
		{"meshnetd", "sign", "certificates.k8s.io", "signers", "", "meshnet.networkop.co.uk/meshnetd", false},
		{"meshnetd", "approve", "certificates.k8s.io", "signers", "", "meshnet.networkop.co.uk/meshnetd", false},
	} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + namespace + ":" + c.sa, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.ns, Name: c.name},
		}}
		if err := env.Client.Create(context.Background(), sar); err != nil {
			t.Fatalf("subject access review: %v", err)
		}
		if sar.Status.Allowed != c.want {
			t.Errorf("%s: %s %s/%s %q in %q: allowed %v, want %v (%s)", c.sa, c.verb, c.group, c.resource, c.name, c.ns,
				sar.Status.Allowed, c.want, sar.Status.Reason)
		}
	}

	// meshnetd tells the cluster's tokens from made-up ones with the
	// service-account issuer's keys, which the API server's default
	// binding (system:service-account-issuer-discovery) lets every
	// ServiceAccount read.
	for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + namespace + ":meshnetd", Groups: []string{"system:serviceaccounts", "system:authenticated"},
			NonResourceAttributes: &authzv1.NonResourceAttributes{Verb: "get", Path: path},
		}}
		if err := env.Client.Create(context.Background(), sar); err != nil {
			t.Fatalf("subject access review: %v", err)
		}
		if !sar.Status.Allowed {
			t.Errorf("meshnetd: get %s: refused (%s), want allowed", path, sar.Status.Reason)
		}
	}

	// Aggregation to edit and view is done by kube-controller-manager,
	// which envtest does not run: the labels are what can be checked.
	for name, label := range map[string]string{
		"meshnet-topology-edit": "rbac.authorization.k8s.io/aggregate-to-edit",
		"meshnet-topology-view": "rbac.authorization.k8s.io/aggregate-to-view",
	} {
		var r rbacv1.ClusterRole
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Labels[label] != "true" {
			t.Errorf("ClusterRole %s: labels %v, want %s=true", name, r.Labels, label)
		}
	}
}

// TestClusterControllerRunsAsItsServiceAccount runs meshnet-controller with
// the rendered Deployment's arguments and its ServiceAccount's token, so only
// the RBAC above: it must win the Lease, serve the probes the Deployment
// names, and never be refused by the API server.
func TestClusterControllerRunsAsItsServiceAccount(t *testing.T) {
	env := clustertest.Start(t)
	kubeconfig := env.Kubeconfig(t)
	m := render(t, ".")
	kubectl(t, kubeconfig, m.yaml(t, "Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Secret", "ConfigMap", "APIService"),
		"apply", "--server-side", "-f", "-")
	bin := build(t, "meshnet-controller")

	var d appsv1.Deployment
	m.get(t, "Deployment", namespace, "meshnet-controller", &d)
	c := d.Spec.Template.Spec.Containers[0]
	// The token file the manifest names only exists in a pod: point it at
	// a real token of the same ServiceAccount. The listen addresses move to
	// loopback ports that are free here; the flags parse last-wins.
	token := serviceAccountToken(t, env, d.Spec.Template.Spec.ServiceAccountName)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	probeAddr, metricsAddr, relayAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	args := append(slices.Clone(c.Args), "--token-file="+tokenFile,
		"--health-probe-bind-address="+probeAddr, "--metrics-bind-address="+metricsAddr, "--relay-bind-address="+relayAddr)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tokenKubeconfig(t, env, token))
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("meshnet-controller's log:\n%s", logs.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var lease coordinationv1.Lease
	waitFor(t, ctx, exited, &waitErr, "the controller holds the Lease", func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "meshnet-controller.networkop.co.uk"}, &lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		return nil
	})
	// /metrics is read as meshnetd's: a token for the audience meshnetd
	// whose user may get /metrics (meshnet-metrics-reader).
	metricsURL := "https://" + metricsAddr + "/metrics"
	scraper, stranger := metricsTokens(t, env)
	waitFor(t, ctx, exited, &waitErr, "/metrics answers 200 to a metrics reader", func() error { return getMetrics(metricsURL, scraper, http.StatusOK) })
	for _, c := range []struct {
		who, token string
		want       int
	}{{"without a token", "", http.StatusUnauthorized}, {"with the token of a user not allowed", stranger, http.StatusForbidden}} {
		if err := getMetrics(metricsURL, c.token, c.want); err != nil {
			t.Errorf("/metrics %s: %v", c.who, err)
		}
	}
	// The relay filled its Secret and had the APIService trust its CA.
	var sec corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "meshnet-relay-tls"}, &sec); err != nil {
		t.Fatal(err)
	}
	api := &unstructured.Unstructured{}
	api.SetAPIVersion("apiregistration.k8s.io/v1")
	api.SetKind("APIService")
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "v1alpha1.meshnet.networkop.co.uk"}, api); err != nil {
		t.Fatal(err)
	}
	bundle, _, _ := unstructured.NestedString(api.Object, "spec", "caBundle")
	if len(sec.Data["tls.crt"]) == 0 || bundle == "" || bundle != base64.StdEncoding.EncodeToString(sec.Data["ca.crt"]) {
		t.Errorf("relay: Secret meshnet-relay-tls holds %d bytes of certificate, APIService caBundle %d bytes; want the Secret filled and its ca.crt as the bundle",
			len(sec.Data["tls.crt"]), len(bundle))
	}
	// meshnetd's CA: the Secret filled, its certificate published.
	var caSec corev1.Secret
	var caMap corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "meshnet-ca"}, &caSec); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "meshnet-ca"}, &caMap); err != nil {
		t.Fatal(err)
	}
	if len(caSec.Data["tls.key"]) == 0 || caMap.Data["ca.crt"] == "" || caMap.Data["ca.crt"] != string(caSec.Data["ca.crt"]) {
		t.Errorf("meshnetd CA: Secret meshnet-ca holds %d bytes of key, ConfigMap meshnet-ca %d bytes of ca.crt; want the Secret filled and its ca.crt published",
			len(caSec.Data["tls.key"]), len(caMap.Data["ca.crt"]))
	}
	// Informers that were refused retry and log; give them a few seconds.
	time.Sleep(3 * time.Second)
	if out := logs.String(); strings.Contains(out, "forbidden") {
		t.Errorf("the API server refused meshnet-controller something:\n%s", out)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		url := "http://" + probeAddr + p.HTTPGet.Path
		waitFor(t, ctx, exited, &waitErr, "GET "+url+" answers 200", func() error { return get200(url) })
	}
}

// TestClusterManifestFlagsMatchBinaries checks that every flag a manifest
// passes is one its binary defines: an unknown flag stops the binary at
// start, which no render or dry run shows.
func TestClusterManifestFlagsMatchBinaries(t *testing.T) {
	m := render(t, ".")
	for _, w := range []struct{ kind, name string }{{"DaemonSet", "meshnetd"}, {"Deployment", "meshnet-controller"}} {
		var tmpl corev1.PodTemplateSpec
		o := m.find(w.kind, namespace, w.name)
		if o == nil {
			t.Fatalf("no %s %s", w.kind, w.name)
		}
		spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &tmpl); err != nil {
			t.Fatal(err)
		}
		c := tmpl.Spec.Containers[0]
		if len(c.Command) != 1 {
			t.Fatalf("%s: command %v, want one binary", w.name, c.Command)
		}
		binary := strings.TrimPrefix(c.Command[0], "/")
		defined := definedFlags(t, build(t, binary))
		flags := flagValues(c.Args)
		for f := range flags {
			if !defined[f] {
				t.Errorf("%s passes --%s, which %s does not define (it has %v)", w.name, f, binary, slices.Sorted(maps.Keys(defined)))
			}
		}
		checkTokenForMeshnetd(t, w.name, tmpl.Spec, flags["token-file"])
	}
}

// checkTokenForMeshnetd checks that the token a component sends to
// meshnetd (--token-file) is a projected service-account token for the
// audience meshnetd accepts, so that it is worth nothing to the API server.
func checkTokenForMeshnetd(t *testing.T, name string, spec corev1.PodSpec, file string) {
	t.Helper()
	c := spec.Containers[0]
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, file)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if sat := src.ServiceAccountToken; sat != nil && sat.Path == rel {
					if sat.Audience != auth.Audience {
						t.Errorf("%s: --token-file=%s is a token for audience %q, want %q", name, file, sat.Audience, auth.Audience)
					}
					return
				}
			}
		}
	}
	t.Errorf("%s: --token-file=%q is not a projected service-account token for audience %s", name, file, auth.Audience)
}

// TestClusterDockerfile checks the Dockerfile as text (no Docker engine
// here): a multi-stage build of static binaries whose final stage holds the
// three binaries at the paths the manifests run.
func TestClusterDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	froms := regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?`).FindAllStringSubmatch(text, -1)
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final stage", len(froms))
	}
	build, final := froms[0], froms[len(froms)-1]
	if build[1] != "golang:1.26" || build[2] == "" {
		t.Errorf("build stage %q, want a named golang:1.26 stage", build[0])
	}
	if final[1] != "scratch" && !strings.HasPrefix(final[1], "gcr.io/distroless/static") {
		t.Errorf("final stage %q, want scratch or distroless static", final[1])
	}
	// The builder must be at least the go directive of go.mod.
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if gover := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(mod)); gover == nil || gover[1] != "1.26" {
		t.Errorf("go.mod's go directive %v does not match the golang:1.26 builder", gover)
	}
	run := regexp.MustCompile(`(?ms)^RUN .*?go build.*?[^\\]$`).FindString(text)
	if run == "" {
		t.Fatal("no RUN ... go build")
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/meshnetd", "./cmd/meshnet-controller", "./cmd/meshnet-cni"} {
		if !strings.Contains(run, want) {
			t.Errorf("the go build step lacks %s:\n%s", want, run)
		}
	}
	finalStage := text[strings.LastIndex(text, final[0]):]
	copyFrom := regexp.MustCompile(`(?m)^COPY --from=`+regexp.QuoteMeta(build[2])+`\s+(.+)$`).FindAllStringSubmatch(finalStage, -1)
	copied := map[string]bool{}
	for _, c := range copyFrom {
		fields := strings.Fields(c[1])
		dest := fields[len(fields)-1]
		for _, src := range fields[:len(fields)-1] {
			copied[filepath.Join(dest, filepath.Base(src))] = true
		}
	}
	// The paths the manifests run: each workload's command, and the CNI
	// plugin meshnetd installs.
	m := render(t, ".")
	paths := []string{}
	for _, c := range m.containers(t) {
		paths = append(paths, c.Command...)
		if p, ok := flagValues(c.Args)["cni-plugin"]; ok {
			paths = append(paths, p)
		}
	}
	if len(paths) != 3 {
		t.Errorf("manifests run %v, want meshnetd, meshnet-controller and meshnet-cni", paths)
	}
	for _, p := range paths {
		if !copied[p] {
			t.Errorf("the final stage does not hold %s (it copies %v)", p, slices.Sorted(maps.Keys(copied)))
		}
	}

	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"!go.mod", "!go.sum", "!api/", "!cmd/", "!internal/"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf(".dockerignore does not let %s into the build context", strings.TrimPrefix(want, "!"))
		}
	}
}

// manifests are the objects of one rendering.
type manifests struct {
	objs []*unstructured.Unstructured
}

func render(t *testing.T, dir string, flags ...string) *manifests {
	t.Helper()
	out := kubectl(t, "", "", slices.Concat([]string{"kustomize"}, flags, []string{dir})...)
	m := &manifests{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var o unstructured.Unstructured
		err := dec.Decode(&o.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode kubectl kustomize %s: %v", dir, err)
		}
		if o.Object != nil {
			m.objs = append(m.objs, &o)
		}
	}
	if len(m.objs) == 0 {
		t.Fatalf("kubectl kustomize %s rendered nothing", dir)
	}
	return m
}

func (m *manifests) find(kind, ns, name string) *unstructured.Unstructured {
	for _, o := range m.objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (m *manifests) get(t *testing.T, kind, ns, name string, into any) {
	t.Helper()
	o := m.find(kind, ns, name)
	if o == nil {
		t.Fatalf("no %s %s/%s in the rendering", kind, ns, name)
	}
	fromUnstructured(t, o, into)
}

func (m *manifests) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// podSpecs are the pod templates of the workloads.
func (m *manifests) podSpecs(t *testing.T) []corev1.PodSpec {
	t.Helper()
	var out []corev1.PodSpec
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		for _, o := range m.all(kind) {
			var tmpl corev1.PodTemplateSpec
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &tmpl); err != nil {
				t.Fatalf("%s %s: %v", kind, o.GetName(), err)
			}
			out = append(out, tmpl.Spec)
		}
	}
	return out
}

func (m *manifests) containers(t *testing.T) []corev1.Container {
	t.Helper()
	var out []corev1.Container
	for _, p := range m.podSpecs(t) {
		out = append(out, p.InitContainers...)
		out = append(out, p.Containers...)
	}
	return out
}

// yaml is the rendering of the given kinds (all when none) as one stream.
func (m *manifests) yaml(t *testing.T, kinds ...string) string {
	t.Helper()
	var b strings.Builder
	for _, o := range m.objs {
		if len(kinds) > 0 && !slices.Contains(kinds, o.GetKind()) {
			continue
		}
		data, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if u, ok := into.(*unstructured.Unstructured); ok {
		*u = *o
		return
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// kubectl runs kubectl with stdin and returns its stdout; kubeconfig may be
// empty for commands that need no cluster.
func kubectl(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("cluster tier: kubectl is not on PATH (v1.32 is expected at /usr/bin/kubectl): %v", err)
	}
	if kubeconfig != "" {
		args = append([]string{"--kubeconfig", kubeconfig}, args...)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// build compiles one of the project's commands into a temporary directory.
func build(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "../cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out
}

// definedFlags are the flags a binary lists in its -h output.
func definedFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v\n%s", bin, err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s -h listed no flags:\n%s", bin, out)
	}
	return flags
}

// flagValues maps each --name=value argument to its value.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		out[name] = value
	}
	return out
}

func portOf(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port %s", c.Name, name)
	return 0
}

func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func serviceAccountToken(t *testing.T, env *clustertest.Env, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of ServiceAccount %s: %v", name, err)
	}
	return tr.Status.Token
}

// tokenKubeconfig is a kubeconfig that authenticates with token only.
func tokenKubeconfig(t *testing.T, env *clustertest.Env, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// metricsTokens are tokens for the audience meshnetd of a ServiceAccount
// bound to meshnet-metrics-reader and of one bound to nothing.
func metricsTokens(t *testing.T, env *clustertest.Env) (reader, stranger string) {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, auth.TokenRequest(time.Hour), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of ServiceAccount %s: %v", name, err)
		}
		return tr.Status.Token
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-reads-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "meshnet-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "scraper"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return token("scraper"), token("no-metrics")
}

// getMetrics GETs url with token (none when empty), the server's
// certificate unchecked (the controller's own, self-signed), and wants
// status want.
func getMetrics(url, token string, want int) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s: %.200s, want %d", resp.Status, bytes.TrimSpace(body), want)
	}
	return nil
}

func get200(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// waitFor polls cond until it holds, the process exits or ctx ends.
func waitFor(t *testing.T, ctx context.Context, exited <-chan struct{}, waitErr *error, what string, cond func() error) {
	t.Helper()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("waiting until %s: meshnet-controller exited: %v", what, *waitErr)
		case <-ctx.Done():
			t.Fatalf("waiting until %s: %v (last: %v)", what, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
