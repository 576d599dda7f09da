package clabfile

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// frrLab is the FRR lab of examples/, which `make lab` runs.
var frrLab = filepath.Join("..", "..", "..", "examples", "frr-ospf")

var update = flag.Bool("update", false, "rewrite testdata/frr-ospf.objects.yaml from the converter's output")

// files is a lab directory holding the given files, each mode 0644.
func files(kv ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := 0; i+1 < len(kv); i += 2 {
		fsys[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1]), Mode: 0o644}
	}
	return fsys
}

// convert parses lab and makes its objects in namespace lab, failing the
// test on any error.
func convert(t *testing.T, lab string, dir fstest.MapFS) (*Lab, Objects) {
	t.Helper()
	l, err := Parse([]byte(lab), dir, nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	o, err := l.Objects("lab")
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}
	checkValid(t, o)
	return l, o
}

func podOf(t *testing.T, o Objects, name string) corev1.Pod {
	t.Helper()
	for _, p := range o.Pods {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %s in %d pods", name, len(o.Pods))
	return corev1.Pod{}
}

func topologyOf(t *testing.T, o Objects, name string) v1beta1.Topology {
	t.Helper()
	for _, topo := range o.Topologies {
		if topo.Name == name {
			return topo
		}
	}
	t.Fatalf("no topology %s", name)
	return v1beta1.Topology{}
}

func configMapOf(t *testing.T, o Objects, name string) corev1.ConfigMap {
	t.Helper()
	for _, c := range o.ConfigMaps {
		if c.Name == name {
			return c
		}
	}
	var names []string
	for _, c := range o.ConfigMaps {
		names = append(names, c.Name)
	}
	t.Fatalf("no configmap %s in %v", name, names)
	return corev1.ConfigMap{}
}

// checkValid checks what the API server would refuse in the objects:
// names, volume names and mounts, ConfigMap keys and sizes, and that every
// volume's ConfigMap is among the objects.
func checkValid(t *testing.T, o Objects) {
	t.Helper()
	cms := map[string]corev1.ConfigMap{}
	for _, c := range o.ConfigMaps {
		if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
			t.Errorf("configmap name %q: %v", c.Name, errs)
		}
		if _, dup := cms[c.Name]; dup {
			t.Errorf("configmap %s made twice", c.Name)
		}
		cms[c.Name] = c
		size := 0
		for k, v := range c.Data {
			size += len(v)
			if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
				t.Errorf("configmap %s key %q: %v", c.Name, k, errs)
			}
		}
		for k, v := range c.BinaryData {
			size += len(v)
			if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
				t.Errorf("configmap %s key %q: %v", c.Name, k, errs)
			}
		}
		if size > MaxBindBytes {
			t.Errorf("configmap %s holds %d bytes", c.Name, size)
		}
	}
	for _, p := range o.Pods {
		if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
			t.Errorf("pod name %q: %v", p.Name, errs)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range p.Spec.Volumes {
			if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
				t.Errorf("pod %s volume name %q: %v", p.Name, v.Name, errs)
			}
			if _, dup := vols[v.Name]; dup {
				t.Errorf("pod %s: volume %s twice", p.Name, v.Name)
			}
			vols[v.Name] = v
			if v.ConfigMap != nil {
				c, ok := cms[v.ConfigMap.Name]
				if !ok {
					t.Errorf("pod %s: volume %s names configmap %s, which is not made", p.Name, v.Name, v.ConfigMap.Name)
				}
				for _, it := range v.ConfigMap.Items {
					_, text := c.Data[it.Key]
					_, bin := c.BinaryData[it.Key]
					if !text && !bin {
						t.Errorf("pod %s: volume %s item %s is not in configmap %s", p.Name, v.Name, it.Key, c.Name)
					}
				}
			}
		}
		if len(p.Spec.Containers) != 1 {
			t.Fatalf("pod %s has %d containers", p.Name, len(p.Spec.Containers))
		}
		paths := map[string]bool{}
		for _, m := range p.Spec.Containers[0].VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("pod %s: mount of unknown volume %s", p.Name, m.Name)
			}
			if paths[m.MountPath] || !strings.HasPrefix(m.MountPath, "/") {
				t.Errorf("pod %s: mount path %q twice or not absolute", p.Name, m.MountPath)
			}
			paths[m.MountPath] = true
		}
	}
}

