package clabfile

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// node1 is a lab of one node r1 with the given settings (indented for
// topology.nodes.r1) and links.
func node1(settings, links string) string {
	s := "name: lab1\ntopology:\n  nodes:\n    r1:\n      kind: linux\n      image: alpine\n" + settings +
		"    r2:\n      kind: linux\n      image: alpine\n"
	if links != "" {
		s += "  links:\n" + links
	}
	return s
}

// TestRefusals has a case for every refusal: the error must name the
// field and the node (in the field's path, the value, or "(node x)" for
// an inherited setting), and say why.
func TestRefusals(t *testing.T) {
	dir := files("daemons", "x", "conf/a", "a", "empty/.keep", "")
	dir["big"] = &fstest.MapFile{Data: make([]byte, MaxBindBytes+1)}
	dir["bigdir/a"] = &fstest.MapFile{Data: make([]byte, MaxBindBytes/2+1)}
	dir["bigdir/b"] = &fstest.MapFile{Data: make([]byte, MaxBindBytes/2+1)}
	dir["hollow"] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
	dir["dev"] = &fstest.MapFile{Mode: fs.ModeDevice}
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		// The file as a whole.
		{"template", "name: {{ .name }}\n", []string{"template", "render it"}},
		{"unclosed variable", "name: ${NAME\n", []string{"line 1", "no closing brace"}},
		{"unknown expansion", "name: ${NAME/a/b}\n", []string{"line 1", "unsupported expansion"}},
		{"bad yaml", "name: [\n", []string{"read containerlab file"}},
		{"duplicate key", "name: a\nname: b\n", []string{"read containerlab file"}},
		{"empty", "", []string{"empty"}},
		{"not a mapping", "- a\n", []string{"want a mapping"}},
		{"unknown top key", "name: a\nlab: x\ntopology: {nodes: {r1: {kind: linux, image: a}}}\n", []string{"lab: unknown key"}},
		{"no name", "topology: {nodes: {r1: {kind: linux, image: a}}}\n", []string{"name: missing"}},
		{"name not a label value", "name: my lab\ntopology: {nodes: {r1: {kind: linux, image: a}}}\n", []string{`name: "my lab"`, "label value"}},
		{"no topology", "name: a\n", []string{"topology: missing"}},
		{"topology not a mapping", "name: a\ntopology: [1]\n", []string{"topology: want a mapping"}},
		{"unknown topology key", "name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, node: {}}\n", []string{"topology.node: unknown key"}},
		{"no nodes", "name: a\ntopology: {links: []}\n", []string{"topology.nodes: missing or empty"}},

		// Definitions.
		{"node not a mapping", "name: a\ntopology: {nodes: {r1: [1]}}\n", []string{"topology.nodes.r1: want a mapping"}},
		{"unknown setting", node1("      imagee: x\n", ""), []string{"topology.nodes.r1.imagee: unknown setting"}},
		{"refused setting", node1("      network-mode: host\n", ""), []string{"topology.nodes.r1.network-mode: not supported", "own network namespace"}},
		{"refused setting of a group", "name: a\ntopology:\n  groups: {g: {sysctls: {a: 1}}}\n  nodes: {r1: {kind: linux, image: a, group: g}, r2: {kind: linux, image: a, group: g}}\n",
			[]string{"topology.groups.g.sysctls (nodes r1, r2): not supported"}},
		{"privileged not a bool", node1("      privileged: yes please\n", ""), []string{"topology.nodes.r1.privileged: want true or false"}},
		{"list not a list", node1("      exec: ip link\n", ""), []string{"topology.nodes.r1.exec: want a list of strings"}},
		{"list element not a string", node1("      exec: [[a]]\n", ""), []string{"topology.nodes.r1.exec[0]: want a string"}},
		{"map not a map", node1("      env: [A]\n", ""), []string{"topology.nodes.r1.env: want a mapping"}},
		{"map value not a string", node1("      env: {A: [1]}\n", ""), []string{"topology.nodes.r1.env.A: want a string"}},
		{"string not a string", node1("      cmd: [a]\n", ""), []string{"topology.nodes.r1.cmd: want a string"}},

		// Nodes.
		{"two nodes, one pod name", "name: a\ntopology: {nodes: {PC1: {kind: linux, image: a}, pc1: {kind: linux, image: a}}}\n", []string{`topology.nodes.pc1: "pc1" names pod pc1, as node "PC1" does`}},
		{"node name that no pod name is", "name: a\ntopology: {nodes: {__: {kind: linux, image: a}}}\n", []string{`topology.nodes.__: "__" cannot name a pod`, "DNS-1123"}},
		{"node named localhost", "name: a\ntopology: {nodes: {localhost: {kind: linux, image: a}}}\n", []string{`topology.nodes.localhost: "localhost"`, "NIC"}},
		{"no kind", "name: a\ntopology: {nodes: {r1: {image: a}}}\n", []string{"topology.nodes.r1.kind: missing"}},
		{"network OS kind", "name: a\ntopology: {nodes: {r1: {kind: nokia_srlinux, image: a}}}\n", []string{`topology.nodes.r1: kind "nokia_srlinux" (topology.nodes.r1.kind): not supported`, "only kinds linux, bridge and ovs-bridge"}},
		{"host kind from defaults", "name: a\ntopology: {defaults: {kind: host}, nodes: {h1: {image: a}}}\n", []string{`topology.nodes.h1: kind "host" (topology.defaults.kind): not supported`, "containerlab host"}},
		{"no image", "name: a\ntopology: {nodes: {r1: {kind: linux}}}\n", []string{"topology.nodes.r1.image: missing"}},
		{"cmd with an open quote", node1("      cmd: sh -c 'echo\n", ""), []string{`topology.nodes.r1.cmd: "sh -c 'echo"`, "quote is not closed"}},
		{"entrypoint ends with a backslash", node1("      entrypoint: 'a \\'\n", ""), []string{"topology.nodes.r1.entrypoint", "backslash"}},
		{"inherited cmd names the node", "name: a\ntopology: {groups: {g: {cmd: \"'\"}}, nodes: {r1: {kind: linux, image: a, group: g}}}\n", []string{"topology.groups.g.cmd (node r1)"}},
		{"restart policy", node1("      restart-policy: sometimes\n", ""), []string{`topology.nodes.r1.restart-policy: "sometimes"`}},
		{"hostname", node1("      hostname: R_1\n", ""), []string{`topology.nodes.r1.hostname: "R_1"`, "DNS-1123"}},
		{"user name", node1("      user: frr\n", ""), []string{`topology.nodes.r1.user: "frr"`, "numeric uid"}},
		{"group name", node1("      user: 0:wheel\n", ""), []string{`topology.nodes.r1.user: "0:wheel"`, "group name"}},
		{"import envs", node1("      env: {__IMPORT_ENVS: true}\n", ""), []string{"topology.nodes.r1.env.__IMPORT_ENVS: not supported"}},
		{"env name", node1("      env: {\"A=B\": x}\n", ""), []string{`topology.nodes.r1.env.A=B: "A=B" is not an environment variable name`}},
		{"label", node1("      labels: {\"a b\": x}\n", ""), []string{`topology.nodes.r1.labels.a b`, "not a Kubernetes label"}},
		{"startup-config missing", node1("      startup-config: r1.cfg\n", ""), []string{`topology.nodes.r1.startup-config: "r1.cfg": no such file`}},

		// Binds.
		{"bind without a container path", node1("      binds: [daemons]\n", ""), []string{`topology.nodes.r1.binds[0]: "daemons": no container path`}},
		{"bind with four parts", node1("      binds: [\"a:b:ro:x\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "a:b:ro:x"`}},
		{"bind mode", node1("      binds: [\"daemons:/etc/d:shared\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "daemons:/etc/d:shared": mode "shared"`}},
		{"relative container path", node1("      binds: [\"daemons:etc/d\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "daemons:etc/d": container path "etc/d" is not absolute`}},
		{"bind over root", node1("      binds: [\"conf:/\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "conf:/"`, "root"}},
		{"bind over meshnet's files", node1("      binds: [\"daemons:/run/meshnet-clab/exec/exec.sh\"]\n", ""), []string{`topology.nodes.r1.binds[0]`, "/run/meshnet-clab"}},
		{"empty source", node1("      binds: [\":/etc/d\"]\n", ""), []string{`topology.nodes.r1.binds[0]: ":/etc/d": no source path`}},
		{"home path", node1("      binds: [\"~/lab/d:/etc/d\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "~/lab/d:/etc/d"`, "home directory"}},
		{"absolute host path", node1("      binds: [\"daemons:/etc/d\", \"conf:/conf\", \"/lib/modules:/lib/modules:ro\"]\n", ""),
			[]string{`topology.nodes.r1.binds[2]: "/lib/modules:/lib/modules:ro": not supported: an absolute path on the containerlab host`}},
		{"outside the lab directory", node1("      binds: [\"../shared/d:/etc/d\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "../shared/d:/etc/d"`, "outside the lab file's directory"}},
		{"containerlab's lab directory", node1("      binds: [\"__clabDir__/ansible-inventory.yml:/inv.yml\"]\n", ""), []string{`topology.nodes.r1.binds[0]`, "clab-lab1 is containerlab's lab directory"}},
		{"node directory", node1("      binds: [\"__clabNodeDir__/cfg:/cfg\"]\n", ""), []string{`topology.nodes.r1.binds[0]`, "containerlab's lab directory"}},
		{"missing file", node1("      binds: [\"nope.conf:/etc/nope.conf\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "nope.conf:/etc/nope.conf": nope.conf: no such file`}},
		{"file over 1 MiB", node1("      binds: [\"big:/big\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "big:/big": file big is 1048577 bytes`, "1 MiB"}},
		{"directory over 1 MiB", node1("      binds: [\"bigdir:/big\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "bigdir:/big": directory bigdir holds more than`}},
		{"empty directory", node1("      binds: [\"hollow:/out\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "hollow:/out": directory hollow is empty`}},
		{"special file", node1("      binds: [\"dev:/dev/x\"]\n", ""), []string{`topology.nodes.r1.binds[0]: "dev:/dev/x": dev is not a regular file`}},
		{"inherited bind names the node", "name: a\ntopology: {defaults: {binds: [\"/etc/hosts:/etc/hosts\"]}, nodes: {r1: {kind: linux, image: a}}}\n",
			[]string{`topology.defaults.binds[0] (node r1): "/etc/hosts:/etc/hosts": not supported`}},

		// Exec.
		{"exec with an open quote", node1("      exec: [\"sh -c 'ip link\"]\n", ""), []string{`topology.nodes.r1.exec[0]: "sh -c 'ip link"`, "quote"}},
		{"empty exec", node1("      exec: [\"  \"]\n", ""), []string{`topology.nodes.r1.exec[0]: "  ": empty command`}},
		{"exec naming the lab directory", node1("      exec: [\"cat __clabDir__/x\"]\n", ""), []string{`topology.nodes.r1.exec[0]`, "lab directory on its host"}},

		// Links.
		{"links not a list", node1("", "    a: b\n"), []string{"topology.links: want a list"}},
		{"link not a mapping", node1("", "    - r1:eth1\n"), []string{"topology.links[0]: want a mapping"}},
		{"host link", node1("", "    - type: host\n      endpoint: {node: r1, interface: eth1}\n      host-interface: r1-eth1\n"), []string{`topology.links[0].type: "host": not supported`, "host's own network namespace"}},
		{"brief host link", node1("", "    - endpoints: [\"r1:eth1\", \"host:r1-eth1\"]\n"), []string{`topology.links[0].endpoints[1]: "host:r1-eth1": not supported: a host link`}},
		{"brief mgmt-net link", node1("", "    - endpoints: [\"mgmt-net:r1-eth1\", \"r1:eth1\"]\n"), []string{`topology.links[0].endpoints[0]: "mgmt-net:r1-eth1": not supported: a mgmt-net link`}},
		{"vxlan link without a vni", node1("", "    - type: vxlan\n      endpoint: {node: r1, interface: eth1}\n      remote: 10.0.0.1\n"), []string{`topology.links[0].vni: want the VXLAN network identifier`}},
		{"vxlan link to no address", node1("", "    - type: vxlan-stitch\n      endpoint: {node: r1, interface: eth1}\n      remote: vtep1\n      vni: 100\n"), []string{`topology.links[0].link_options.remote_vtep: "vtep1" is not an IP address`}},
		{"vxlan link with vni 0", node1("", "    - type: vxlan\n      endpoint: {node: r1, interface: eth1}\n      remote: 10.0.0.1\n      vni: 0\n"), []string{`topology.links[0].link_options.vni: 0 is outside`}},
		{"veth-stitch link", node1("", "    - type: veth-stitch\n"), []string{`topology.links[0].type: "veth-stitch": not supported`}},
		{"dummy link", node1("", "    - type: dummy\n      endpoint: {node: r1, interface: dummy0}\n"), []string{`topology.links[0].type: "dummy": not supported`}},
		{"unknown link type", node1("", "    - type: wire\n"), []string{`topology.links[0].type: "wire": unknown link type`}},
		{"unknown link key", node1("", "    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      delay: 5ms\n"), []string{"topology.links[0].delay: unknown key"}},
		{"one end", node1("", "    - endpoints: [\"r1:eth1\"]\n"), []string{"topology.links[0].endpoints: want two ends"}},
		{"end without an interface", node1("", "    - endpoints: [\"r1\", \"r2:eth1\"]\n"), []string{`topology.links[0].endpoints[0]: "r1": want node:interface`}},
		{"unknown node", node1("", "    - endpoints: [\"r1:eth1\", \"r9:eth1\"]\n"), []string{`topology.links[0].endpoints[1]: "r9:eth1": no node r9 in topology.nodes`}},
		{"extended with one end", node1("", "    - type: veth\n      endpoints: [{node: r1, interface: eth1}]\n"), []string{"topology.links[0].endpoints: want two ends"}},
		{"extended end not a mapping", node1("", "    - type: veth\n      endpoints: [\"r1:eth1\", \"r2:eth1\"]\n"), []string{"topology.links[0].endpoints[0]: want a mapping"}},
		{"extended end without node", node1("", "    - type: veth\n      endpoints: [{interface: eth1}, {node: r2, interface: eth1}]\n"), []string{"topology.links[0].endpoints[0].node: missing"}},
		{"mac address", node1("", "    - type: veth\n      endpoints: [{node: r1, interface: eth1, mac: \"aa:c1:ab:00:00:01\"}, {node: r2, interface: eth1}]\n"), []string{"topology.links[0].endpoints[0].mac: not supported"}},
		{"unknown end key", node1("", "    - type: veth\n      endpoints: [{node: r1, interface: eth1, vlan: 3}, {node: r2, interface: eth1}]\n"), []string{"topology.links[0].endpoints[0].vlan: unknown key"}},
		{"macvlan without NIC", node1("", "    - type: macvlan\n      endpoint: {node: r1, interface: eth1}\n"), []string{"topology.links[0].host-interface: missing"}},
		{"macvlan mode", node1("", "    - type: macvlan\n      endpoint: {node: r1, interface: eth1}\n      host-interface: ens4\n      mode: vepa\n"), []string{`topology.links[0].mode: "vepa": not supported`, "bridge"}},
		{"mtu not a number", node1("", "    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      mtu: big\n"), []string{"topology.links[0].mtu: want a whole number"}},
		{"mtu out of range", node1("", "    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      mtu: 70000\n"), []string{"topology.links[0].mtu: 70000 is outside 68..65535"}},
		{"eth0", node1("", "    - endpoints: [\"r1:eth0\", \"r2:eth1\"]\n"), []string{`topology.links[0].endpoints[0]: "r1:eth0": eth0 is the pod's own`}},
		{"interface name too long", node1("", "    - endpoints: [\"r1:ethernet-1-1-long\", \"r2:eth1\"]\n"), []string{`topology.links[0].endpoints[0]: "r1:ethernet-1-1-long"`, "longer than 15"}},
		{"interface name with a colon", node1("", "    - endpoints: [\"r1:e1:1\", \"r2:eth1\"]\n"), []string{`topology.links[0].endpoints[0]: "r1:e1:1"`, "colon"}},
		{"linked to itself", node1("", "    - endpoints: [\"r1:eth1\", \"r1:eth2\"]\n"), []string{"topology.links[0].endpoints: r1 is linked to itself"}},
		{"interface used twice", node1("", "    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n    - type: veth\n      endpoints: [{node: r2, interface: eth2}, {node: r1, interface: eth1}]\n"),
			[]string{`topology.links[1].endpoints[1]: "r1:eth1": r1 already has eth1 at topology.links[0].endpoints[0]`}},
		{"macvlan NIC twice on one pod is fine, interface twice is not", node1("", "    - endpoints: [\"r1:eth1\", \"macvlan:ens4\"]\n    - type: macvlan\n      endpoint: {node: r1, interface: eth1}\n      host-interface: ens4\n"),
			[]string{`topology.links[1].endpoint: "r1:eth1": r1 already has eth1 at topology.links[0].endpoints[0]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file), dir, nil)
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestRefusedNodeSettings checks each setting fields.go refuses: named
// with its node, with the reason.
func TestRefusedNodeSettings(t *testing.T) {
	for key, r := range nodeFields {
		if r.how != refused {
			continue
		}
		t.Run(key, func(t *testing.T) {
			_, err := Parse([]byte(node1("      "+key+": x\n", "")), nil, nil)
			want := "topology.nodes.r1." + key + ": not supported: " + r.reason
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want one containing %q", err, want)
			}
		})
	}
}

// TestEveryProblemReported checks that Parse goes on after the first
// problem, through nodes, binds, exec and links.
func TestEveryProblemReported(t *testing.T) {
	_, err := Parse([]byte(`
name: many
topology:
  nodes:
    r1: {kind: srl, image: a}
    r2: {kind: linux, image: a, binds: ["/lib/modules:/lib/modules:ro"], exec: ["'"]}
    R3: {kind: linux, image: a}
    r3: {kind: linux, image: a}
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
      mtu: 20
    - endpoints: ["r2:eth2", "r3:eth1"]
    - endpoints: ["r2:eth3", "r9:eth1"]
`), files(), nil)
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, w := range []string{
		`topology.nodes.r1: kind "srl"`,
		`topology.nodes.r2.binds[0]: "/lib/modules:/lib/modules:ro"`,
		`topology.nodes.r2.exec[0]`,
		`topology.nodes.r3: "r3" names pod r3, as node "R3" does`,
		"topology.links[0].mtu: 20 is outside 68..65535",
		`topology.links[2].endpoints[1]: "r9:eth1": no node r9`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %s:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "topology.links[1]") {
		t.Errorf("a link to r3, refused at the node, is refused again:\n%v", err)
	}
}
