package topofile

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func TestParseAndConvert(t *testing.T) {
	down := v1beta1.LinkDown
	for _, tc := range []struct {
		name    string
		file    string
		pods    []string
		ignored []string
		want    map[string][]v1beta1.Link
	}{{
		name:    "k8s-topo file with its own settings",
		file:    "etcd_port: 32379\nconf_dir: ./config\nlinks:\n  - endpoints: [\"sw-1:eth1\", \"sw-2:eth1\"]\n",
		pods:    []string{"sw-1", "sw-2"},
		ignored: []string{"conf_dir", "etcd_port"},
		want: map[string][]v1beta1.Link{
			"sw-1": {{UID: 0, PeerPod: "sw-2", LocalIntf: "eth1", PeerIntf: "eth1"}},
			"sw-2": {{UID: 0, PeerPod: "sw-1", LocalIntf: "eth1", PeerIntf: "eth1"}},
		},
	}, {
		name: "uids are link indexes; extensions go to both ends",
		file: `
links:
  - endpoints: ["r1:eth1:10.0.0.1/30", "r2:eth1:10.0.0.2/30"]
  - endpoints: ["r2:eth2:2001:db8::1/64", "r3:eth1:2001:db8::2/64"]
    mtu: 9000
    state: down
    netem: {delay: 10ms, jitter: 1ms, loss: "0.5%", rate: 100mbit}
`,
		pods: []string{"r1", "r2", "r3"},
		want: map[string][]v1beta1.Link{
			"r1": {{UID: 0, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth1", LocalIP: "10.0.0.1/30", PeerIP: "10.0.0.2/30"}},
			"r2": {
				{UID: 0, PeerPod: "r1", LocalIntf: "eth1", PeerIntf: "eth1", LocalIP: "10.0.0.2/30", PeerIP: "10.0.0.1/30"},
				{UID: 1, PeerPod: "r3", LocalIntf: "eth2", PeerIntf: "eth1", LocalIP: "2001:db8::1/64", PeerIP: "2001:db8::2/64",
					MTU: ptr.To[int32](9000), State: &down, Netem: &v1beta1.Netem{
						Delay: ptr.To[v1beta1.Duration]("10ms"), Jitter: ptr.To[v1beta1.Duration]("1ms"),
						Loss: ptr.To[v1beta1.Percent]("0.5%"), Rate: ptr.To[v1beta1.Rate]("100mbit")}},
			},
			"r3": {{UID: 1, PeerPod: "r2", LocalIntf: "eth1", PeerIntf: "eth2", LocalIP: "2001:db8::2/64", PeerIP: "2001:db8::1/64",
				MTU: ptr.To[int32](9000), State: &down, Netem: &v1beta1.Netem{
					Delay: ptr.To[v1beta1.Duration]("10ms"), Jitter: ptr.To[v1beta1.Duration]("1ms"),
					Loss: ptr.To[v1beta1.Percent]("0.5%"), Rate: ptr.To[v1beta1.Rate]("100mbit")}}},
		},
	}, {
		name: "physical peer and host NIC have only the pod's end",
		file: `
links:
  - endpoints: ["r1:eth1:10.0.1.1/30", "phy1:xe-0:10.0.1.2/30"]
    link_options: {remote_vtep: 10.250.0.200, vni: 5001, udp_port: 8472}
    mtu: 1400
  - endpoints: ["localhost:ens4", "r1:eth2"]
  - endpoints: ["r2:eth1", "localhost:ens4"]
`,
		pods: []string{"r1", "r2"},
		want: map[string][]v1beta1.Link{
			"r1": {
				{UID: 0, PeerPod: "phy1", LocalIntf: "eth1", PeerIntf: "xe-0", LocalIP: "10.0.1.1/30", PeerIP: "10.0.1.2/30", MTU: ptr.To[int32](1400),
					LinkOptions: &v1beta1.LinkOptions{RemoteVTEP: "10.250.0.200", VNI: 5001, UDPPort: ptr.To[int32](8472)}},
				{UID: 1, PeerPod: "localhost", LocalIntf: "eth2", PeerIntf: "ens4"},
			},
			"r2": {{UID: 2, PeerPod: "localhost", LocalIntf: "eth1", PeerIntf: "ens4"}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Pods(); !slices.Equal(got, tc.pods) {
				t.Errorf("Pods() = %v, want %v", got, tc.pods)
			}
			if !slices.Equal(f.Ignored, tc.ignored) {
				t.Errorf("Ignored = %v, want %v", f.Ignored, tc.ignored)
			}
			topos, err := f.Topologies("lab")
			if err != nil {
				t.Fatal(err)
			}
			if len(topos) != len(tc.want) {
				t.Fatalf("got %d topologies, want %d", len(topos), len(tc.want))
			}
			for i, topo := range topos {
				if topo.Name != tc.pods[i] || topo.Namespace != "lab" || topo.APIVersion != "networkop.co.uk/v1beta1" || topo.Kind != "Topology" {
					t.Errorf("topology %d: %s %s/%s, want %s lab/%s", i, topo.APIVersion, topo.Namespace, topo.Name, topo.Kind, tc.pods[i])
				}
				if !reflect.DeepEqual(topo.Spec.Links, tc.want[topo.Name]) {
					t.Errorf("%s links:\n got %+v\nwant %+v", topo.Name, topo.Spec.Links, tc.want[topo.Name])
				}
			}
		})
	}
}

func TestTopologiesDoNotShareExtensions(t *testing.T) {
	f, err := Parse([]byte("links:\n  - endpoints: [\"a:e1\", \"b:e1\"]\n    netem: {delay: 1ms}\n    mtu: 1500\n"))
	if err != nil {
		t.Fatal(err)
	}
	topos, err := f.Topologies("default")
	if err != nil {
		t.Fatal(err)
	}
	*topos[0].Spec.Links[0].Netem.Delay = "2ms"
	*topos[0].Spec.Links[0].MTU = 9000
	if b := topos[1].Spec.Links[0]; *b.Netem.Delay != "1ms" || *b.MTU != 1500 {
		t.Errorf("changing one end changed the other: %+v", b)
	}
}

func TestPhysicalPeers(t *testing.T) {
	f, err := Parse([]byte(`
links:
  - endpoints: ["r1:eth1", "r2:eth1"]
  - endpoints: ["r2:eth2:10.0.1.1/30", "phy1:eth1:10.0.1.2/30"]
    link_options: {remote_vtep: 10.250.0.200, vni: 5001}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []PhysicalPeer{{
		UID: 1, Pod: Endpoint{"r2", "eth2", "10.0.1.1/30"}, Device: Endpoint{"phy1", "eth1", "10.0.1.2/30"},
		RemoteVTEP: netip.MustParseAddr("10.250.0.200"), VNI: 5001, UDPPort: 4789,
	}}
	if got := f.PhysicalPeers(); !reflect.DeepEqual(got, want) {
		t.Errorf("PhysicalPeers() = %+v, want %+v", got, want)
	}
	if got := f.Pods(); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("Pods() = %v: a physical device is not a pod", got)
	}
}

// TestParseErrorsNameThePlace has a case for every check: the error must
// name the field, and say what is wrong.
func TestParseErrorsNameThePlace(t *testing.T) {
	link := func(body string) string { return "links:\n  - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n" + body }
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"empty file", "", []string{"empty"}},
		{"not a mapping", "- a\n- b\n", []string{"mapping"}},
		{"bad yaml", "links: [\n", []string{"read topology file"}},
		{"duplicate key", "links: []\nlinks: []\n", []string{"read topology file"}},
		{"no links", "etcd_port: 1\n", []string{"links: missing"}},
		{"empty links", "links: []\n", []string{"links: empty"}},
		{"links not a list", "links: {a: b}\n", []string{"links: want a list"}},
		{"unknown top-level key", "foo: 1\nlinks:\n  - endpoints: [\"a:e1\", \"b:e1\"]\n", []string{"foo: unknown key", "ignored"}},
		{"link not a mapping", "links: [\"a:e1\"]\n", []string{"links[0]: want a mapping"}},
		{"unknown link key", link("    mtuu: 9000\n"), []string{`links[0]: unknown key "mtuu"`}},
		{"no endpoints", "links:\n  - mtu: 1500\n", []string{"links[0].endpoints: missing"}},
		{"endpoints not strings", "links:\n  - endpoints: [1, 2]\n", []string{"links[0].endpoints: want a list of two strings"}},
		{"one endpoint", "links:\n  - endpoints: [\"r1:eth1\"]\n", []string{"links[0].endpoints: got 1, want 2"}},
		{"three endpoints", "links:\n  - endpoints: [\"a:e1\", \"b:e1\", \"c:e1\"]\n", []string{"links[0].endpoints: got 3, want 2"}},
		{"no interface", "links:\n  - endpoints: [\"r1\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "r1": want name:interface`}},
		{"empty name", "links:\n  - endpoints: [\"r1:eth1\", \":eth1\"]\n", []string{`links[0].endpoints[1]: ":eth1": empty name`}},
		{"empty interface", "links:\n  - endpoints: [\"r1:\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "r1:": empty interface name`}},
		{"long interface", "links:\n  - endpoints: [\"r1:ethernet12345678\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "r1:ethernet12345678": interface name "ethernet12345678" is longer than 15`}},
		{"slash in interface", "links:\n  - endpoints: [\"r1:ge-0/0/0\", \"r2:eth1\"]\n", []string{"links[0].endpoints[0]", "slash"}},
		{"eth0", "links:\n  - endpoints: [\"r1:eth0\", \"r2:eth1\"]\n", []string{"links[0].endpoints[0]", "eth0 is the pod's own"}},
		{"bad pod name", "links:\n  - endpoints: [\"R1:eth1\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "R1:eth1": pod name "R1"`}},
		{"bad prefix length", "links:\n  - endpoints: [\"r1:eth1:10.0.0.1/33\", \"r2:eth1:10.0.0.2/24\"]\n", []string{`links[0].endpoints[0]: "r1:eth1:10.0.0.1/33": bad prefix length`}},
		{"no prefix length", "links:\n  - endpoints: [\"r1:eth1:10.0.0.1\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "r1:eth1:10.0.0.1": want an address in CIDR notation`}},
		{"not an address", "links:\n  - endpoints: [\"r1:eth1\", \"r2:eth1:10.0.0/24\"]\n", []string{`links[0].endpoints[1]: "r2:eth1:10.0.0/24": "10.0.0" is not an IP address`}},
		{"empty address", "links:\n  - endpoints: [\"r1:eth1:\", \"r2:eth1\"]\n", []string{`links[0].endpoints[0]: "r1:eth1:": empty address`}},
		{"mixed families", "links:\n  - endpoints: [\"r1:eth1:10.0.0.1/24\", \"r2:eth1:2001:db8::2/64\"]\n", []string{"links[0].endpoints: 10.0.0.1/24 and 2001:db8::2/64 are not of one address family"}},
		{"same address", "links:\n  - endpoints: [\"r1:eth1:10.0.0.1/24\", \"r2:eth1:10.0.0.1/24\"]\n", []string{"links[0].endpoints: both ends have the address 10.0.0.1"}},
		{"different subnets", "links:\n  - endpoints: [\"r1:eth1:10.0.0.1/30\", \"r2:eth1:10.0.0.5/30\"]\n", []string{"links[0].endpoints: 10.0.0.1/30 and 10.0.0.5/30 are not in one subnet"}},
		{"linked to itself", "links:\n  - endpoints: [\"r1:eth1\", \"r1:eth2\"]\n", []string{"links[0].endpoints: r1 is linked to itself"}},
		{"two localhosts", "links:\n  - endpoints: [\"localhost:eth1\", \"localhost:eth2\"]\n", []string{"links[0].endpoints: both ends are localhost"}},
		{"address on localhost", "links:\n  - endpoints: [\"r1:eth1\", \"localhost:ens4:10.0.0.1/24\"]\n", []string{"links[0].endpoints[1]", "takes no address"}},
		{"duplicate interface", "links:\n  - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n  - endpoints: [\"r3:eth1\", \"r1:eth1\"]\n", []string{`links[1].endpoints[1]: "r1:eth1": r1 already has eth1 at links[0].endpoints[0]`}},
		{"mtu too small", link("    mtu: 60\n"), []string{"links[0].mtu: 60 is outside 68..65535"}},
		{"mtu not a number", link("    mtu: big\n"), []string{"links[0].mtu: got a string, want a whole number"}},
		{"bad state", link("    state: broken\n"), []string{`links[0].state: "broken", want up or down`}},
		{"state not a string", link("    state: true\n"), []string{"links[0].state: got a bool, want a string"}},
		{"unknown netem field", link("    netem: {delay: 1ms, lag: 2ms}\n"), []string{"links[0].netem", `unknown field "lag"`}},
		{"netem number for a percentage", link("    netem: {loss: 0.5}\n"), []string{"links[0].netem.loss: got a number, want a string"}},
		{"bad delay", link("    netem: {delay: -5ms}\n"), []string{`links[0].netem.delay: "-5ms" is not a duration like "50ms"`}},
		{"jitter over the cap", link("    netem: {delay: 1s, jitter: 3s}\n"), []string{`links[0].netem.jitter: 3s exceeds the kernel's cap of 2.147483647s`}},
		{"jitter without delay", link("    netem: {jitter: 1ms}\n"), []string{"links[0].netem.jitter: needs delay"}},
		{"bad percentage", link("    netem: {loss: \"101%\"}\n"), []string{`links[0].netem.loss: "101%" is not a percentage from 0 to 100`}},
		{"bad rate", link("    netem: {rate: fast}\n"), []string{`links[0].netem.rate: "fast" is not a rate like "100mbit"`}},
		{"bad distribution", link("    netem: {delay: 1ms, jitter: 1ms, distribution: flat}\n"), []string{`links[0].netem.distribution: unknown "flat"`}},
		{"gap without reorder", link("    netem: {delay: 1ms, gap: 5}\n"), []string{"links[0].netem.gap: needs reorder"}},
		{"zero limit", link("    netem: {limit: 0}\n"), []string{"links[0].netem.limit: 0 is less than 1"}},
		{"remote_vtep not an IP", link("    link_options: {remote_vtep: phy.example, vni: 1}\n"), []string{`links[0].link_options.remote_vtep: "phy.example" is not an IP address`}},
		{"vni out of range", link("    link_options: {remote_vtep: 10.250.0.200, vni: 16777216}\n"), []string{"links[0].link_options.vni: 16777216 is outside 1..16777215"}},
		{"vni missing", link("    link_options: {remote_vtep: 10.250.0.200}\n"), []string{"links[0].link_options.vni: 0 is outside"}},
		{"udp_port out of range", link("    link_options: {remote_vtep: 10.250.0.200, vni: 1, udp_port: 70000}\n"), []string{"links[0].link_options.udp_port: 70000 is outside 1..65535"}},
		{"unknown link_options field", link("    link_options: {remote_vtep: 10.250.0.200, vni: 1, vlan: 3}\n"), []string{"links[0].link_options", `unknown field "vlan"`}},
		{"link_options with localhost", "links:\n  - endpoints: [\"r1:eth1\", \"localhost:ens4\"]\n    link_options: {remote_vtep: 10.250.0.200, vni: 1}\n", []string{"links[0].link_options: a physical peer cannot be combined with localhost"}},
		{"physical device is a pod elsewhere", `
links:
  - endpoints: ["r1:eth1", "r2:eth1"]
  - endpoints: ["r1:eth2", "r2:eth2"]
    link_options: {remote_vtep: 10.250.0.200, vni: 1}
`, []string{`links[1].endpoints[1]: "r2:eth2": r2 is a pod at links[0].endpoints[1], not a physical device`}},
		{"pod is a physical device elsewhere", `
links:
  - endpoints: ["r1:eth1", "phy1:eth1"]
    link_options: {remote_vtep: 10.250.0.200, vni: 1}
  - endpoints: ["phy1:eth2", "r2:eth1"]
`, []string{`links[1].endpoints[0]: "phy1:eth2": phy1 is a physical device at links[0].endpoints[1], not a pod`}},
		{"physical device with two VTEPs", `
links:
  - endpoints: ["r1:eth1", "phy1:eth1"]
    link_options: {remote_vtep: 10.250.0.200, vni: 1}
  - endpoints: ["r2:eth1", "phy1:eth2"]
    link_options: {remote_vtep: 10.250.0.201, vni: 2}
`, []string{"links[1].link_options.remote_vtep: 10.250.0.201, but phy1 has 10.250.0.200 elsewhere"}},
		{"VNI used twice", `
links:
  - endpoints: ["r1:eth1", "phy1:eth1"]
    link_options: {remote_vtep: 10.250.0.200, vni: 7}
  - endpoints: ["r2:eth1", "phy2:eth1"]
    link_options: {remote_vtep: 10.250.0.201, vni: 7, udp_port: 4789}
`, []string{"links[1].link_options: vni 7 on port 4789 is already used at links[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseReportsEveryError(t *testing.T) {
	_, err := Parse([]byte(`
links:
  - endpoints: ["r1:eth1:10.0.0.1/33", "r2:eth1"]
  - endpoints: ["r3:eth1"]
`))
	for _, w := range []string{"links[0].endpoints[0]", "links[1].endpoints"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not name %s", err, w)
		}
	}
}

func TestTooManyLinksOnOnePod(t *testing.T) {
	var b strings.Builder
	b.WriteString("links:\n")
	for i := range v1beta1.MaxLinks + 1 {
		b.WriteString("  - endpoints: [\"hub:e" + strconv.Itoa(i) + "\", \"spoke" + strconv.Itoa(i) + ":e1\"]\n")
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "links[10000].endpoints[0]: hub has more than 10000 links (a Topology's most)") {
		t.Errorf("err = %v, want one naming links[10000] and the CRD's limit", err)
	}
}

// TestWidePodsWithoutLinkLocal: a pod of more links than the CRD admits
// with IPv6 link-local addresses gets ipv6_link_local: false, as the CRD
// requires; its peers and smaller pods keep the kernel's default.
func TestWidePodsWithoutLinkLocal(t *testing.T) {
	var b strings.Builder
	b.WriteString("links:\n")
	for i := range v1beta1.MaxLinksWithLinkLocal + 1 {
		b.WriteString("  - endpoints: [\"hub:e" + strconv.Itoa(i) + "\", \"spoke" + strconv.Itoa(i%2) + ":e" + strconv.Itoa(i) + "\"]\n")
	}
	f, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	topos, err := f.Topologies("")
	if err != nil {
		t.Fatal(err)
	}
	for _, topo := range topos {
		if wide := topo.Name == "hub"; topo.LinkLocalIPv6() == wide {
			t.Errorf("%s (%d links): link-local addresses %v", topo.Name, len(topo.Spec.Links), topo.LinkLocalIPv6())
		}
	}
}

func TestTopologiesNamespace(t *testing.T) {
	f, err := Parse([]byte("links:\n  - endpoints: [\"a:e1\", \"b:e1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Topologies("Lab_1"); err == nil || !strings.Contains(err.Error(), `namespace "Lab_1"`) {
		t.Errorf("err = %v, want one naming the namespace", err)
	}
	topos, err := f.Topologies("")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteYAML(&buf, topos); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "namespace") {
		t.Errorf("no namespace given, but the output has one:\n%s", buf.String())
	}
}

// TestWriteYAMLReadsBack checks that the stream holds one document per
// Topology that decodes back into the same object, without status.
func TestWriteYAMLReadsBack(t *testing.T) {
	f, err := Parse([]byte(`
links:
  - endpoints: ["r1:eth1:10.0.0.1/30", "r2:eth1:10.0.0.2/30"]
    netem: {delay: 5ms}
  - endpoints: ["r2:eth2", "phy1:eth1"]
    link_options: {remote_vtep: 10.250.0.200, vni: 5001}
`))
	if err != nil {
		t.Fatal(err)
	}
	topos, err := f.Topologies("lab")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteYAML(&buf, topos); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "status") || strings.Contains(out, "creationTimestamp") {
		t.Errorf("output has status or empty metadata:\n%s", out)
	}
	docs := strings.Split(strings.TrimPrefix(out, "---\n"), "\n---\n")
	if len(docs) != len(topos) {
		t.Fatalf("got %d documents, want %d:\n%s", len(docs), len(topos), out)
	}
	for i, doc := range docs {
		var got v1beta1.Topology
		if err := yaml.UnmarshalStrict([]byte(doc), &got); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, topos[i]) {
			t.Errorf("document %d reads back as\n%+v\nwant\n%+v", i, got, topos[i])
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestExamples parses and converts every examples/*/topology.yml.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*", "topology.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ pods, physical int }{
		"line-3": {3, 0}, "physical-peer": {2, 1}, "ring-10": {10, 0},
	}
	seen := 0
	for _, path := range files {
		name := filepath.Base(filepath.Dir(path))
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(data)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			topos, err := f.Topologies("default")
			if err != nil {
				t.Fatal(err)
			}
			if w, ok := want[name]; ok {
				seen++
				if len(topos) != w.pods || len(f.PhysicalPeers()) != w.physical {
					t.Errorf("%d topologies and %d physical peers, want %d and %d", len(topos), len(f.PhysicalPeers()), w.pods, w.physical)
				}
			}
			for _, p := range f.PhysicalPeers() {
				if !netip.MustParsePrefix("10.250.0.0/24").Contains(p.RemoteVTEP) {
					t.Errorf("physical peer %s: VTEP %s is outside the lab's node network 10.250.0.0/24", p.Device.Name, p.RemoteVTEP)
				}
			}
		})
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d expected examples in %v", seen, len(want), files)
	}
}

// TestNetemPatternsMatchTheCRD keeps the patterns v1beta1's Parse functions
// use equal to the generated CRD's.
func TestNetemPatternsMatchTheCRD(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "crd", "networkop.co.uk_topologies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	netem := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "pattern" && strings.Contains(path, "netem.properties.") {
					netem[path[strings.LastIndex(path, ".")+1:]] = c.(string)
				}
				walk(path+"."+k, c)
			}
		case []any:
			for _, c := range v {
				walk(path, c)
			}
		}
	}
	walk("", crd)
	for field, re := range map[string]string{"delay": v1beta1.DurationPattern.String(), "loss": v1beta1.PercentPattern.String(), "rate": v1beta1.RatePattern.String()} {
		if netem[field] != re {
			t.Errorf("netem.%s: CRD pattern %q, v1beta1's Parse uses %q", field, netem[field], re)
		}
	}
}

// places names links as another format would, to see NewFile use them.
type places struct{}

func (places) Link(uid int) string { return "conns." + strconv.Itoa(uid) }
func (places) Endpoint(uid, end int) string {
	return "conns." + strconv.Itoa(uid) + ".end" + strconv.Itoa(end)
}

// TestNewFileAppliesParsesRules checks that links made by another
// converter are checked by Parse's rules, reported at that converter's
// places, and convert as a file's links do.
func TestNewFileAppliesParsesRules(t *testing.T) {
	mtu := int32(9000)
	ok := []Link{
		{UID: 0, Endpoints: [2]Endpoint{{Name: "r1", Intf: "eth1"}, {Name: "r2", Intf: "eth1"}}, MTU: &mtu},
		{UID: 5, Endpoints: [2]Endpoint{{Name: Localhost, Intf: "ens4"}, {Name: "r1", Intf: "eth2"}}},
	}
	f, err := NewFile(ok, places{})
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := Parse([]byte("links:\n  - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n    mtu: 9000\n  - endpoints: [\"localhost:ens4\", \"r1:eth2\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.Topologies("lab")
	want, _ := fromFile.Topologies("lab")
	want[0].Spec.Links[1].UID = 5
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NewFile's topologies\n%+v\ndiffer from Parse's\n%+v", got, want)
	}

	bad := []Link{
		{UID: 0, Endpoints: [2]Endpoint{{Name: "r1", Intf: "eth1"}, {Name: "r2", Intf: "eth0"}}},
		{UID: 0, Endpoints: [2]Endpoint{{Name: "r1", Intf: "e:1"}, {Name: "r1", Intf: "eth2"}}, MTU: new(int32(10))},
	}
	_, err = NewFile(bad, places{})
	for _, w := range []string{
		`conns.0.end1: "r2:eth0": eth0 is the pod's own`,
		"conns.0: uid 0 is negative or used twice",
		`conns.0.end0: "r1:e:1": interface name "e:1" has a slash, a colon or a space`,
		"conns.0.endpoints: r1 is linked to itself",
		"conns.0.mtu: 10 is outside 68..65535",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	_, err = NewFile([]Link{
		{UID: 0, Endpoints: [2]Endpoint{{Name: "r1", Intf: "eth1"}, {Name: "r2", Intf: "eth1"}}},
		{UID: 1, Endpoints: [2]Endpoint{{Name: "r2", Intf: "eth1"}, {Name: "r3", Intf: "eth1"}}},
	}, places{})
	if err == nil || !strings.Contains(err.Error(), `conns.1.end0: "r2:eth1": r2 already has eth1 at conns.0.end1`) {
		t.Errorf("err = %v, want the interface used twice at NewFile's places", err)
	}
}
