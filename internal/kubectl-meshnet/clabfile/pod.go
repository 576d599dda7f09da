package clabfile

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod is node n's pod, without its volumes: one container, named like the
// pod, started as containerlab starts kind linux; a bridge node's runs
// the pause image alone (bridgeContainer).
func (l *Lab) pod(n *node, namespace string) corev1.Pod {
	labels := maps.Clone(n.labels)
	maps.Copy(labels, map[string]string{LabLabel: l.Name, NodeLabel: n.name, KindLabel: n.kind, GroupLabel: n.group})
	c := bridgeContainer(n)
	if !n.bridge {
		c = l.container(n, labels)
	}
	return corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: n.pod, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			Hostname:      n.hostname,
			RestartPolicy: n.restart,
			DNSPolicy:     n.dnsPolicy,
			DNSConfig:     n.dnsConfig,
			// containerlab stops kind linux with SIGKILL, at once.
			TerminationGracePeriodSeconds: new(int64(0)),
			// A containerlab node has no Kubernetes credentials and no
			// service variables in its environment; neither has the pod.
			AutomountServiceAccountToken: new(false),
			EnableServiceLinks:           new(false),
			Containers:                   []corev1.Container{c},
		},
	}
}

// container is kind linux node n's container, with the pod's labels.
func (l *Lab) container(n *node, labels map[string]string) corev1.Container {
	sc := &corev1.SecurityContext{RunAsUser: n.runAsUser, RunAsGroup: n.runAsGroup}
	if n.privileged {
		sc.Privileged = new(true)
	}
	if len(n.capAdd) > 0 {
		sc.Capabilities = &corev1.Capabilities{Add: n.capAdd}
	}
	var resources corev1.ResourceRequirements
	if len(n.limits) > 0 {
		resources.Limits = n.limits
	}
	return corev1.Container{
		Name:            n.pod,
		Image:           n.image,
		ImagePullPolicy: n.pullPolicy,
		Command:         escapeAll(n.entrypoint),
		Args:            escapeAll(n.cmd),
		Env:             l.env(n, labels),
		SecurityContext: sc,
		ReadinessProbe:  n.readiness,
		Resources:       resources,
		// containerlab's containers have a TTY and an open stdin
		// (docker run -it): a shell as cmd waits rather than exits.
		TTY:   true,
		Stdin: true,
	}
}

// bridgeContainer is bridge node n's container: the pause image,
// unprivileged, in a pod whose network namespace holds the segment's
// bridge (meshnetd's).
func bridgeContainer(n *node) corev1.Container {
	return corev1.Container{
		Name:            n.pod,
		Image:           n.image,
		ImagePullPolicy: n.pullPolicy,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// env is the container's environment, sorted by name: the node's env, then
// what containerlab adds over it: CLAB_LABEL_<label> for each of the pod's
// labels, and CLAB_INTFS, the node's number of links (which images that
// wait for their interfaces read).
func (l *Lab) env(n *node, labels map[string]string) []corev1.EnvVar {
	all := maps.Clone(n.env)
	for k, v := range labels {
		all["CLAB_LABEL_"+envKey(k)] = v
	}
	all["CLAB_INTFS"] = strconv.Itoa(len(n.intfs))
	out := make([]corev1.EnvVar, 0, len(all))
	for _, k := range slices.Sorted(maps.Keys(all)) {
		out = append(out, corev1.EnvVar{Name: k, Value: escape(all[k])})
	}
	return out
}

var (
	envSpecial  = regexp.MustCompile(`[-+./]`)
	envNotValid = regexp.MustCompile(`[^a-zA-Z0-9_]+`)
)

// envKey makes a label key part of a variable name, as containerlab does:
// -+./ become _, anything else not a letter, digit or _ is dropped, all in
// upper case.
func envKey(k string) string {
	return strings.ToUpper(envNotValid.ReplaceAllString(envSpecial.ReplaceAllString(k, "_"), ""))
}

// escape keeps s as written where the kubelet expands $(VAR) and $$ (a
// container's command, args and env values), which docker does not.
func escape(s string) string {
	if !strings.Contains(s, "$(") && !strings.Contains(s, "$$") {
		return s
	}
	return strings.ReplaceAll(s, "$", "$$")
}

func escapeAll(words []string) []string {
	if words == nil {
		return nil
	}
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = escape(w)
	}
	return out
}
