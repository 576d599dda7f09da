package clabfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// Objects are a lab's Kubernetes objects. Each list is in a fixed order
// (ConfigMaps by name, Topologies and Pods by node name), so that the same
// file and namespace always give the same objects; a CLI applies the
// ConfigMaps and Topologies before the Pods, which need them when they
// start.
type Objects struct {
	ConfigMaps []corev1.ConfigMap
	Topologies []v1beta1.Topology
	Pods       []corev1.Pod
	// Services publish the ports the nodes publish (ports), one a node.
	Services []corev1.Service
	// Faults are the LinkFaults the file's links ask for (vars.meshnet),
	// applied last: they hold links of the pods.
	Faults []v1beta1.LinkFault
}

// Objects makes the lab's objects in namespace; an empty namespace leaves
// it unset, for `kubectl apply -n`. It fails only for a namespace that is
// not a DNS-1123 label.
func (l *Lab) Objects(namespace string) (Objects, error) {
	if errs := validation.IsDNS1123Label(namespace); namespace != "" && len(errs) > 0 {
		return Objects{}, fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	var o Objects
	topos, err := l.topologies(namespace)
	if err != nil {
		return Objects{}, err
	}
	o.Topologies = topos
	names := newNamer()
	for _, n := range l.nodes {
		pod := l.pod(n, namespace)
		if len(n.exec) > 0 {
			o.ConfigMaps = append(o.ConfigMaps, l.configMap(n, namespace, names.exec(n.pod),
				map[string]string{execScript: n.execHookScript()}, nil))
			addExecHook(&pod, names.exec(n.pod), names.execState(n.pod))
		}
		for _, b := range n.binds {
			name := names.bind(n.pod, b.dst)
			data, binary := b.data()
			o.ConfigMaps = append(o.ConfigMaps, l.configMap(n, namespace, name, data, binary))
			mountBind(&pod, name, b)
		}
		o.Pods = append(o.Pods, pod)
		if svc := l.service(n, namespace); svc != nil {
			o.Services = append(o.Services, *svc)
		}
	}
	sortByName(o.ConfigMaps)
	o.Faults = l.faultObjects(namespace, names)
	return o, nil
}

// topologies are one Topology per node, in node order, each link of the
// node in uid order as topofile makes them; a node without links has an
// empty one.
func (l *Lab) topologies(namespace string) ([]v1beta1.Topology, error) {
	byNode := map[string]v1beta1.Topology{}
	if l.links != nil {
		topos, err := l.links.Topologies(namespace)
		if err != nil {
			return nil, fmt.Errorf("convert links: %w", err)
		}
		for _, t := range topos {
			byNode[t.Name] = t
		}
	}
	out := make([]v1beta1.Topology, 0, len(l.nodes))
	for _, n := range l.nodes {
		t, ok := byNode[n.pod]
		if !ok {
			t = v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Name: n.pod, Namespace: namespace}}
		}
		if n.bridge {
			t.Spec.Bridge = &v1beta1.Bridge{}
		}
		t.TypeMeta = metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "Topology"}
		t.Labels = map[string]string{LabLabel: l.Name, NodeLabel: n.name}
		out = append(out, t)
	}
	return out, nil
}

// configMap is a ConfigMap of node n's.
func (l *Lab) configMap(n *node, namespace, name string, data map[string]string, binary map[string][]byte) corev1.ConfigMap {
	return corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{LabLabel: l.Name, NodeLabel: n.name}},
		Data:       data,
		BinaryData: binary,
	}
}

// data is the bind's files as a ConfigMap's data, by key: text as Data,
// anything else as BinaryData.
func (b *bind) data() (map[string]string, map[string][]byte) {
	var text map[string]string
	var binary map[string][]byte
	for i, f := range b.src.files {
		k := b.key(i)
		if utf8.Valid(f.data) {
			if text == nil {
				text = map[string]string{}
			}
			text[k] = string(f.data)
		} else {
			if binary == nil {
				binary = map[string][]byte{}
			}
			binary[k] = f.data
		}
	}
	return text, binary
}

// notKeyChars are what a ConfigMap key cannot hold.
var notKeyChars = regexp.MustCompile(`[^-._a-zA-Z0-9]+`)

// key is the ConfigMap key of the bind's file i: a bound file's is the
// container path's last element; a directory's files are numbered, since
// their paths may not be keys, and each gets its path back in the volume.
func (b *bind) key(i int) string {
	if !b.src.dir {
		if k := notKeyChars.ReplaceAllString(path.Base(b.dst), "_"); k != "." && k != ".." {
			return k
		}
		return "file"
	}
	return fmt.Sprintf("f%d-%s", i, notKeyChars.ReplaceAllString(path.Base(b.src.files[i].rel), "_"))
}

// mountBind mounts the ConfigMap of bind b in the pod: a file by subPath,
// a directory whole, each file with its path and mode.
func mountBind(pod *corev1.Pod, name string, b *bind) {
	var items []corev1.KeyToPath
	for i, f := range b.src.files {
		item := corev1.KeyToPath{Key: b.key(i), Path: f.rel}
		if !b.src.dir {
			item.Path = item.Key
		}
		if f.executable {
			item.Mode = new(int32(0o755))
		}
		items = append(items, item)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items},
	}})
	m := corev1.VolumeMount{Name: name, MountPath: b.dst, ReadOnly: b.readOnly}
	if !b.src.dir {
		m.SubPath = items[0].Path
	}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, m)
}

// addExecHook gives the pod its exec hook: the script from ConfigMap
// script, its marks in the emptyDir state.
func addExecHook(pod *corev1.Pod, script, state string) {
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: script, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: script}}}},
		corev1.Volume{Name: state, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: script, MountPath: execDir, ReadOnly: true},
		corev1.VolumeMount{Name: state, MountPath: execStateDir},
	)
	c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"/bin/sh", execDir + "/" + execScript}},
	}}
}

// namer names a lab's ConfigMaps and volumes: <node>-exec,
// <node>-exec-state and <node>-<container path>, valid DNS-1123 labels
// (a volume's name must be one) and distinct in the lab; a name that is
// taken, or too long, gets a hash of what it names instead of its end.
type namer struct {
	taken map[string]bool
	// names are the names given, by what they name.
	names map[string]string
}

func newNamer() *namer {
	return &namer{taken: map[string]bool{}, names: map[string]string{}}
}

func (nm *namer) exec(node string) string      { return nm.name(node+"-exec", node+"\x00exec") }
func (nm *namer) execState(node string) string { return nm.name(node+"-exec-state", node+"\x00state") }

func (nm *namer) bind(node, dst string) string {
	return nm.name(node+"-"+slug(dst), node+"\x00"+dst)
}

// name is the name of what: want when it is free and valid, else want cut
// short with a hash of what.
func (nm *namer) name(want, what string) string {
	if n, ok := nm.names[what]; ok {
		return n
	}
	want = strings.Trim(want, "-")
	if len(want) > validation.DNS1123LabelMaxLength || nm.taken[want] {
		sum := sha256.Sum256([]byte(what))
		want = strings.TrimRight(want[:min(len(want), validation.DNS1123LabelMaxLength-9)], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	nm.taken[want] = true
	nm.names[what] = want
	return want
}

// slug makes a container path part of a name: lower case letters and
// digits, anything else a dash.
func slug(p string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(p) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}
