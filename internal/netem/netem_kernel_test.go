//go:build kernel

package netem

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/shaping"
)

// This host's kernel has no sch_netem: Apply must say so once and clearly,
// and leave the kernel's default qdisc in place.
func TestKernelApplyWithoutNetem(t *testing.T) {
	n, peer := newNS(t), newNS(t)
	addVeth(t, n, "eth1", peer, "eth1")
	c := openConn(t, n)

	err := c.Apply("eth1", shaping.Spec{Delay: 10 * time.Millisecond, Loss: 1})
	if !errors.Is(err, ErrNoNetem) {
		t.Fatalf("Apply on a kernel without sch_netem: %v, want ErrNoNetem", err)
	}
	want := "set netem on eth1: kernel has no sch_netem (load the sch_netem module: modprobe sch_netem)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	requireDefault(t, c, "eth1")
	st, err := c.Get("eth1")
	if err != nil || st.Kind != "noqueue" {
		t.Errorf("eth1 root after a failed Apply: %+v, %v; want noqueue", st, err)
	}
}

func TestKernelForeignQdiscLeftAlone(t *testing.T) {
	n, peer := newNS(t), newNS(t)
	addVeth(t, n, "eth1", peer, "eth1")
	addTbf(t, n, "eth1")
	c := openConn(t, n)

	requireTbf(t, c, "eth1")
	err := c.Apply("eth1", shaping.Spec{Delay: time.Millisecond})
	requireForeignErr(t, err, "eth1")
	if !strings.Contains(err.Error(), "tbf 1:") {
		t.Errorf("%q does not name the qdisc", err)
	}
	requireTbf(t, c, "eth1")
	requireForeignErr(t, c.Clear("eth1"), "eth1")
	requireTbf(t, c, "eth1")
}

func TestKernelClearWithoutQdisc(t *testing.T) {
	n, peer := newNS(t), newNS(t)
	addVeth(t, n, "eth1", peer, "eth1")
	if err := Clear(handleOf(n), "eth1"); err != nil {
		t.Fatalf("Clear with the default qdisc: %v", err)
	}
	requireDefault(t, openConn(t, n), "eth1")
}

func TestKernelMissingLink(t *testing.T) {
	n := newNS(t)
	err := Apply(handleOf(n), "nosuch0", shaping.Spec{})
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("Apply on a missing link: %v", err)
	}
}

// Validation happens before any netlink call.
func TestKernelApplyRejectsInvalidSpec(t *testing.T) {
	n := newNS(t)
	var fe *shaping.FieldError
	if err := Apply(handleOf(n), "lo", shaping.Spec{Loss: 200}); !errors.As(err, &fe) || fe.Field != "Loss" {
		t.Fatalf("got %v, want a shaping.FieldError on Loss", err)
	}
}
