//go:build cluster

package v1beta1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// upstreamTopology is a manifest written for meshnet-cni, original fields only.
const upstreamTopology = `
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r1
spec:
  links:
  - uid: 1
    peer_pod: r2
    local_intf: eth1
    local_ip: 12.12.12.1/24
    peer_intf: eth1
    peer_ip: 12.12.12.2/24
  - uid: 2
    peer_pod: localhost
    local_intf: eth2
    peer_intf: ens3
`

// extendedTopology uses every extension.
const extendedTopology = `
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r2
spec:
  links:
  - uid: 1
    peer_pod: r1
    local_intf: eth1
    local_ip: 12.12.12.2/24
    peer_intf: eth1
    peer_ip: 12.12.12.1/24
    mtu: 9000
    state: down
    netem:
      delay: 50ms
      jitter: 1.5s
      delay_correlation: "25%"
      distribution: paretonormal
      loss: "0.5%"
      loss_correlation: "10"
      duplicate: "1%"
      duplicate_correlation: "5%"
      corrupt: "0.1%"
      corrupt_correlation: "2%"
      reorder: "25%"
      reorder_correlation: "50%"
      gap: 5
      rate: 100mbit
      limit: 10000
  - uid: 2
    peer_pod: switch1
    local_intf: eth2
    peer_intf: Ethernet1
    local_ip: 2001:db8::2/64
    link_options:
      remote_vtep: 192.0.2.10
      vni: 16777215
      udp_port: 4790
  routes:
  - dst: 10.10.0.0/16
    gw: 12.12.12.1
  - dst: 2001:db8:1::/48
    dev: eth2
`

