package links

import (
	"hash/fnv"
	"strconv"

	"github.com/meshnet/meshnet/api/v1beta1"
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
// 250, 2.9% for 1,000, 39% for 4,096. The kernel refuses the second device
// (ErrVNIInUse), so a link has VNIAttempts candidates (VNIs): the node that
// makes the link's first end takes the first candidate free there and tells
// the other node, which accepts any candidate.
func VNI(namespace, podA, podB string, uid int) uint32 { return vniAt(namespace, podA, podB, uid, 0) }

// VNIAttempts is how many VNIs a link may take.
const VNIAttempts = 4

// VNIs are a link's candidate VNIs, VNI's first. Two links share all of
// them with a chance of about (n/16777215)^VNIAttempts for n links.
func VNIs(namespace, podA, podB string, uid int) []uint32 {
	out := make([]uint32, VNIAttempts)
	for i := range out {
		out[i] = vniAt(namespace, podA, podB, uid, i)
	}
	return out
}

func vniAt(namespace, podA, podB string, uid, attempt int) uint32 {
	if podB < podA {
		podA, podB = podB, podA
	}
	h := fnv.New32a()
	// NUL cannot appear in Kubernetes names, so the fields cannot run into
	// each other ("a"+"bc" vs "ab"+"c").
	fields := []string{namespace, podA, podB, strconv.Itoa(uid)}
	if attempt > 0 {
		fields = append(fields, strconv.Itoa(attempt))
	}
	for _, s := range fields {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	sum := h.Sum32()
	v := (sum >> 24) ^ (sum & v1beta1.MaxVNI) // xor-fold, as FNV's authors advise for short hashes
	if v == 0 {
		v = v1beta1.MaxVNI
	}
	return v
}
