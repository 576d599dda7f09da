package topofile

import (
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// Topologies converts the file into one Topology per pod, in the order of
// Pods, each link in uid order. Both ends of a pod-to-pod link get the
// link's mtu, state and netem (netem then shapes each direction); a link
// to the node's NIC or to a physical device has only the pod's end. A pod
// of more than v1beta1.MaxLinksWithLinkLocal links gets ipv6_link_local:
// false, which the CRD requires of it. An empty namespace leaves it unset,
// for `kubectl apply -n`. f must come from Parse or NewFile.
func (f *File) Topologies(namespace string) ([]v1beta1.Topology, error) {
	if errs := validation.IsDNS1123Label(namespace); namespace != "" && len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	byPod := map[string]*v1beta1.Topology{}
	var out []*v1beta1.Topology
	topology := func(pod string) *v1beta1.Topology {
		t, ok := byPod[pod]
		if !ok {
			t = &v1beta1.Topology{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "Topology"},
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace},
			}
			byPod[pod] = t
			out = append(out, t)
		}
		return t
	}
	for _, l := range f.Links {
		for i, local := range l.Endpoints {
			if !l.IsPod(i) {
				continue
			}
			peer := l.Endpoints[1-i]
			t := topology(local.Name)
			t.Spec.Links = append(t.Spec.Links, v1beta1.Link{
				UID:         l.UID,
				PeerPod:     peer.Name,
				LocalIntf:   local.Intf,
				PeerIntf:    peer.Intf,
				LocalIP:     local.IP,
				PeerIP:      peer.IP,
				MTU:         copyPtr(l.MTU),
				State:       copyPtr(l.State),
				Netem:       l.Netem.DeepCopy(),
				LinkOptions: l.LinkOptions.DeepCopy(),
			})
		}
	}
	topos := make([]v1beta1.Topology, len(out))
	for i, t := range out {
		if len(t.Spec.Links) > v1beta1.MaxLinksWithLinkLocal {
			// The CRD's rule: a file has no way to say it.
			t.Spec.IPv6LinkLocal = new(bool)
		}
		topos[i] = *t
	}
	return topos, nil
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// manifest is what WriteYAML writes of a Topology: no status and no empty
// metadata fields, so that the output reads like a hand-written manifest.
type manifest struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Metadata   manifestMeta         `json:"metadata"`
	Spec       v1beta1.TopologySpec `json:"spec"`
}

type manifestMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// WriteYAML writes the Topologies as one multi-document YAML stream, ready
// for `kubectl apply -f -`.
func WriteYAML(w io.Writer, topos []v1beta1.Topology) error {
	for _, t := range topos {
		doc, err := yaml.Marshal(manifest{
			APIVersion: v1beta1.GroupVersion.String(),
			Kind:       "Topology",
			Metadata:   manifestMeta{Name: t.Name, Namespace: t.Namespace, Labels: t.Labels},
			Spec:       t.Spec,
		})
		if err != nil {
			return fmt.Errorf("marshal topology %s: %w", t.Name, err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", doc); err != nil {
			return fmt.Errorf("write topology %s: %w", t.Name, err)
		}
	}
	return nil
}
