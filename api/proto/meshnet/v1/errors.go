package meshnetv1

// The ErrorInfo of a meshnetd error that says more than its code: Domain,
// and each Reason a caller acts on.
const (
	// ErrorDomain is the domain of meshnet's ErrorInfo details.
	ErrorDomain = "meshnet.networkop.co.uk"
	// ReasonKernelBusy: the node's kernel answered busy (a netlink dump
	// interrupted by concurrent changes, EBUSY, EAGAIN) longer than
	// meshnetd retries it; the call is UNAVAILABLE, and a later one may
	// succeed. The daemon itself answered.
	ReasonKernelBusy = "KERNEL_BUSY"
)
