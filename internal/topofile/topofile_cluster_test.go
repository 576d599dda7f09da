//go:build cluster

package topofile

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// TestClusterExamplesAreAdmitted creates every example's Topologies through
// the API server, from the YAML stream WriteYAML writes (what `kubectl apply
// -f -` gets), in a namespace per example, and reads each back equal.
func TestClusterExamplesAreAdmitted(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*", "topology.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, path := range files {
		name := filepath.Base(filepath.Dir(path))
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			ns := "ex-" + name
			if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			topos, err := f.Topologies(ns)
			if err != nil {
				t.Fatal(err)
			}
			var stream bytes.Buffer
			if err := WriteYAML(&stream, topos); err != nil {
				t.Fatal(err)
			}
			for i, doc := range strings.Split(strings.TrimPrefix(stream.String(), "---\n"), "\n---\n") {
				obj := &unstructured.Unstructured{}
				if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
					t.Fatalf("document %d: %v", i, err)
				}
				if err := env.Client.Create(ctx, obj); err != nil {
					t.Fatalf("create %s/%s: the API server refused it: %v\n%s", ns, obj.GetName(), err, doc)
				}
			}
			for _, want := range topos {
				var got v1beta1.Topology
				if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: want.Name}, &got); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Spec, want.Spec) {
					t.Errorf("%s/%s reads back as\n%+v\nwant\n%+v", ns, want.Name, got.Spec, want.Spec)
				}
			}
			var list v1beta1.TopologyList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != len(f.Pods()) {
				t.Errorf("%d Topologies in %s, want one per pod (%d)", len(list.Items), ns, len(f.Pods()))
			}
		})
	}
}

// TestClusterExtensionsAreAdmitted checks that a file using every extension
// converts into objects the API server accepts: what Parse lets through,
// admission must let through too.
func TestClusterExtensionsAreAdmitted(t *testing.T) {
	env := clustertest.Start(t)
	ctx := context.Background()
	f, err := Parse([]byte(`
links:
  - endpoints: ["r1:eth1:10.0.0.1/30", "r2:eth1:10.0.0.2/30"]
    mtu: 9000
    state: down
    netem: {delay: 50ms, jitter: 2147ms, delay_correlation: "25", distribution: paretonormal,
            loss: "0.5%", loss_correlation: "10%", duplicate: "1%", duplicate_correlation: "5%",
            corrupt: "0.1%", corrupt_correlation: "2%", reorder: "25%", reorder_correlation: "50%",
            gap: 5, rate: 1.5gbit, limit: 10000}
  - endpoints: ["r2:eth2:2001:db8::1/64", "phy1:Ethernet1:2001:db8::2/64"]
    link_options: {remote_vtep: "2001:db8:ffff::1", vni: 16777215, udp_port: 8472}
  - endpoints: ["r1:eth2", "localhost:ens4"]
`))
	if err != nil {
		t.Fatal(err)
	}
	topos, err := f.Topologies("default")
	if err != nil {
		t.Fatal(err)
	}
	for i := range topos {
		want := topos[i].DeepCopy()
		if err := env.Client.Create(ctx, &topos[i]); err != nil {
			t.Fatalf("create %s: the API server refused what Parse accepted: %v", want.Name, err)
		}
		var got v1beta1.Topology
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(want), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("%s reads back as\n%+v\nwant\n%+v", want.Name, got.Spec, want.Spec)
		}
	}
}
