// Package links wires pods together in the kernel: veth pairs between pods
// of one node, VXLAN ends towards other nodes or external VTEPs, macvlan ends
// onto a node's NIC; and reads them (Reading) and changes their admin state,
// addresses and routes.
//
// Every operation goes through a netlink socket bound to the namespace it
// acts on (see Netns); no thread switches namespace. Links are made in one
// request directly in the pod's namespace, through the node's socket where
// the underlay must stay in the node (vxlan, macvlan). The Ensure functions
// are idempotent: they converge an existing interface, repair or replace a
// wrong one, and report what they did (a Result the caller logs with its pod,
// link and node attributes). Calls for the same interface names must not run
// concurrently; the caller serialises them per link.
package links
