package links

import (
	"hash/fnv"
	"strconv"
)

// VNI derives the VXLAN network identifier of a link from what both of its
// ends know: the Topology namespace, the two pod names (in either order) and
// the link's uid. Both nodes compute the same value without coordinating.
//
// meshnet-cni used 5000+uid, so two namespaces reusing uids over the same
// nodes collided ("file exists"). Here the inputs are hashed with FNV-1a
// (32 bits) and folded to 24 bits, 0 excluded. Values are spread evenly over
// 16,777,215, so among n VXLAN links of one node the chance that any two
// share a VNI is about 1-exp(-n²/(2·16777215)): 0.002% for 25, 0.19% for
// 250, 2.9% for 1,000, 24% for 3,000. The kernel refuses the second device
// (ErrVNIInUse) and the daemon reports it; a Topology can then name an
// explicit VNI for that link.
func VNI(namespace, podA, podB string, uid int) uint32 {
	if podB < podA {
		podA, podB = podB, podA
	}
	h := fnv.New32a()
	// NUL cannot appear in Kubernetes names, so the fields cannot run into
	// each other ("a"+"bc" vs "ab"+"c").
	for _, s := range []string{namespace, podA, podB, strconv.Itoa(uid)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	sum := h.Sum32()
	v := (sum >> 24) ^ (sum & MaxVNI) // xor-fold, as FNV's authors advise for short hashes
	if v == 0 {
		v = MaxVNI
	}
	return v
}
