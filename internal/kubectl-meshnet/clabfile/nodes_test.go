package clabfile

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestInheritance checks containerlab's order defaults < kinds < groups <
// node for each kind of setting: a string is the most specific one set;
// env and labels merge by name; exec and binds concatenate from defaults
// to node without duplicates, a bind replacing a less specific one with
// the same container path.
func TestInheritance(t *testing.T) {
	_, o := convert(t, `
name: inherit
topology:
  defaults:
    kind: linux
    image: img:defaults
    cmd: sleep defaults
    env: {A: defaults, B: defaults, C: defaults, D: defaults}
    labels: {a: defaults, b: defaults, c: defaults, d: defaults}
    exec: ["echo defaults", "echo shared"]
    binds: ["d.txt:/x/d", "d.txt:/x/all"]
  kinds:
    linux:
      image: img:kind
      entrypoint: /kind
      env: {B: kind, C: kind, D: kind}
      labels: {b: kind, c: kind, d: kind}
      exec: ["echo kind", "echo shared"]
      binds: ["k.txt:/x/k", "k.txt:/x/all"]
  groups:
    g:
      image: img:group
      env: {C: group, D: group}
      labels: {c: group, d: group}
      exec: ["echo group"]
      binds: ["g.txt:/x/g", "g.txt:/x/all"]
  nodes:
    n1:
      group: g
      image: img:node
      env: {D: node}
      labels: {d: node}
      exec: ["echo node", "echo shared"]
      binds: ["n.txt:/x/all:ro"]
    n2:
      group: g
    n3: {}
`, files("d.txt", "d", "k.txt", "k", "g.txt", "g", "n.txt", "n"))

	for _, tc := range []struct {
		node, image     string
		env, labels     map[string]string
		command, args   []string
		execs           []string
		mounts, sources map[string]string
	}{{
		node: "n1", image: "img:node",
		env:     map[string]string{"A": "defaults", "B": "kind", "C": "group", "D": "node"},
		labels:  map[string]string{"a": "defaults", "b": "kind", "c": "group", "d": "node"},
		command: []string{"/kind"}, args: []string{"sleep", "defaults"},
		execs:  []string{"echo defaults", "echo shared", "echo kind", "echo group", "echo node"},
		mounts: map[string]string{"/x/d": "d", "/x/k": "k", "/x/g": "g", "/x/all": "n"},
	}, {
		node: "n2", image: "img:group",
		env:     map[string]string{"A": "defaults", "B": "kind", "C": "group", "D": "group"},
		labels:  map[string]string{"a": "defaults", "b": "kind", "c": "group", "d": "group"},
		command: []string{"/kind"}, args: []string{"sleep", "defaults"},
		execs:  []string{"echo defaults", "echo shared", "echo kind", "echo group"},
		mounts: map[string]string{"/x/d": "d", "/x/k": "k", "/x/g": "g", "/x/all": "g"},
	}, {
		node: "n3", image: "img:kind",
		env:     map[string]string{"A": "defaults", "B": "kind", "C": "kind", "D": "kind"},
		labels:  map[string]string{"a": "defaults", "b": "kind", "c": "kind", "d": "kind"},
		command: []string{"/kind"}, args: []string{"sleep", "defaults"},
		execs:  []string{"echo defaults", "echo shared", "echo kind"},
		mounts: map[string]string{"/x/d": "d", "/x/k": "k", "/x/all": "k"},
	}} {
		t.Run(tc.node, func(t *testing.T) {
			p := podOf(t, o, tc.node)
			c := p.Spec.Containers[0]
			if c.Image != tc.image || !slices.Equal(c.Command, tc.command) || !slices.Equal(c.Args, tc.args) {
				t.Errorf("image %s command %q args %q, want %s %q %q", c.Image, c.Command, c.Args, tc.image, tc.command, tc.args)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if !strings.HasPrefix(e.Name, "CLAB_") {
					env[e.Name] = e.Value
				}
			}
			if !reflect.DeepEqual(env, tc.env) {
				t.Errorf("env %v, want %v", env, tc.env)
			}
			for k, v := range tc.labels {
				if p.Labels[k] != v {
					t.Errorf("label %s=%q, want %q", k, p.Labels[k], v)
				}
			}
			script := configMapOf(t, o, tc.node+"-exec").Data[execScript]
			var got []string
			for _, line := range strings.Split(script, "\n") {
				if strings.HasPrefix(line, "clab_exec ") {
					_, cmd, _ := strings.Cut(line, `"`)
					cmd, _, _ = strings.Cut(cmd, `"`)
					got = append(got, cmd)
				}
			}
			if !slices.Equal(got, tc.execs) {
				t.Errorf("exec %q, want %q", got, tc.execs)
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				for _, v := range p.Spec.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil && m.SubPath != "" {
						mounts[m.MountPath] = configMapOf(t, o, v.ConfigMap.Name).Data[m.SubPath]
					}
				}
			}
			if !reflect.DeepEqual(mounts, tc.mounts) {
				t.Errorf("bound files %v, want %v", mounts, tc.mounts)
			}
		})
	}
}

