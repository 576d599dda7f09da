package crd

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// crdNamed is the embedded CRD of name.
func crdNamed(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no embedded CRD %s", name)
	return nil
}

// TestCRDsHoldTopologyAndLinkFault checks the embedded set is the generated
// one and leaves kustomization.yaml out.
func TestCRDsHoldTopologyAndLinkFault(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		if len(c.Spec.Versions) == 0 {
			t.Errorf("%s has no versions", c.Name)
		}
		names = append(names, c.Name)
	}
	if want := []string{"linkfaults.networkop.co.uk", "topologies.networkop.co.uk"}; !slices.Equal(names, want) {
		t.Fatalf("embedded CRDs %v, want %v", names, want)
	}
}

// TestCRDBoundsAreTheAPIs: the CRD's bounds on spec.links and spec.routes
// are the constants the rest of meshnet holds to.
func TestCRDBoundsAreTheAPIs(t *testing.T) {
	for _, v := range crdNamed(t, "linkfaults.networkop.co.uk").Spec.Versions {
		if got := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["links"].MaxItems; got == nil || *got != v1beta1.MaxFaultLinks {
			t.Errorf("LinkFault %s: spec.links maxItems %v, want v1beta1's %d", v.Name, got, v1beta1.MaxFaultLinks)
		}
	}
	for _, v := range crdNamed(t, "topologies.networkop.co.uk").Spec.Versions {
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