// TestFRRLab converts examples/frr-ospf, the lab in the shape of
// containerlab's FRR examples, and compares every object with
// testdata/frr-ospf.objects.yaml (go test -update rewrites it); the
// tests below check the parts one by one.
func TestFRRLab(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(frrLab, "frr-ospf.clab.yml"))
	if err != nil {
		t.Fatal(err)
	}
	lab, err := Parse(data, os.DirFS(frrLab), nil)
	if err != nil {
		t.Fatal(err)
	}
	if lab.Name != "frr-ospf" || !slices.Equal(lab.Nodes, []string{"host1", "host2", "router1", "router2", "router3"}) {
		t.Errorf("lab %q nodes %v", lab.Name, lab.Nodes)
	}
	want := []Ignored{{
		Field:  "topology.groups.routers.binds[1]",
		Reason: `"__clabNodeName__/frr.conf:/etc/frr/frr.conf": containerlab mounts it writable; here it comes from a ConfigMap, which a pod sees read-only: writing to it fails (and would not change the lab's file anyway)`,
	}}
	if !reflect.DeepEqual(lab.Ignored, want) {
		t.Errorf("Ignored = %v, want %v", lab.Ignored, want)
	}
	o, err := lab.Objects("lab")
	if err != nil {
		t.Fatal(err)
	}
	checkValid(t, o)
	if len(o.Pods) != 5 || len(o.Topologies) != 5 || len(o.ConfigMaps) != 8 {
		t.Errorf("%d pods, %d topologies, %d configmaps; want 5, 5 and 8 (2 binds of 3 routers, 2 exec scripts)", len(o.Pods), len(o.Topologies), len(o.ConfigMaps))
	}
	var buf bytes.Buffer
	if err := o.WriteYAML(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "frr-ospf.objects.yaml")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantYAML, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), wantYAML) {
		t.Errorf("objects differ from %s (go test -update rewrites it):\n%s", golden, buf.String())
	}

	r1 := podOf(t, o, "router1")
	c := r1.Spec.Containers[0]
	if c.Image != "quay.io/frrouting/frr:10.5.1" || !*c.SecurityContext.Privileged || c.Lifecycle != nil {
		t.Errorf("router1: image %s, privileged %v, lifecycle %v", c.Image, *c.SecurityContext.Privileged, c.Lifecycle)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts["/etc/frr/daemons"]; m.SubPath != "daemons" || !m.ReadOnly || m.Name != "router1-etc-frr-daemons" {
		t.Errorf("daemons mount %+v", m)
	}
	if m := mounts["/etc/frr/frr.conf"]; m.SubPath != "frr.conf" || m.ReadOnly || m.Name != "router1-etc-frr-frr-conf" {
		t.Errorf("frr.conf mount %+v", m)
	}
	conf := configMapOf(t, o, "router2-etc-frr-frr-conf").Data["frr.conf"]
	if !strings.Contains(conf, "hostname router2") {
		t.Errorf("router2's frr.conf is not its own (__clabNodeName__):\n%s", conf)
	}
	r2 := topologyOf(t, o, "router2")
	wantLinks := []v1beta1.Link{
		{UID: 0, PeerPod: "router1", LocalIntf: "eth1", PeerIntf: "eth1"},
		{UID: 2, PeerPod: "router3", LocalIntf: "eth2", PeerIntf: "eth2", MTU: ptr.To[int32](1400)},
		{UID: 4, PeerPod: "host2", LocalIntf: "eth3", PeerIntf: "eth1"},
	}
	if !reflect.DeepEqual(r2.Spec.Links, wantLinks) {
		t.Errorf("router2 links:\n got %+v\nwant %+v", r2.Spec.Links, wantLinks)
	}
	h1 := podOf(t, o, "host1").Spec.Containers[0]
	if h1.Lifecycle == nil || h1.Lifecycle.PostStart == nil {
		t.Fatal("host1 has no postStart hook for its exec")
	}
	script := configMapOf(t, o, "host1-exec").Data[execScript]
	if !strings.Contains(script, `clab_exec 1 'topology.nodes.host1.exec[1] "ip addr add 192.168.11.2/24 dev eth1"' 'ip' 'addr' 'add' '192.168.11.2/24' 'dev' 'eth1'`) {
		t.Errorf("host1's exec script lacks its second command:\n%s", script)
	}
}
