package clabfile

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func sortByName(cms []corev1.ConfigMap) {
	slices.SortFunc(cms, func(a, b corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
}

// WriteYAML writes the objects as one multi-document YAML stream, in the
// order to apply them (ConfigMaps, Topologies, Pods, Services, LinkFaults), ready for
// `kubectl apply -f -` or a GitOps repository: no status and no empty
// fields the API server would fill in.
func (o Objects) WriteYAML(w io.Writer) error {
	var objs []any
	for _, c := range o.ConfigMaps {
		objs = append(objs, c)
	}
	for _, t := range o.Topologies {
		objs = append(objs, t)
	}
	for _, p := range o.Pods {
		objs = append(objs, p)
	}
	for _, svc := range o.Services {
		objs = append(objs, svc)
	}
	for _, f := range o.Faults {
		objs = append(objs, f)
	}
	for _, obj := range objs {
		doc, err := manifest(obj)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "---\n%s", doc); err != nil {
			return fmt.Errorf("write manifest: %w", err)
		}
	}
	return nil
}

// manifest is obj's YAML without status, creationTimestamp and a
// container's empty resources, which only the API server has to say.
func manifest(obj any) ([]byte, error) {
	js, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	if spec, ok := m["spec"].(map[string]any); ok {
		if cs, ok := spec["containers"].([]any); ok {
			for _, c := range cs {
				if c, ok := c.(map[string]any); ok {
					if r, ok := c["resources"].(map[string]any); ok && len(r) == 0 {
						delete(c, "resources")
					}
				}
			}
		}
	}
	doc, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	return doc, nil
}
