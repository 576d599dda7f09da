package clabfile

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestLinks checks the brief and extended forms and macvlan, each end in
// its node's Topology with the link's index as uid and mtu on both ends.
func TestLinks(t *testing.T) {
	_, o := convert(t, `
name: links
topology:
  defaults: {kind: linux, image: alpine}
  nodes: {r1: {}, r2: {}, r3: {}}
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
    - endpoints: ["r2:eth2", "r3:eth1"]
      mtu: 9000
    - type: veth
      mtu: 1400
      endpoints:
        - {node: r3, interface: eth2}
        - {node: r1, interface: eth2}
    - endpoints: ["r1:eth3", "macvlan:ens4"]
    - type: MacVlan
      endpoint: {node: r2, interface: eth3}
      host-interface: ens5
      mode: bridge
`, nil)
	want := map[string][]v1beta1.Link{
		"r1": {
			{UID: 0, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1"},
			{UID: 2, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth2", MTU: ptr.To[int32](1400)},
			{UID: 3, PeerPod: v1beta1.PeerHost, LocalIntf: "eth3", PeerIntf: "ens4"},
		},
		"r2": {
			{UID: 0, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1"},
			{UID: 1, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth1", MTU: ptr.To[int32](9000)},
			{UID: 4, PeerPod: v1beta1.PeerHost, LocalIntf: "eth3", PeerIntf: "ens5"},
		},
		"r3": {
			{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth2", MTU: ptr.To[int32](9000)},
			{UID: 2, PeerPod: "r1", LocalIntf: "eth2", PeerIntf: "eth2", MTU: ptr.To[int32](1400)},
		},
	}
	for _, topo := range o.Topologies {
		if topo.APIVersion != "networkop.co.uk/v1beta1" || topo.Kind != "Topology" || topo.Namespace != "lab" || topo.Labels[LabLabel] != "links" {
			t.Errorf("topology %s: %s %s in %q, labels %v", topo.Name, topo.APIVersion, topo.Kind, topo.Namespace, topo.Labels)
		}
		if !reflect.DeepEqual(topo.Spec.Links, want[topo.Name]) {
			t.Errorf("%s links:\n got %+v\nwant %+v", topo.Name, topo.Spec.Links, want[topo.Name])
		}
	}
	if n := envOf(podOf(t, o, "r1"))["CLAB_INTFS"]; n != "3" {
		t.Errorf("r1: CLAB_INTFS=%s, want 3", n)
	}
}

// TestNodeWithoutLinks checks that a node without links still has its
// Topology, empty, so that every node has one.
func TestNodeWithoutLinks(t *testing.T) {
	_, o := convert(t, "name: alone\ntopology: {nodes: {r1: {kind: linux, image: alpine}}}\n", nil)
	if len(o.Topologies) != 1 || o.Topologies[0].Name != "r1" || len(o.Topologies[0].Spec.Links) != 0 {
		t.Errorf("topologies %+v, want r1's, empty", o.Topologies)
	}
	if o.Pods[0].Spec.Containers[0].Lifecycle != nil || len(o.ConfigMaps) != 0 {
		t.Error("a node without exec or binds has a hook or ConfigMaps")
	}
}

// TestBinds checks binds of files and directories: ConfigMap content,
// keys, modes, mounts, read-only, and text or binary data.
func TestBinds(t *testing.T) {
	dir := files("cfg/frr.conf", "hostname r1\n", "cfg/sub/vtysh.conf", "service integrated-vtysh-config\n", "lab.yml", "name: x\n")
	dir["start.sh"] = &fstest.MapFile{Data: []byte("#!/bin/sh\n"), Mode: 0o755}
	dir["blob.bin"] = &fstest.MapFile{Data: []byte{0xff, 0xfe, 0}}
	dir["cfg/run.sh"] = &fstest.MapFile{Data: []byte("#!/bin/sh\n"), Mode: 0o700}
	_, o := convert(t, `
name: binds
topology:
  nodes:
    r1:
      kind: linux
      image: alpine
      binds:
        - ./start.sh:/usr/local/bin/start.sh:ro
        - blob.bin:/var/lib/blob.bin:rw
        - cfg:/etc/frr:ro,z
        - lab.yml:/lab/lab.yml
`, dir)
	p := podOf(t, o, "r1")
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m
	}

	m := mounts["/usr/local/bin/start.sh"]
	if m.Name != "r1-usr-local-bin-start-sh" || m.SubPath != "start.sh" || !m.ReadOnly {
		t.Errorf("start.sh mounted as %+v", m)
	}
	if items := vols[m.Name].ConfigMap.Items; len(items) != 1 || items[0].Mode == nil || *items[0].Mode != 0o755 {
		t.Errorf("start.sh items %+v, want one of mode 0755", items)
	}
	if got := configMapOf(t, o, m.Name).Data["start.sh"]; got != "#!/bin/sh\n" {
		t.Errorf("start.sh holds %q", got)
	}

	m = mounts["/var/lib/blob.bin"]
	if m.ReadOnly || m.SubPath != "blob.bin" {
		t.Errorf("blob.bin mounted as %+v", m)
	}
	if c := configMapOf(t, o, m.Name); !bytes.Equal(c.BinaryData["blob.bin"], []byte{0xff, 0xfe, 0}) || len(c.Data) != 0 {
		t.Errorf("blob.bin: data %v binary %v", c.Data, c.BinaryData)
	}

	m = mounts["/etc/frr"]
	if m.SubPath != "" || !m.ReadOnly || m.Name != "r1-etc-frr" {
		t.Errorf("directory cfg mounted as %+v, want whole and read-only", m)
	}
	c := configMapOf(t, o, "r1-etc-frr")
	paths := map[string]string{}
	for _, it := range vols["r1-etc-frr"].ConfigMap.Items {
		paths[it.Path] = c.Data[it.Key]
		if (it.Path == "run.sh") != (it.Mode != nil) {
			t.Errorf("item %s mode %v: only run.sh is executable", it.Path, it.Mode)
		}
	}
	want := map[string]string{"frr.conf": "hostname r1\n", "run.sh": "#!/bin/sh\n", "sub/vtysh.conf": "service integrated-vtysh-config\n"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("directory holds %v, want %v", paths, want)
	}
	if m := mounts["/lab/lab.yml"]; m.SubPath != "lab.yml" || m.Name != "r1-lab-lab-yml" {
		t.Errorf("lab.yml mounted as %+v", m)
	}
}

// TestNames checks that ConfigMap and volume names stay valid and
// distinct when container paths make the same or overlong names.
func TestNames(t *testing.T) {
	long := "/" + strings.Repeat("very-long-directory/", 5) + "file.conf"
	_, o := convert(t, `
name: names
topology:
  nodes:
    r1:
      kind: linux
      image: alpine
      exec: ["true"]
      binds: ["a:/etc/a.b", "a:/etc/a-b", "a:/exec", "a:`+long+`"]
    r1-etc:
      kind: linux
      image: alpine
      binds: ["a:/a.b"]
`, files("a", "a"))
	var names []string
	for _, c := range o.ConfigMaps {
		names = append(names, c.Name)
	}
	// Sorted: r1's binds /etc/a-b, /etc/a.b (same slug: hashed), /exec
	// (the exec script's name: hashed), the long path (cut, hashed);
	// r1-etc's /a.b (r1's name: hashed).
	want := []string{`^r1-etc-a-b$`, `^r1-etc-a-b-[0-9a-f]{8}$`, `^r1-etc-a-b-[0-9a-f]{8}$`, `^r1-exec$`, `^r1-exec-[0-9a-f]{8}$`,
		`^r1-very-long-directory-very-long-directory-very-long-d-[0-9a-f]{8}$`}
	if len(names) != len(want) {
		t.Fatalf("names %v, want %d", names, len(want))
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(names[i]) {
			t.Errorf("name %d is %s, want %s", i, names[i], w)
		}
	}
	var vols []string
	for _, v := range podOf(t, o, "r1").Spec.Volumes {
		vols = append(vols, v.Name)
	}
	if !slices.Contains(vols, "r1-exec-state") {
		t.Errorf("r1's volumes %v lack r1-exec-state", vols)
	}
	// checkValid (in convert) has checked they are valid and distinct.
}

// TestExecHook checks the postStart hook and its ConfigMap and volumes.
func TestExecHook(t *testing.T) {
	_, o := convert(t, `
name: ex
topology:
  defaults: {kind: linux, image: alpine}
  groups:
    hosts: {exec: ["ip link set eth1 up"]}
  nodes:
    h1:
      group: hosts
      exec:
        - "sh -c 'echo __clabNodeName__ in __clabLabName__ > /tmp/who'"
    h2: {}
  links:
    - endpoints: ["h1:eth1", "h2:eth1"]
    - endpoints: ["h1:eth2", "h2:eth2"]
`, nil)
	c := podOf(t, o, "h1").Spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil || !reflect.DeepEqual(c.Lifecycle.PostStart.Exec.Command, []string{"/bin/sh", execDir + "/" + execScript}) {
		t.Fatalf("h1's hook %+v", c.Lifecycle)
	}
	script := configMapOf(t, o, "h1-exec").Data[execScript]
	for _, w := range []string{
		"node='h1'",
		"for intf in 'eth1' 'eth2'; do",
		`clab_exec 0 'topology.groups.hosts.exec[0] "ip link set eth1 up"' 'ip' 'link' 'set' 'eth1' 'up'`,
		`clab_exec 1 'topology.nodes.h1.exec[0] "sh -c '\''echo h1 in clab-ex > /tmp/who'\''"' 'sh' '-c' 'echo h1 in clab-ex > /tmp/who'`,
	} {
		if !strings.Contains(script, w) {
			t.Errorf("script lacks %q:\n%s", w, script)
		}
	}
	if podOf(t, o, "h2").Spec.Containers[0].Lifecycle != nil {
		t.Error("h2 has no exec but a hook")
	}
}

// TestExecScriptRuns runs a hook script with the machine's /bin/sh: it
// waits for the interfaces (lo here), runs every command in order as a
// program, a failing one reported (on the hook's output and the
// container's log) naming the node, the field and the command, and the
// hook succeeds, so the container is not restarted; a second run (a
// container restarted for another reason) runs none again.
func TestExecScriptRuns(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("the hook script needs a POSIX sh, as the images it runs in have: %v", err)
	}
	if _, err := os.Stat("/sys/class/net/lo"); err != nil {
		t.Fatalf("the hook script waits for interfaces in /sys/class/net: %v", err)
	}
	tmp := t.TempDir()
	out, log := filepath.Join(tmp, "out"), filepath.Join(tmp, "log")
	n := &node{name: "h1", intfs: []string{"lo"}, exec: []command{
		{at: "topology.nodes.h1.exec[0]", text: "first", argv: []string{"sh", "-c", "echo first >> " + out}},
		{at: "topology.nodes.h1.exec[1]", text: "false", argv: []string{"false"}},
		{at: "topology.nodes.h1.exec[2]", text: "third", argv: []string{"sh", "-c", "echo third >> " + out}},
	}}
	script := strings.NewReplacer(execStateDir, filepath.Join(tmp, "done"), execLog, log).Replace(n.execHookScript())
	if err := os.Mkdir(filepath.Join(tmp, "done"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() (string, error) {
		cmd := exec.Command(sh, "-c", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		return stderr.String(), err
	}
	const failed = ExecFailed + `h1: topology.nodes.h1.exec[1] "false" failed with exit status 1` + "\n"
	stderr, err := run()
	if err != nil || stderr != failed {
		t.Fatalf("first run: err %v, stderr %q; want success, reporting %q", err, stderr, failed)
	}
	if got, _ := os.ReadFile(log); string(got) != failed {
		t.Errorf("the container's log has %q, want %q", got, failed)
	}
	if got, _ := os.ReadFile(out); string(got) != "first\nthird\n" {
		t.Errorf("commands ran as %q, want first, then third after the failure", got)
	}
	if stderr, err := run(); err != nil || stderr != "" {
		t.Fatalf("second run: %v: %s", err, stderr)
	}
	if got, _ := os.ReadFile(out); string(got) != "first\nthird\n" {
		t.Errorf("a second run ran commands again: %q", got)
	}
}

// TestDeterministic converts the same lab many times: the same bytes each
// time, whatever Go's map order.
func TestDeterministic(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(frrLab, "frr-ospf.clab.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for i := range 20 {
		lab, err := Parse(data, os.DirFS(frrLab), nil)
		if err != nil {
			t.Fatal(err)
		}
		o, err := lab.Objects("")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := o.WriteYAML(&buf); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = buf.Bytes()
			if bytes.Contains(first, []byte("namespace:")) {
				t.Error("no namespace given, but the objects have one")
			}
		} else if !bytes.Equal(first, buf.Bytes()) {
			t.Fatalf("conversion %d differs from the first", i)
		}
	}
	_, errA := Parse([]byte("name: e\ntopology: {nodes: {a: {kind: x}, b: {kind: y}, c: {kind: z}}}\n"), nil, nil)
	for range 10 {
		_, errB := Parse([]byte("name: e\ntopology: {nodes: {a: {kind: x}, b: {kind: y}, c: {kind: z}}}\n"), nil, nil)
		if errA.Error() != errB.Error() {
			t.Fatalf("errors in another order:\n%v\n%v", errA, errB)
		}
	}
}

// TestObjectsNamespace checks the namespace's validation and placement.
func TestObjectsNamespace(t *testing.T) {
	lab, err := Parse([]byte("name: ns\ntopology: {nodes: {r1: {kind: linux, image: a, exec: [\"true\"]}}}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Objects("Lab_1"); err == nil || !strings.Contains(err.Error(), `namespace "Lab_1"`) {
		t.Errorf("err = %v, want one naming the namespace", err)
	}
	o, err := lab.Objects("team-a")
	if err != nil {
		t.Fatal(err)
	}
	if o.Pods[0].Namespace != "team-a" || o.Topologies[0].Namespace != "team-a" || o.ConfigMaps[0].Namespace != "team-a" {
		t.Error("an object is not in the namespace")
	}
}

// TestParseWithoutDirectory checks that a lab binding nothing needs no
// directory, and one binding a file says it needs one.
func TestParseWithoutDirectory(t *testing.T) {
	if _, err := Parse([]byte("name: d\ntopology: {nodes: {r1: {kind: linux, image: a}}}\n"), nil, nil); err != nil {
		t.Error(err)
	}
	_, err := Parse([]byte("name: d\ntopology: {nodes: {r1: {kind: linux, image: a, binds: [\"a:/a\"]}}}\n"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no lab directory") {
		t.Errorf("err = %v", err)
	}
	var _ fs.FS = fstest.MapFS{}
}

// TestBridges checks that bridge and ovs-bridge nodes become L2 segments:
// a pod that runs only the pause image, unprivileged, whose Topology has
// spec.bridge, with the links to it as its ports, each at SegmentMTU
// unless the file sets mtu; the linux nodes' inherited exec and image do
// not reach the bridge, and what the bridge node sets itself is listed as
// ignored.
func TestBridges(t *testing.T) {
	l, o := convert(t, `
name: lan
topology:
  defaults: {kind: linux, image: alpine, exec: ["ip link set eth1 up"]}
  nodes:
    r1: {}
    r2: {}
    r3: {}
    br1: {kind: bridge, image: ignored, labels: {site: a}}
    sw1: {kind: ovs-bridge}
  links:
    - endpoints: ["r1:eth1", "br1:p1"]
    - endpoints: ["r2:eth1", "br1:p2"]
    - endpoints: ["r3:eth1", "sw1:p1"]
      mtu: 9000
`, nil)
	for name, want := range map[string][]v1beta1.Link{
		"br1": {
			{UID: 0, PeerPod: "r1", LocalIntf: "p1", PeerIntf: "eth1", MTU: ptr.To[int32](SegmentMTU)},
			{UID: 1, PeerPod: "r2", LocalIntf: "p2", PeerIntf: "eth1", MTU: ptr.To[int32](SegmentMTU)},
		},
		"sw1": {{UID: 2, PeerPod: "r3", LocalIntf: "p1", PeerIntf: "eth1", MTU: ptr.To[int32](9000)}},
		"r1":  {{UID: 0, PeerPod: "br1", LocalIntf: "eth1", PeerIntf: "p1", MTU: ptr.To[int32](SegmentMTU)}},
	} {
		topo := topologyOf(t, o, name)
		if !reflect.DeepEqual(topo.Spec.Links, want) {
			t.Errorf("%s links:\n got %+v\nwant %+v", name, topo.Spec.Links, want)
		}
		if isBridge := topo.Spec.Bridge != nil; isBridge != (name != "r1") {
			t.Errorf("%s: spec.bridge %+v", name, topo.Spec.Bridge)
		}
	}
	for _, name := range []string{"br1", "sw1"} {
		pod := podOf(t, o, name)
		c := pod.Spec.Containers[0]
		if c.Image != BridgeImage || c.Lifecycle != nil || c.SecurityContext.Privileged != nil || len(c.Env) != 0 || c.TTY {
			t.Errorf("%s: container %+v, want the pause image alone, unprivileged, without exec or env", name, c)
		}
	}
	if podOf(t, o, "br1").Labels["site"] != "a" || podOf(t, o, "sw1").Labels[KindLabel] != "ovs-bridge" {
		t.Errorf("bridge labels: %v, %v", podOf(t, o, "br1").Labels, podOf(t, o, "sw1").Labels)
	}
	if !slices.ContainsFunc(l.Ignored, func(ig Ignored) bool { return ig.Field == "topology.nodes.br1.image" }) {
		t.Errorf("ignored %+v, want topology.nodes.br1.image", l.Ignored)
	}
	for _, cm := range o.ConfigMaps {
		if strings.HasPrefix(cm.Name, "br1") || strings.HasPrefix(cm.Name, "sw1") {
			t.Errorf("ConfigMap %s for a bridge", cm.Name)
		}
	}
}

// TestVXLANLinks: containerlab's vxlan and vxlan-stitch links become links
// to a physical device, the remote VTEP, with its VNI and port: what the
// pod sees is one interface either way.
func TestVXLANLinks(t *testing.T) {
	_, o := convert(t, `
name: vxlan
topology:
  nodes: {r1: {kind: linux, image: alpine}}
  links:
    - type: vxlan
      endpoint: {node: r1, interface: eth1}
      remote: 192.0.2.10
      vni: 100
    - type: vxlan-stitch
      endpoint: {node: r1, interface: eth2}
      remote: 192.0.2.11
      vni: 200
      udp-port: 14789
      mtu: 1400
`, nil)
	want := []v1beta1.Link{
		{UID: 0, PeerPod: "192.0.2.10", LocalIntf: "eth1", PeerIntf: "vni100",
			LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "192.0.2.10", VNI: 100}},
		{UID: 1, PeerPod: "192.0.2.11", LocalIntf: "eth2", PeerIntf: "vni200", MTU: ptr.To[int32](1400),
			LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "192.0.2.11", VNI: 200, UDPPort: ptr.To[int32](14789)}},
	}
	if got := topologyOf(t, o, "r1").Spec.Links; !reflect.DeepEqual(got, want) {
		t.Errorf("r1's links:\n got %+v\nwant %+v", got, want)
	}
}

// TestFaultsInTheFile: a link's vars.meshnet sets netem and state on both
// ends and asks for LinkFaults on the link, which containerlab's kind
// linux ignores (the same file runs there); other vars stay ignored, and
// a bad value is refused naming where the file sets it.
func TestFaultsInTheFile(t *testing.T) {
	l, o := convert(t, `
name: faults
topology:
  defaults: {kind: linux, image: alpine}
  nodes: {r1: {}, r2: {}, r3: {}}
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
      vars:
        meshnet:
          netem: {delay: 50ms, loss: "1%"}
          faults:
            - {state: down, duration: 2s, period: 10s, count: 3}
            - {netem: {delay: 500ms}, duration: 1m, schedule: "@hourly"}
        site: a
    - endpoints: ["r2:eth2", "r3:eth1"]
      vars: {meshnet: {state: down}}
`, nil)
	r1 := topologyOf(t, o, "r1").Spec.Links[0]
	r2 := topologyOf(t, o, "r2").Spec.Links
	if r1.Netem == nil || *r1.Netem.Delay != "50ms" || r2[0].Netem == nil || *r2[0].Netem.Loss != "1%" {
		t.Errorf("netem of both ends: %+v, %+v", r1.Netem, r2[0].Netem)
	}
	if r2[1].State == nil || *r2[1].State != v1beta1.LinkDown || topologyOf(t, o, "r3").Spec.Links[0].State == nil {
		t.Errorf("state of both ends of r2-r3: %v", r2[1].State)
	}
	if len(o.Faults) != 2 {
		t.Fatalf("faults %+v, want 2", o.Faults)
	}
	f := o.Faults[0]
	if f.Name != "r1-eth1-fault-0" || f.Namespace != "lab" || f.Labels[LabLabel] != "faults" || f.Kind != "LinkFault" ||
		!reflect.DeepEqual(f.Spec.Links, []v1beta1.FaultLink{{Pod: "r1", Interface: "eth1"}}) || *f.Spec.Count != 3 || *f.Spec.Period != "10s" {
		t.Errorf("first fault %+v", f)
	}
	if g := o.Faults[1]; g.Name != "r1-eth1-fault-1" || *g.Spec.Schedule != "@hourly" || *g.Spec.Netem.Delay != "500ms" {
		t.Errorf("second fault %+v", g)
	}
	if !slices.ContainsFunc(l.Ignored, func(ig Ignored) bool { return ig.Field == "topology.links[0].vars.site" }) {
		t.Errorf("ignored %+v, want topology.links[0].vars.site", l.Ignored)
	}
	var b bytes.Buffer
	if err := o.WriteYAML(&b); err != nil || !strings.Contains(b.String(), "kind: LinkFault") {
		t.Errorf("WriteYAML: %v, without the LinkFaults", err)
	}
	for _, c := range []struct{ vars, want string }{
		{"{meshnet: {netem: {delay: fast}}}", "topology.links[0].vars.meshnet.netem"},
		{"{meshnet: {state: sideways}}", `topology.links[0].vars.meshnet.state: "sideways"`},
		{"{meshnet: {shape: 1}}", "topology.links[0].vars.meshnet: want netem, state and faults"},
		{"{meshnet: {faults: [{duration: 2s}]}}", "topology.links[0].vars.meshnet.faults[0]: want state down, netem or both"},
		{"{meshnet: {faults: [{state: up, duration: 2s}]}}", "topology.links[0].vars.meshnet.faults[0].state"},
		{"{meshnet: {faults: [{state: down, duration: 2s, schedule: never}]}}", "topology.links[0].vars.meshnet.faults[0]: "},
		{"{meshnet: {faults: [{state: down, duration: 2s, links: [{pod: r9, interface: eth1}]}]}}", "the fault holds its link, none other"},
	} {
		_, err := Parse([]byte("name: x\ntopology:\n  defaults: {kind: linux, image: a}\n  nodes: {r1: {}, r2: {}}\n  links:\n    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      vars: "+c.vars+"\n"), files(), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("vars %s: %v, want an error naming %q", c.vars, err, c.want)
		}
	}
}
