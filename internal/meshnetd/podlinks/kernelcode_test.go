package podlinks

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
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

// TestKernelBusySaysSo: an UNAVAILABLE for a busy kernel carries the
// ErrorInfo that tells the controller the daemon answered, from any call;
// other failures do not.
func TestKernelBusySaysSo(t *testing.T) {
	busy := func(err error) bool {
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == meshnetv1.ReasonKernelBusy && info.GetDomain() == meshnetv1.ErrorDomain {
				return true
			}
		}
		return false
	}
	interrupted := fmt.Errorf("list links in netns /run/netns/x: %w", netlink.ErrDumpInterrupted)
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kernelErr(interrupted), true},
		{applyError(ctx, podstore.Pod{Namespace: "lab", Name: "r1"}, []error{interrupted}, nil), true},
		{kernelErr(fmt.Errorf("link 3: %w", unix.EINVAL)), false},
		{applyError(ctx, podstore.Pod{Namespace: "lab", Name: "r1"}, []error{errors.New("link 4: file exists")}, nil), false},
	} {
		if got := busy(c.err); got != c.want || (c.want && status.Code(c.err) != codes.Unavailable) {
			t.Errorf("%v: kernel busy %v, want %v", c.err, got, c.want)
		}
	}
}
