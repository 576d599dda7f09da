// Package crd holds meshnet's generated CustomResourceDefinitions
// (controller-gen writes the YAML next to this file), embedded so that
// programs and tests install them without the source tree, as in the vm
// test tier.
package crd

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// manifests are controller-gen's output, one CRD a file named
// <group>_<plural>.yaml; kustomization.yaml is not one of them.
//
//go:embed networkop.co.uk_*.yaml
var manifests embed.FS

// CRDs parses the embedded CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := manifests.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("parse CRD %s: %w", name, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
			return nil, fmt.Errorf("parse CRD %s: not a named CustomResourceDefinition (kind %q)", name, crd.Kind)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}
