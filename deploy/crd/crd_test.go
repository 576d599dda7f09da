package crd

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestCRDsHoldTopology checks the embedded set is the generated one and
// leaves kustomization.yaml out.
func TestCRDsHoldTopology(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].Name != "topologies.networkop.co.uk" || len(crds[0].Spec.Versions) == 0 {
		t.Fatalf("embedded CRDs: %d, want topologies.networkop.co.uk with its versions", len(crds))
	}
}

// TestCRDBoundsAreTheAPIs: the CRD's bounds on spec.links and spec.routes
// are the constants the rest of meshnet holds to.
func TestCRDBoundsAreTheAPIs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range crds[0].Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		for field, want := range map[string]int64{"links": v1beta1.MaxLinks, "routes": v1beta1.MaxRoutes} {
			if got := spec.Properties[field].MaxItems; got == nil || *got != want {
				t.Errorf("%s: spec.%s maxItems %v, want v1beta1's %d", v.Name, field, got, want)
			}
		}
		vni := spec.Properties["links"].Items.Schema.Properties["link_options"].Properties["vni"]
		if vni.Maximum == nil || *vni.Maximum != v1beta1.MaxVNI {
			t.Errorf("%s: spec.links[].link_options.vni maximum %v, want v1beta1's %d", v.Name, vni.Maximum, v1beta1.MaxVNI)
		}
		bound := fmt.Sprintf("size(self.links) <= %d ", v1beta1.MaxLinksWithLinkLocal)
		found := false
		for _, r := range spec.XValidations {
			found = found || (strings.Contains(r.Rule, bound) && strings.Contains(r.Message, fmt.Sprint(v1beta1.MaxLinksWithLinkLocal)))
		}
		if !found {
			t.Errorf("%s: no rule on spec bounds links with link-local addresses at v1beta1's %d (%q)", v.Name, v1beta1.MaxLinksWithLinkLocal, bound)
		}
	}
}