// TestKindAndGroupResolution follows containerlab's GetNodeKind and
// GetNodeGroup: the kind from the node, its group, the defaults' group,
// the defaults; the group from the node, its kind, the defaults.
func TestKindAndGroupResolution(t *testing.T) {
	_, o := convert(t, `
name: resolve
topology:
  defaults: {group: dg}
  kinds:
    linux: {group: kg, image: img:kind}
  groups:
    dg: {kind: linux, env: {FROM: dg}}
    kg: {env: {FROM: kg}}
    ng: {kind: linux, env: {FROM: ng}}
  nodes:
    a: {}
    b: {group: ng}
`, nil)
	for node, want := range map[string]string{"a": "kg", "b": "ng"} {
		p := podOf(t, o, node)
		if p.Labels[GroupLabel] != want || p.Labels[KindLabel] != "linux" {
			t.Errorf("%s: group %q kind %q, want group %q, kind linux", node, p.Labels[GroupLabel], p.Labels[KindLabel], want)
		}
		if v := envOf(p)["FROM"]; v != want {
			t.Errorf("%s: env FROM=%q, want the group's %q", node, v, want)
		}
	}
}

func envOf(p corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		m[e.Name] = e.Value
	}
	return m
}

// TestPodFields checks each node setting's place in the pod.
func TestPodFields(t *testing.T) {
	lab, o := convert(t, `
name: fields
topology:
  nodes:
    r1:
      kind: Linux
      image: registry.example/r:1
      image-pull-policy: always
      entrypoint: /bin/sh -c
      cmd: "'echo $(HOME) && sleep infinity' --flag=\"a b\""
      env: {GREETING: "hi $(USER)", EMPTY: ""}
      labels: {team: netops, containerlab: other}
      privileged: false
      cap-add: [NET_ADMIN, cap_sys_admin]
      user: "1000:1001"
      hostname: r-one
      restart-policy: on-failure
    r2:
      kind: linux
      image: alpine
      restart-policy: "no"
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
    - endpoints: ["r1:eth2", "r2:eth2"]
`, nil)
	p := podOf(t, o, "r1")
	c := p.Spec.Containers[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", c.Name, "r1"},
		{"image", c.Image, "registry.example/r:1"},
		{"pull policy", c.ImagePullPolicy, corev1.PullAlways},
		{"command", c.Command, []string{"/bin/sh", "-c"}},
		{"args (kubelet's $(VAR) escaped)", c.Args, []string{"echo $$(HOME) && sleep infinity", "--flag=a b"}},
		{"privileged", c.SecurityContext.Privileged, (*bool)(nil)},
		{"capabilities", c.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}},
		{"uid", *c.SecurityContext.RunAsUser, int64(1000)},
		{"gid", *c.SecurityContext.RunAsGroup, int64(1001)},
		{"hostname", p.Spec.Hostname, "r-one"},
		{"restart policy", p.Spec.RestartPolicy, corev1.RestartPolicyOnFailure},
		{"grace period", *p.Spec.TerminationGracePeriodSeconds, int64(0)},
		{"tty", c.TTY && c.Stdin, true},
		{"no service account token", *p.Spec.AutomountServiceAccountToken, false},
		{"no service links", *p.Spec.EnableServiceLinks, false},
		{"labels", p.Labels, map[string]string{"team": "netops", LabLabel: "fields", NodeLabel: "r1", KindLabel: "linux", GroupLabel: ""}},
		{"env", envOf(p), map[string]string{
			"GREETING": "hi $$(USER)", "EMPTY": "", "CLAB_INTFS": "2",
			"CLAB_LABEL_TEAM": "netops", "CLAB_LABEL_CONTAINERLAB": "fields", "CLAB_LABEL_CLAB_NODE_NAME": "r1",
			"CLAB_LABEL_CLAB_NODE_KIND": "linux", "CLAB_LABEL_CLAB_NODE_GROUP": "",
		}},
		{"r2 restart policy", podOf(t, o, "r2").Spec.RestartPolicy, corev1.RestartPolicyNever},
		{"r2 privileged by default", *podOf(t, o, "r2").Spec.Containers[0].SecurityContext.Privileged, true},
		{"r2 pull policy by default", podOf(t, o, "r2").Spec.Containers[0].ImagePullPolicy, corev1.PullIfNotPresent},
		{"r2 keeps the image's command", podOf(t, o, "r2").Spec.Containers[0].Command, []string(nil)},
	}
	for _, ck := range checks {
		if !reflect.DeepEqual(ck.got, ck.want) {
			t.Errorf("%s = %#v, want %#v", ck.what, ck.got, ck.want)
		}
	}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("env is not sorted: %v", names)
	}
	if !slices.Contains(lab.Ignored, Ignored{Field: "topology.nodes.r1.labels.containerlab", Reason: "containerlab sets this label itself, over the file's"}) {
		t.Errorf("the file's containerlab label is not listed as ignored: %v", lab.Ignored)
	}
}