func TestClusterTopologyAdmission(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()

	t.Run("upstream manifest reads back unchanged", func(t *testing.T) {
		obj := decode(t, upstreamTopology, "default")
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create: %v", err)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "r1"}, got); err != nil {
			t.Fatalf("get: %v", err)
		}
		gotSpec, _ := json.Marshal(got.Object["spec"])
		wantSpec, _ := json.Marshal(decode(t, upstreamTopology, "default").Object["spec"])
		if string(gotSpec) != string(wantSpec) {
			t.Errorf("spec changed by the API server:\n got %s\nwant %s", gotSpec, wantSpec)
		}
	})

	t.Run("every extension is accepted", func(t *testing.T) {
		obj := decode(t, extendedTopology, "default")
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create: %v", err)
		}
	})

	t.Run("a segment is accepted", func(t *testing.T) {
		obj := decode(t, invalidManifest("lan1", "SPEC: bridge: {name: lan}"), "default")
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create: %v", err)
		}
	})

	for _, tc := range []struct {
		name  string
		patch string // replaces the marked line of base
		field string // the message must name it
	}{
		{"bad duration", "netem: {delay: 50 ms}", "spec.links[0].netem.delay"},
		{"loss over 100%", "netem: {loss: '150%'}", "spec.links[0].netem.loss"},
		{"jitter without delay", "netem: {jitter: 10ms}", "jitter needs delay"},
		{"jitter over the kernel cap", "netem: {delay: 5s, jitter: 3s}", "spec.links[0].netem.jitter"},
		{"correlation without its base", "netem: {loss_correlation: '25%'}", "loss_correlation needs loss"},
		{"reorder without delay", "netem: {reorder: '25%'}", "reorder needs delay"},
		{"unknown distribution", "netem: {delay: 10ms, jitter: 1ms, distribution: gaussian}", "spec.links[0].netem.distribution"},
		{"bad rate", "netem: {rate: fast}", "spec.links[0].netem.rate"},
		{"vni 0", "link_options: {remote_vtep: 192.0.2.1, vni: 0}", "spec.links[0].link_options.vni"},
		{"vni 16777216", "link_options: {remote_vtep: 192.0.2.1, vni: 16777216}", "spec.links[0].link_options.vni"},
		{"remote_vtep not an IP", "link_options: {remote_vtep: vtep.example, vni: 10}", "spec.links[0].link_options.remote_vtep"},
		{"bad CIDR", "local_ip: 10.0.0.300/24", "spec.links[0].local_ip"},
		{"16-character interface name", "local_intf: eth0123456789012", "spec.links[0].local_intf"},
		{"interface name with a slash", "local_intf: eth/1", "spec.links[0].local_intf"},
		{"state sideways", "state: sideways", "spec.links[0].state"},
		{"negative mtu", "mtu: -1", "spec.links[0].mtu"},
		{"udp port out of range", "link_options: {remote_vtep: 192.0.2.1, vni: 10, udp_port: 70000}", "spec.links[0].link_options.udp_port"},
		{"route without dst", "ROUTE: {gw: 10.0.0.1}", "spec.routes[0].dst"},
		{"route gw not an IP", "ROUTE: {dst: 10.1.0.0/16, gw: router}", "spec.routes[0].gw"},
		{"an address on a bridge's port", "SPEC: bridge: {} | local_ip: 10.0.0.1/24", "spec.bridge"},
		{"a bridge named like a link", "SPEC: bridge: {name: eth1}", "spec.bridge.name"},
		{"a bridge name with a slash", "SPEC: bridge: {name: br/0}", "spec.bridge.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad-" + strings.ToLower(strings.NewReplacer(" ", "-", "%", "").Replace(tc.name))
			obj := decode(t, invalidManifest(name, tc.patch), "default")
			err := env.Client.Create(ctx, obj)
			if err == nil {
				t.Fatalf("accepted; want a rejection naming %q", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("rejection does not name %q:\n%v", tc.field, err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, got); err == nil {
				t.Errorf("rejected object %s exists", name)
			}
		})
	}

	t.Run("kubectl apply names the field", func(t *testing.T) {
		kubeconfig := env.Kubeconfig(t)
		dir := t.TempDir()
		good := filepath.Join(dir, "good.yaml")
		bad := filepath.Join(dir, "bad.yaml")
		writeFile(t, good, strings.Replace(upstreamTopology, "name: r1", "name: r1-kubectl", 1))
		writeFile(t, bad, invalidManifest("r1-bad", "netem: {loss: '150%'}"))

		if out, err := kubectl(kubeconfig, "apply", "-f", good); err != nil {
			t.Fatalf("kubectl apply of an upstream manifest: %v\n%s", err, out)
		}
		out, err := kubectl(kubeconfig, "apply", "-f", bad)
		if err == nil {
			t.Fatalf("kubectl apply of loss 150%% succeeded:\n%s", out)
		}
		t.Logf("kubectl apply of loss 150%%:\n%s", out)
		if !strings.Contains(out, "spec.links[0].netem.loss") {
			t.Errorf("kubectl's error does not name spec.links[0].netem.loss:\n%s", out)
		}
		out, err = kubectl(kubeconfig, "get", "topo", "r1-kubectl", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "topology.networkop.co.uk/r1-kubectl" {
			t.Errorf("kubectl get topo by short name: %v\n%s", err, out)
		}
	})
}

// linkFault is a LinkFault with every field, named by its one verb.
const linkFault = `
apiVersion: networkop.co.uk/v1beta1
kind: LinkFault
metadata:
  name: %s
spec:
  links:
  - {pod: r1, interface: eth1}
  - {pod: r2, interface: e1-1.100}
  state: down
  netem: {delay: 100ms, loss: "1%%"}
  duration: 2s
  period: 10s
  count: 3
  start: "2026-12-06T20:00:00.250000Z"
  suspend: false
`

// TestClusterLinkFaultAdmission: a LinkFault with every field is admitted
// and reads back unchanged; each invalid one is refused naming its field
// (or saying which fields go together), and nothing is created.
func TestClusterLinkFaultAdmission(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	obj := decode(t, fmt.Sprintf(linkFault, "flap"), "default")
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create a LinkFault with every field: %v", err)
	}
	var got v1beta1.LinkFault
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "flap"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Start == nil || got.Spec.Start.Nanosecond() != 250000000 || got.Spec.Period == nil || *got.Spec.Period != "10s" || len(got.Spec.Links) != 2 {
		t.Errorf("read back %+v; want start with its milliseconds, period 10s, 2 links", got.Spec)
	}
	for _, tc := range []struct {
		name  string
		set   map[string]any // spec fields replaced; nil removes one
		field string
	}{
		{"neither state nor netem", map[string]any{"state": nil, "netem": nil}, "spec.state"},
		{"state up", map[string]any{"state": "up"}, "spec.state"},
		{"no links", map[string]any{"links": []any{}}, "spec.links"},
		{"an interface with a slash", map[string]any{"links": []any{map[string]any{"pod": "r1", "interface": "eth1/1"}}}, "spec.links[0].interface"},
		{"an empty pod", map[string]any{"links": []any{map[string]any{"pod": "", "interface": "eth1"}}}, "spec.links[0].pod"},
		{"a duration that is not one", map[string]any{"duration": "soon"}, "spec.duration"},
		{"a duration under 10ms", map[string]any{"duration": "5ms"}, "spec.duration"},
		{"a period not longer than the duration", map[string]any{"period": "2s"}, "spec.period"},
		{"a count without a period", map[string]any{"period": nil}, "spec.count"},
		{"a count of 0", map[string]any{"count": int64(0)}, "spec.count"},
		{"netem jitter without delay", map[string]any{"netem": map[string]any{"jitter": "5ms"}}, "jitter needs delay"},
		{"a start that is not a time", map[string]any{"start": "tomorrow"}, "spec.start"},
		{"links and a selector", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"role": "spine"}}}, "spec.links"},
		{"neither links nor a selector", map[string]any{"links": nil}, "spec.links"},
		{"interfaces without a selector", map[string]any{"interfaces": []any{"eth1"}}, "spec.interfaces"},
		{"a schedule beside a period", map[string]any{"schedule": "*/5 * * * *"}, "spec.schedule"},
		{"a schedule in a time zone", map[string]any{"period": nil, "schedule": "TZ=Europe/Paris 0 3 * * *"}, "spec.schedule"},
		{"a schedule with more than 10000 windows", map[string]any{"period": nil, "schedule": "@hourly", "count": int64(10001)}, "spec.count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "0", "zero")
			obj := decode(t, fmt.Sprintf(linkFault, name), "default")
			spec := obj.Object["spec"].(map[string]any)
			for k, v := range tc.set {
				if v == nil {
					delete(spec, k)
					continue
				}
				spec[k] = v
			}
			err := env.Client.Create(ctx, obj)
			if err == nil {
				t.Fatalf("created; want refused naming %s", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("refusal does not name %q:\n%v", tc.field, err)
			}
		})
	}
	// A schedule in place of the period, as a CronJob's.
	cron := decode(t, fmt.Sprintf(linkFault, "nightly"), "default")
	spec := cron.Object["spec"].(map[string]any)
	delete(spec, "period")
	spec["schedule"] = "0 3 * * 1-5"
	if err := env.Client.Create(ctx, cron); err != nil {
		t.Errorf("create a LinkFault with a schedule and a count: %v", err)
	}
	// Topologies by label: every link of the spines, or their eth1.
	spines := decode(t, fmt.Sprintf(linkFault, "spines"), "default")
	spec = spines.Object["spec"].(map[string]any)
	delete(spec, "links")
	spec["selector"] = map[string]any{"matchLabels": map[string]any{"role": "spine"}}
	spec["interfaces"] = []any{"eth1"}
	if err := env.Client.Create(ctx, spines); err != nil {
		t.Errorf("create a LinkFault with a selector and interfaces: %v", err)
	}
	kubeconfig := env.Kubeconfig(t)
	out, err := kubectl(kubeconfig, "get", "fault")
	if err != nil || !strings.Contains(out, "PHASE") || !strings.Contains(out, "flap") {
		t.Errorf("kubectl get fault (the short name, with its columns): %v\n%s", err, out)
	}
	t.Logf("$ kubectl get fault\n%s", out)
}

