// Package v1beta1 is the Topology API, group networkop.co.uk, version v1beta1:
// meshnet-cni's Topology with optional extensions for MTU, link state, netem
// shaping, physical peers and routes.
//
// +kubebuilder:object:generate=true
// +groupName=networkop.co.uk
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the group and version of the Topology API.
var GroupVersion = schema.GroupVersion{Group: "networkop.co.uk", Version: "v1beta1"}

var (
	// SchemeBuilder registers the API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&Topology{}, &TopologyList{}, &LinkFault{}, &LinkFaultList{})
}