// TestIgnoredSettings checks that settings without meaning on Kubernetes
// are accepted and listed with why, each once, and that the settings of a
// kind or group no node uses are listed, not refused.
func TestIgnoredSettings(t *testing.T) {
	lab, _ := convert(t, `
name: ignored
prefix: ""
mgmt: {network: custom, ipv4-subnet: 172.100.100.0/24}
settings: {certificate-authority: {key-size: 2048}}
topology:
  kinds:
    nokia_srlinux: {image: ghcr.io/nokia/srlinux, network-mode: host}
  groups:
    spare: {kind: linux, sysctls: {net.ipv4.ip_forward: 1}}
  nodes:
    r1:
      kind: linux
      image: alpine
      mgmt-ipv4: 172.100.100.11
      ports: ["127.0.0.1:8080:80"]
      type: ixrd2
      startup-config: r1.cfg
      image-pull-policy: sometimes
  links:
    - endpoints: ["r1:eth1", "macvlan:ens4"]
      mtu: 9000
      vars: {x: 1}
      labels: {a: b}
      ipv4: ["10.0.0.1/24"]
`, files("r1.cfg", "hostname r1\n"))
	got := map[string]string{}
	for _, ig := range lab.Ignored {
		if _, dup := got[ig.Field]; dup {
			t.Errorf("%s listed twice", ig.Field)
		}
		got[ig.Field] = ig.Reason
	}
	for field, reason := range map[string]string{
		"prefix":                              "pods are named like the nodes",
		"mgmt":                                "cluster network",
		"settings":                            "certificate authority",
		"topology.kinds.nokia_srlinux":        `no node is of kind "nokia_srlinux"`,
		"topology.groups.spare":               `no node is in group "spare"`,
		"topology.nodes.r1.mgmt-ipv4":         "cluster network",
		"topology.nodes.r1.ports[0]":          "the Service's, in the cluster",
		"topology.nodes.r1.type":              "kind linux has no types",
		"topology.nodes.r1.startup-config":    "kind linux applies no startup configuration",
		"topology.nodes.r1.image-pull-policy": "IfNotPresent",
		"topology.links[0].mtu":               "parent NIC's MTU",
		"topology.links[0].vars.x":            "templates",
		"topology.links[0].labels":            "metadata",
		"topology.links[0].ipv4":              "kind linux leaves the interface without one",
	} {
		if !strings.Contains(got[field], reason) {
			t.Errorf("%s: reason %q, want one containing %q", field, got[field], reason)
		}
	}
	if len(got) != 14 {
		t.Errorf("%d ignored settings, want 14: %v", len(got), lab.Ignored)
	}
}

