// Package relayapi names meshnet's aggregated API, served by the controller
// through the Kubernetes API server, for the server and its clients
// (kubectl meshnet) alike: the plugin needs the paths, not the server.
package relayapi

import (
	"net/url"
	"path"
)

const (
	// Group and Version are the aggregated API's; APIService is the name
	// of the APIService object that registers it.
	Group      = "meshnet.networkop.co.uk"
	Version    = "v1alpha1"
	APIService = Version + "." + Group

	// Resource and CaptureSubresource form what the API server authorizes
	// for a capture: get on pods/capture in Group.
	Resource           = "pods"
	CaptureSubresource = "capture"

	// LinksResource is the namespace's link ends as the kernel has them,
	// counters included: list on links in Group. PodParam narrows it to
	// one pod.
	LinksResource = "links"
	PodParam      = "pod"

	// InterfaceParam is the capture's query parameter naming the pod's
	// interface; the others are gateway.CaptureQuery's.
	InterfaceParam = "interface"
)

// GroupVersionPath is the API's discovery document.
const GroupVersionPath = "/apis/" + Group + "/" + Version

// CapturePath is the path of a capture of one of pod's links.
func CapturePath(namespace, pod string) string {
	return path.Join(GroupVersionPath, "namespaces", url.PathEscape(namespace), Resource, url.PathEscape(pod), CaptureSubresource)
}

// LinksPath is the path of the link ends of namespace's pods.
func LinksPath(namespace string) string {
	return path.Join(GroupVersionPath, "namespaces", url.PathEscape(namespace), LinksResource)
}
