package crd

import "testing"

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
