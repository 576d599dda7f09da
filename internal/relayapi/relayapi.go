// Package relayapi names meshnet's aggregated API, served by the controller
// through the Kubernetes API server, for the server and its clients
// (kubectl meshnet) alike: the plugin needs the paths, not the server.
package relayapi

import (
	"net/url"
	"path"
	"strings"
)

const (
	// Group and Version are the aggregated API's; APIService is the name
	// of the APIService object that registers it.
	Group      = "meshnet.networkop.co.uk"
	Version    = "v1alpha1"
	APIService = Version + "." + Group

	// Resource and ProxySubresource form what the API server authorizes
	// for what the relay reaches on a pod's node: a capture (get on
	// pods/proxy in Group) and a runtime change of a link (update or
	// delete on it: PUT and DELETE). A proxy request is long-running to
	// the API server, which cuts other requests off at its
	// --request-timeout (60s by default); a live capture runs for as long
	// as it is watched.
	Resource         = "pods"
	ProxySubresource = "proxy"

	// LinksResource is the namespace's link ends as the kernel has them,
	// counters included: list on links in Group. PodParam narrows it to
	// one pod.
	LinksResource = "links"
	PodParam      = "pod"
	// WatchParam (true) streams the link events of the namespace's pods
	// as they happen instead: watch on links in Group, one meshnetd
	// WatchLinksResponse in JSON a line.
	WatchParam = "watch"
)

// GroupVersionPath is the API's discovery document.
const GroupVersionPath = "/apis/" + Group + "/" + Version

// ProxiedCapture is what follows the pod's proxy subresource in a
// capture's path: meshnetd's own REST path of a capture below
// /v1/namespaces/{namespace}/pods/{pod} (restapi.CapturePath's tail; a test
// keeps them the same).
const ProxiedCapture = "links/{interface}/capture"

// CapturePattern is a capture's path as a net/http pattern.
const CapturePattern = GroupVersionPath + "/namespaces/{namespace}/" + Resource + "/{pod}/" + ProxySubresource + "/" + ProxiedCapture

// ProxyPattern is every path below a pod's proxy subresource, as a
// net/http pattern; {rest} is meshnetd's own REST path below
// /v1/namespaces/{namespace}/pods/{pod}.
const ProxyPattern = GroupVersionPath + "/namespaces/{namespace}/" + Resource + "/{pod}/" + ProxySubresource + "/{rest...}"

// ProxyPath is the path of meshnetd's REST path tail (links/eth1/state)
// of pod, through the relay.
func ProxyPath(namespace, pod, tail string) string {
	return path.Join(GroupVersionPath, "namespaces", url.PathEscape(namespace), Resource, url.PathEscape(pod), ProxySubresource, tail)
}

// CapturePath is the path of a capture of pod's interface intf.
func CapturePath(namespace, pod, intf string) string {
	return strings.NewReplacer("{namespace}", url.PathEscape(namespace), "{pod}", url.PathEscape(pod),
		"{interface}", url.PathEscape(intf)).Replace(CapturePattern)
}

// LinksPath is the path of the link ends of namespace's pods.
func LinksPath(namespace string) string {
	return path.Join(GroupVersionPath, "namespaces", url.PathEscape(namespace), LinksResource)
}