// invalidManifest returns a one-link Topology with patch added to the link;
// for a patch starting with ROUTE:, a route; for one starting with SPEC:, a
// field of the spec, then after " | " what to add to the link.
func invalidManifest(name, patch string) string {
	link := "    " + patch
	routes := ""
	if r, ok := strings.CutPrefix(patch, "ROUTE: "); ok {
		link = ""
		routes = "  routes:\n  - " + r
	}
	if r, ok := strings.CutPrefix(patch, "SPEC: "); ok {
		spec, l, _ := strings.Cut(r, " | ")
		link, routes = "    "+l, "  "+spec
	}
	return fmt.Sprintf(`
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: %s
spec:
  links:
  - uid: 1
    peer_pod: r2
    local_intf: eth1
    peer_intf: eth1
%s
%s
`, name, link, routes)
}

func decode(t *testing.T, manifest, namespace string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		t.Fatalf("decode manifest: %v\n%s", err, manifest)
	}
	obj.SetNamespace(namespace)
	return obj
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func kubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig, "-n", "default"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestClusterTenThousandLinks applies a Topology of 10,000 links, each with
// an address, an MTU and netem, so that the admission rules run on every
// link (meshnet-cni's CRD has no limit; a cost budget must not refuse
// manifests that work there), and one more than the limit, which is refused
// naming the field; past 4,096 links only without IPv6 link-local addresses
// (MaxLinksWithLinkLocal). Past about 10,000 links a Topology meets etcd's request
// limit (1.5 MiB by default), which the limit stays within.
func TestClusterTenThousandLinks(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	topology := func(name string, n int, linkLocal *bool) *unstructured.Unstructured {
		links := make([]any, n)
		for i := range n {
			links[i] = map[string]any{
				"uid": int64(i + 1), "peer_pod": fmt.Sprintf("p%d", i), "local_intf": fmt.Sprintf("e%d", i), "peer_intf": "eth1",
				"local_ip": fmt.Sprintf("10.%d.%d.1/30", i/256, i%256), "mtu": int64(9000), "netem": map[string]any{"delay": "1ms"},
			}
		}
		spec := map[string]any{"links": links}
		if linkLocal != nil {
			spec["ipv6_link_local"] = *linkLocal
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		obj.SetAPIVersion("networkop.co.uk/v1beta1")
		obj.SetKind("Topology")
		obj.SetNamespace("default")
		obj.SetName(name)
		return obj
	}
	off := new(bool)
	if err := env.Client.Create(ctx, topology("big", v1beta1.MaxLinks, off)); err != nil {
		t.Fatalf("a Topology of 10,000 links without link-local addresses refused: %v", err)
	}
	if err := env.Client.Create(ctx, topology("link-local", v1beta1.MaxLinksWithLinkLocal, nil)); err != nil {
		t.Fatalf("a Topology of 4,096 links with link-local addresses refused: %v", err)
	}
	err := env.Client.Create(ctx, topology("link-local-too-many", v1beta1.MaxLinksWithLinkLocal+1, nil))
	if err == nil || !strings.Contains(err.Error(), "spec.ipv6_link_local") || !strings.Contains(err.Error(), "more than 4096 links need ipv6_link_local: false") {
		t.Fatalf("a Topology of 4,097 links with link-local addresses: %v, want refused naming spec.ipv6_link_local", err)
	}
	t.Logf("4,097 links with link-local addresses: %v", err)
	err = env.Client.Create(ctx, topology("too-big", v1beta1.MaxLinks+1, off))
	if err == nil || !strings.Contains(err.Error(), "spec.links") {
		t.Fatalf("a Topology of 10,001 links: %v, want refused naming spec.links", err)
	}
}
