package wiring

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netem"
)

func TestNetemSpecRoundTrip(t *testing.T) {
	in := &v1beta1.Netem{
		Delay: ptr.To[v1beta1.Duration]("50ms"), Jitter: ptr.To[v1beta1.Duration]("5ms"),
		Loss: ptr.To[v1beta1.Percent]("0.5%"), Rate: ptr.To[v1beta1.Rate]("100mbit"),
		Reorder: ptr.To[v1beta1.Percent]("25"), Gap: ptr.To[int32](5), Limit: ptr.To[int32](20000),
	}
	s, err := NetemSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	want := netem.Spec{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.5, RateBps: 100e6, Reorder: 25, Gap: 5, Limit: 20000}
	if s != want {
		t.Fatalf("NetemSpec = %+v, want %+v", s, want)
	}
	back := APINetem(s)
	if *back.Delay != "50ms" || *back.Jitter != "5ms" || *back.Loss != "0.5%" || *back.Rate != "100mbit" || *back.Reorder != "25%" || *back.Gap != 5 || *back.Limit != 20000 {
		t.Errorf("APINetem = %+v", back)
	}
}

func TestNetemSpecRejectsWhatTheKernelWould(t *testing.T) {
	for _, n := range []*v1beta1.Netem{
		{Jitter: ptr.To[v1beta1.Duration]("5ms")},    // jitter needs delay
		{Delay: ptr.To[v1beta1.Duration]("fast")},    // not a duration
		{Loss: ptr.To[v1beta1.Percent]("120")},       // not a percentage
		{Rate: ptr.To[v1beta1.Rate]("100 furlongs")}, // unknown unit
	} {
		if _, err := NetemSpec(n); err == nil {
			t.Errorf("NetemSpec(%+v) accepted", n)
		}
	}
}