// TestPodName checks how a node's name becomes its pod's.
func TestPodName(t *testing.T) {
	for name, want := range map[string]string{
		"router1": "router1", "xn--a-b": "xn--a-b", // a DNS-1123 label is kept as it is
		"PC1": "pc1", "Spine_1": "spine-1", "leaf.1": "leaf-1", "_r1_": "r1", "R--1": "r--1",
		"__": "", strings.Repeat("A", 64): "",
	} {
		if got := PodName(name); got != want {
			t.Errorf("PodName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestNodeNamesThatAreNotPodNames: containerlab accepts node names with
// capitals and underscores (its own examples have PC1); their pods and
// Topologies are named by PodName, links name the peers' pods, the label
// keeps the node's name, and __clabNodeName__ in a bind or an exec is the
// node's name, as containerlab replaces it.
func TestNodeNamesThatAreNotPodNames(t *testing.T) {
	l, o := convert(t, `
name: caps
topology:
  defaults: {kind: linux, image: alpine}
  nodes:
    PC1:
      binds: ["__clabNodeName__/motd:/etc/motd"]
      exec: ["echo __clabNodeName__"]
    Spine_1: {}
  links:
    - endpoints: ["PC1:eth1", "Spine_1:eth1"]
`, files("PC1/motd", "hello\n"))
	if !slices.Equal(l.Nodes, []string{"pc1", "spine-1"}) {
		t.Errorf("Nodes = %v, want [pc1 spine-1]", l.Nodes)
	}
	pc1, spine := podOf(t, o, "pc1"), podOf(t, o, "spine-1")
	if pc1.Labels[NodeLabel] != "PC1" || spine.Labels[NodeLabel] != "Spine_1" || pc1.Spec.Containers[0].Name != "pc1" {
		t.Errorf("labels %v, %v; container %s", pc1.Labels, spine.Labels, pc1.Spec.Containers[0].Name)
	}
	if ls := topologyOf(t, o, "pc1").Spec.Links; len(ls) != 1 || ls[0].PeerPod != "spine-1" {
		t.Errorf("pc1's links %+v, want one to spine-1", ls)
	}
	if ls := topologyOf(t, o, "spine-1").Spec.Links; len(ls) != 1 || ls[0].PeerPod != "pc1" {
		t.Errorf("spine-1's links %+v, want one to pc1", ls)
	}
	var script string
	for _, cm := range o.ConfigMaps {
		if strings.HasPrefix(cm.Name, "pc1-exec") {
			script = cm.Data[execScript]
		}
	}
	if !strings.Contains(script, "echo PC1") {
		t.Errorf("exec script does not echo the node's name PC1:\n%s", script)
	}
}

// TestContainerSettings: memory and cpu become the container's limits,
// healthcheck its readiness probe (docker's defaults for what is unset),
// dns the pod's DNS (servers replace the cluster's); each is inherited
// whole along the chain.
func TestContainerSettings(t *testing.T) {
	_, o := convert(t, `
name: container
topology:
  defaults:
    kind: linux
    image: alpine
    healthcheck: {test: [CMD-SHELL, "ip link show eth1"], interval: 2}
  nodes:
    r1:
      memory: 512mb
      cpu: 1.5
      dns: {servers: [192.0.2.53], search: [lab.example], options: ["ndots:2"]}
    r2:
      memory: 1Gib
      healthcheck: {test: [CMD, vtysh, -c, show version], start-period: 5, timeout: 3, retries: 10}
      dns: {search: [lab.example]}
`, nil)
	r1, r2 := podOf(t, o, "r1"), podOf(t, o, "r2")
	if got := r1.Spec.Containers[0].Resources.Limits; got.Memory().Value() != 512<<20 || got.Cpu().MilliValue() != 1500 {
		t.Errorf("r1 limits %v, want 512Mi and 1500m", got)
	}
	if got := r2.Spec.Containers[0].Resources.Limits; got.Memory().Value() != 1<<30 || !got.Cpu().IsZero() {
		t.Errorf("r2 limits %v, want 1Gi and no cpu", got)
	}
	if p := r1.Spec.Containers[0].ReadinessProbe; p == nil || !slices.Equal(p.Exec.Command, []string{"/bin/sh", "-c", "ip link show eth1"}) ||
		p.PeriodSeconds != 2 || p.TimeoutSeconds != 30 || p.FailureThreshold != 3 || p.InitialDelaySeconds != 0 {
		t.Errorf("r1 readiness %+v, want the defaults' shell test every 2 s", p)
	}
	if p := r2.Spec.Containers[0].ReadinessProbe; p == nil || !slices.Equal(p.Exec.Command, []string{"vtysh", "-c", "show version"}) ||
		p.PeriodSeconds != 30 || p.TimeoutSeconds != 3 || p.FailureThreshold != 10 || p.InitialDelaySeconds != 5 {
		t.Errorf("r2 readiness %+v, want its own", p)
	}
	if r1.Spec.DNSPolicy != corev1.DNSNone || r1.Spec.DNSConfig == nil || !slices.Equal(r1.Spec.DNSConfig.Nameservers, []string{"192.0.2.53"}) ||
		len(r1.Spec.DNSConfig.Options) != 1 || r1.Spec.DNSConfig.Options[0].Name != "ndots" || *r1.Spec.DNSConfig.Options[0].Value != "2" {
		t.Errorf("r1 dns %s %+v, want None with its server", r1.Spec.DNSPolicy, r1.Spec.DNSConfig)
	}
	if r2.Spec.DNSPolicy != corev1.DNSClusterFirst || !slices.Equal(r2.Spec.DNSConfig.Searches, []string{"lab.example"}) {
		t.Errorf("r2 dns %s %+v, want the cluster's and a search domain", r2.Spec.DNSPolicy, r2.Spec.DNSConfig)
	}
	for _, c := range []struct{ setting, want string }{
		{"memory: lots", `topology.nodes.r1.memory: "lots": want a size`},
		{"cpu: 0", `topology.nodes.r1.cpu: "0": want a number of CPUs`},
		{"healthcheck: {test: [curl, x]}", "topology.nodes.r1.healthcheck.test"},
		{"healthcheck: {test: [CMD, x], every: 2}", `topology.nodes.r1.healthcheck: want test`},
		{"dns: {servers: [a, b, c, d]}", "topology.nodes.r1.dns: 4 servers"},
	} {
		_, err := Parse([]byte("name: x\ntopology:\n  nodes:\n    r1:\n      kind: linux\n      image: a\n      "+c.setting+"\n"), files(), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.setting, err, c.want)
		}
	}
}

// TestPorts: a node's ports become the ports of a Service named like its
// pod, selecting it; a bad one is refused naming it.
func TestPorts(t *testing.T) {
	_, o := convert(t, `
name: ports
topology:
  nodes:
    Web_1: {kind: linux, image: nginx, ports: ["8080:80", "53:53/udp", "9000"]}
    r2: {kind: linux, image: alpine}
`, nil)
	if len(o.Services) != 1 {
		t.Fatalf("services %+v, want web-1's", o.Services)
	}
	svc := o.Services[0]
	if svc.Name != "web-1" || svc.Spec.Selector[NodeLabel] != "Web_1" || svc.Spec.Selector[LabLabel] != "ports" {
		t.Errorf("service %s selecting %v", svc.Name, svc.Spec.Selector)
	}
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, fmt.Sprintf("%s %d->%s", p.Protocol, p.Port, p.TargetPort.String()))
	}
	if want := []string{"TCP 8080->80", "UDP 53->53", "TCP 9000->9000"}; !slices.Equal(got, want) {
		t.Errorf("ports %v, want %v", got, want)
	}
	for _, c := range []struct{ ports, want string }{
		{`["80:http"]`, `topology.nodes.r1.ports[0]: "80:http": ports are numbers`},
		{`["80:80/icmp"]`, `protocol "icmp"`},
		{`["8000-8010:80"]`, `ports are numbers`},
	} {
		_, err := Parse([]byte("name: x\ntopology:\n  nodes:\n    r1: {kind: linux, image: a, ports: "+c.ports+"}\n"), files(), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ports %s: %v, want an error naming %q", c.ports, err, c.want)
		}
	}
}
