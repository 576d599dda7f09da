package topoconv

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func TestNetemRoundTrip(t *testing.T) {
	dist := v1beta1.DistributionNormal
	in := &v1beta1.Netem{
		Delay: ptr.To[v1beta1.Duration]("50ms"), Jitter: ptr.To[v1beta1.Duration]("5ms"),
		DelayCorrelation: ptr.To[v1beta1.Percent]("25"), Distribution: &dist,
		Loss: ptr.To[v1beta1.Percent]("0.5%"), LossCorrelation: ptr.To[v1beta1.Percent]("10%"),
		Duplicate: ptr.To[v1beta1.Percent]("1%"), Corrupt: ptr.To[v1beta1.Percent]("0.1%"),
		Reorder: ptr.To[v1beta1.Percent]("25%"), Gap: ptr.To[int32](5),
		Rate: ptr.To[v1beta1.Rate]("100mbit"), Limit: ptr.To[int32](10000),
	}
	p, err := NetemToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.Delay.AsDuration() != 50*time.Millisecond || p.LossPercent != 0.5 || p.RateBps != 100e6 || p.Gap != 5 || p.LimitPackets != 10000 {
		t.Errorf("NetemToProto = %v", p)
	}
	out := NetemFromProto(p)
	for name, pair := range map[string][2]string{
		"delay":             {"50ms", string(*out.Delay)},
		"jitter":            {"5ms", string(*out.Jitter)},
		"delay_correlation": {"25%", string(*out.DelayCorrelation)},
		"distribution":      {"normal", string(*out.Distribution)},
		"loss":              {"0.5%", string(*out.Loss)},
		"rate":              {"100mbit", string(*out.Rate)},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s: got %q, want %q", name, pair[1], pair[0])
		}
	}
}

func TestNetemFromProtoOfNothingIsNil(t *testing.T) {
	p, err := NetemToProto(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := NetemFromProto(p); got != nil {
		t.Errorf("NetemFromProto(empty) = %+v, want nil", got)
	}
}

func TestNetemToProtoNamesTheField(t *testing.T) {
	_, err := NetemToProto(&v1beta1.Netem{Rate: ptr.To[v1beta1.Rate]("fast")})
	if err == nil || !strings.Contains(err.Error(), "rate") {
		t.Errorf("err = %v, want one naming rate", err)
	}
}
