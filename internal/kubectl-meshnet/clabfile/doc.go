// Package clabfile reads a containerlab topology file (*.clab.yml), as
// containerlab's users write it, and turns it into the Kubernetes objects
// that run the lab on meshnet: one Topology and one Pod per node, both
// named like the node, and a ConfigMap per file the nodes bind. It is pure
// logic, so that `kubectl meshnet` and `meshnet-lab up` share one
// converter: Parse checks the whole file and reads the files it binds,
// (*Lab).Objects makes the objects for a namespace, Objects.WriteYAML
// prints them.
//
// The file means here what it means to containerlab, whose source is the
// reference for each rule below.
//
// # Inheritance
//
// A node's settings come from topology.defaults, its kind
// (topology.kinds), its group (topology.groups) and the node itself, the
// later winning: a string setting is the most specific one set; env and
// labels merge name by name; exec and binds concatenate from defaults to
// the node, exact duplicates dropped, and a bind replaces a less specific
// one with the same container path. A node's kind is its own, its group's,
// the defaults' group's or the defaults'; its group is its own, its kind's
// or the defaults'. The file's environment variables ($VAR, ${VAR:-word},
// ${VAR:=word}, ${VAR:+word}) are expanded first, as containerlab expands
// them; a variable not set stays as written. A file with template actions
// ({{ ... }}) is refused: render it first.
//
// # What maps to what
//
//   - name: the label containerlab=<name> on every object.
//   - a node: a pod and a Topology named like the node (PodName: in lower
//     case, '-' for what a pod name cannot have, when the node's name is
//     not a DNS-1123 label), the node's name in the pod's NodeLabel.
//   - kind linux: a pod with one container, named like the pod.
//   - kind bridge, ovs-bridge: an L2 segment: a pod that runs only the
//     pause image (BridgeImage), whose Topology has spec.bridge; the links
//     to it are its ports, at SegmentMTU unless the file sets mtu. Other
//     kinds are refused: containerlab starts them with settings of their
//     own (interface mapping, boot checks, startup configuration) that a
//     plain pod does not reproduce.
//   - image, image-pull-policy: the container's (IfNotPresent unless set,
//     as containerlab pulls).
//   - entrypoint, cmd: the container's command and args, split into words
//     as containerlab splits them (shell-like quoting, no expansion).
//   - env: the container's environment, sorted; containerlab's own
//     CLAB_INTFS (the node's number of links) and CLAB_LABEL_<label> are
//     added as containerlab adds them.
//   - labels: the pod's labels, with containerlab's own keys
//     (containerlab, clab-node-name, clab-node-kind, clab-node-group).
//   - privileged (default true, as containerlab runs kind linux), cap-add,
//     user (numeric uid[:gid] only), hostname, restart-policy: the pod's.
//     The container gets a TTY and stdin, as containerlab's containers do
//     (a shell as cmd then waits instead of exiting), and the pod
//     terminates at once (grace period 0), like containerlab's SIGKILL.
//   - binds of files and directories under the lab file's directory
//     (__clabNodeName__ replaced): a ConfigMap per bind (named
//     <node>-<container path>), mounted at the container path, a file by
//     subPath; :ro makes the mount read-only.
//     A ConfigMap is read-only to the pod whatever the mode, so a bind
//     containerlab mounts writable is listed as ignored for that. Files
//     keep their executable bit. A bind whose content exceeds 1 MiB, the
//     most a ConfigMap holds, is refused.
//   - exec: run in the container once its links exist, by a postStart
//     hook (see below).
//   - links, brief (endpoints: ["r1:eth1", "r2:eth1"]) or extended (type:
//     veth): one link of each end's Topology, uid = the link's index in
//     topology.links, mtu on both ends. A link without mtu gets meshnet's
//     default (1500 on a veth, the parent's less the VXLAN overhead across
//     nodes), not containerlab's 9500, which a VXLAN between nodes cannot
//     carry.
//   - memory, cpu: the container's limits; healthcheck: its readiness
//     probe; dns: the pod's DNS; ports: a Service named like the pod.
//   - vxlan and vxlan-stitch links: a link to a physical device (the
//     remote VTEP) with link_options.
//   - a link's vars.meshnet: its netem and state at both ends, and
//     LinkFaults on it (Objects.Faults).
//   - macvlan links (brief "macvlan:<nic>" or type: macvlan, mode bridge):
//     meshnet's macvlan to the node's NIC (peer_pod localhost). Their mtu
//     is the NIC's, as containerlab makes it, so a file's mtu is ignored.
//
// The link rules (interface names, an interface used twice, eth0 and lo
// kept for the pod, links per pod) are topofile's, applied by
// topofile.NewFile: one source for both converters.
//
// # exec
//
// containerlab runs a node's exec commands once, after the node's links are
// made. meshnet makes a pod's links when its sandbox is created, but the end
// of a veth or VXLAN whose peer pod does not exist yet is made later, when
// the peer's is, possibly after the container started. So the commands run
// from a postStart hook that first waits (up to 300 s) until each
// of the node's link interfaces exists, then runs every command as
// containerlab does: split into words, no shell, in order, once. A command
// that fails is reported, naming the node, where the file sets the
// command, the command and its exit status (ExecFailed), on the
// container's log, and the next runs; the hook succeeds, so the container
// is not restarted. Each command is marked run in an emptyDir that lives
// as long as the pod, so that a restarted container (same pod, same
// network namespace) runs none again, which `ip addr add` would refuse.
// The hook's script is a ConfigMap (<node>-exec). The image needs /bin/sh
// and sleep.
//
// # Refused and ignored
//
// Whatever the file sets that meshnet cannot reproduce is refused, naming
// the field and the node (topology.nodes.r1.binds[2]: "/lib/modules:...":
// ...): other kinds, host, mgmt-net, dummy and veth-stitch links, binds of
// absolute or home paths or outside the lab file's directory, directories
// with something other than files, docker settings without a pod
// counterpart (network-mode, volumes, devices, sysctls, cpu-set...).
// Every problem is reported, not only the first. Settings that do nothing
// on Kubernetes (mgmt, mgmt-ipv4, link addresses of kind linux,
// startup-config of kind linux, which containerlab only checks exists) are
// accepted and listed in Lab.Ignored with the reason, for a CLI to print.
package clabfile
