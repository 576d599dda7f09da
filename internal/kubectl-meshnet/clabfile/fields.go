package clabfile

// How the converter treats a setting of a node definition (a node, a group,
// a kind or topology.defaults).
type treatment int

const (
	// mapped settings become part of the node's pod.
	mapped treatment = iota
	// ignored settings have no effect here; they are listed with their
	// reason, so that a CLI can say so.
	ignored
	// refused settings make the file fail: running it without them would
	// not be the lab the file describes.
	refused
)

type rule struct {
	how    treatment
	reason string
}

// kindLinux is the one kind the converter runs: a plain container, which is
// what a pod is.
const kindLinux = "linux"

// nodeFields are the settings a node definition may have (containerlab's
// NodeDefinition), each with how it is treated. A key not listed is refused
// as unknown, as containerlab's strict parsing refuses it.
var nodeFields = map[string]rule{
	"kind":              {how: mapped},
	"group":             {how: mapped},
	"image":             {how: mapped},
	"image-pull-policy": {how: mapped},
	"entrypoint":        {how: mapped},
	"cmd":               {how: mapped},
	"exec":              {how: mapped},
	"binds":             {how: mapped},
	"env":               {how: mapped},
	"labels":            {how: mapped},
	"startup-config":    {how: mapped},
	"privileged":        {how: mapped},
	"cap-add":           {how: mapped},
	"restart-policy":    {how: mapped},
	"hostname":          {how: mapped},
	"user":              {how: mapped},
	"memory":            {how: mapped},
	"cpu":               {how: mapped},
	"healthcheck":       {how: mapped},
	"dns":               {how: mapped},
	"ports":             {how: mapped},

	"type":                    {ignored, "kind linux has no types"},
	"mgmt-ipv4":               {ignored, "a pod's eth0 gets its address from the cluster network; there is no lab management network"},
	"mgmt-ipv6":               {ignored, "a pod's eth0 gets its address from the cluster network; there is no lab management network"},
	"runtime":                 {ignored, "the cluster's container runtime runs the pods"},
	"auto-remove":             {ignored, "a pod stays until the lab is deleted"},
	"enforce-startup-config":  {ignored, "kind linux has no startup configuration"},
	"suppress-startup-config": {ignored, "kind linux has no startup configuration"},
	"license":                 {ignored, "kind linux uses no license"},
	"position":                {ignored, "it places the node in containerlab's graph only"},
	"credentials":             {ignored, "containerlab uses them for its SSH config and inventories only"},
	"username":                {ignored, "containerlab uses it for its SSH config and inventories only"},
	"password":                {ignored, "containerlab uses it for its SSH config and inventories only"},
	"aliases":                 {ignored, "they are names in containerlab's management network, which a pod is not on"},
	"certificate":             {ignored, "containerlab's lab CA writes node certificates into its lab directory; nothing does here"},
	"link-apply-mode":         {ignored, "it governs containerlab apply only"},
	"config":                  {ignored, "kind linux renders no configuration templates"},
	"extras":                  {ignored, "extras are settings of other kinds"},

	"network-mode":  {refused, "a pod always has its own network namespace with the cluster network on eth0; host, none and container: modes have no counterpart"},
	"startup-delay": {refused, "pods start independently: there is no start order to delay"},
	"stages":        {refused, "pods start independently: containerlab's stages and their waits have no counterpart"},
	"volumes":       {refused, "docker volumes are not mapped (a named one is shared through the containerlab host)"},
	"devices":       {refused, "host devices of the containerlab host are not mapped into pods"},
	"env-files":     {refused, "env files are not read; set the variables with env"},
	"sysctls":       {refused, "Kubernetes sets only its safe sysctls on a pod; set others with exec (the pod is privileged)"},
	"cpu-set":       {refused, "CPU pinning is not mapped"},
	"shm-size":      {refused, "shared memory size is not mapped"},
	"tmpfs":         {refused, "tmpfs mounts are not mapped"},
	"cgroupns-mode": {refused, "cgroup settings are not mapped"},
	"cgroup-parent": {refused, "cgroup settings are not mapped"},
	"pid-mode":      {refused, "a pod cannot join the host's or another container's PID namespace here"},
	"security-opts": {refused, "docker security options are not mapped"},
	"components":    {refused, "components are parts of other kinds' chassis"},
}

// topFields are the keys at the top of the file; topologyFields those
// under topology.
var (
	topFields = map[string]rule{
		"name":     {how: mapped},
		"topology": {how: mapped},
		"prefix":   {ignored, "pods are named like the nodes, in the namespace the lab is applied to"},
		"mgmt":     {ignored, "a pod's eth0 is the cluster network; there is no lab management network"},
		"settings": {ignored, "containerlab's own settings (its certificate authority) have no counterpart"},
	}
	topologyFields = []string{"defaults", "groups", "kinds", "links", "nodes"}
)

// bridgeKinds are the kinds that make an L2 segment: a pod whose Topology
// has spec.bridge. An ovs-bridge is a Linux bridge too: the segment learns
// and floods as a switch does, without Open vSwitch's flows.
var bridgeKinds = map[string]bool{"bridge": true, "ovs-bridge": true}

// BridgeImage is the image of a bridge node's pod, which runs nothing: the
// segment is the bridge meshnetd makes in the pod's network namespace. It
// is the pause image every node already has for its sandboxes.
const BridgeImage = "registry.k8s.io/pause:3.10"

// SegmentMTU is the mtu of a link to a bridge node whose file sets none:
// one MTU on every port, which a segment needs (a bridge drops a frame
// larger than the port it leaves by; OSPF refuses a neighbour of another
// MTU), and the most a VXLAN between nodes carries over a 1500-byte
// network, as a segment's ports may be.
const SegmentMTU = 1450

// bridgeNodeKeys are the settings a bridge node uses; containerlab reads no
// other of a bridge either.
var bridgeNodeKeys = []string{"group", "kind", "labels"}

// kindReasons say why a kind other than linux and the bridges is refused.
var kindReasons = map[string]string{
	"host":          "the containerlab host itself, which a cluster does not have",
	"ext-container": "a container containerlab did not start: meshnet wires only the pods it makes",
	"k8s-kind":      "a kind cluster in containerlab's host",
}

// otherKindReason is why a network OS kind (srl, ceos, vr-*...) is refused.
const otherKindReason = "containerlab starts this kind with settings of its own (interface mapping, boot checks, its startup configuration) that meshnet does not reproduce; only kinds linux, bridge and ovs-bridge are converted"
