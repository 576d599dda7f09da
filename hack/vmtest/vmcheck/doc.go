// Package vmcheck holds the vm tier's own checks: that the VM hack/vmtest
// boots has what the tier promises (a kernel with sch_netem, network
// namespaces, iproute2), proven by effects on traffic.
package vmcheck
