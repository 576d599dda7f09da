package podlinks

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/netem"
)

// TestKernelCode: one rule gives every call's code for a kernel failure,
// wrapped however deep, alone or among a pod's other links' failures.
func TestKernelCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("set netem on eth1: %w", netem.ErrNoNetem), codes.FailedPrecondition},
		{fmt.Errorf("link 2: %w", links.ErrUntrustedParent), codes.FailedPrecondition},
		{fmt.Errorf("route: %w", unix.ENETUNREACH), codes.FailedPrecondition},
		{fmt.Errorf("pod lab/r1: list links in netns /run/netns/x: %w", netlink.ErrDumpInterrupted), codes.Unavailable},
		{fmt.Errorf("link 7: %w", unix.EBUSY), codes.Unavailable},
		{utilerrors.NewAggregate([]error{errors.New("link 1: boom"), fmt.Errorf("link 2: %w", unix.EAGAIN)}), codes.Unavailable},
		{errors.Join(fmt.Errorf("links: %w", fmt.Errorf("read: %w", netlink.ErrDumpInterrupted))), codes.Unavailable},
		{fmt.Errorf("link 3: %w", unix.EINVAL), codes.Internal},
		{errors.New("link 4: file exists"), codes.Internal},
	} {
		if got := kernelCode(c.err); got != c.want {
			t.Errorf("kernelCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
