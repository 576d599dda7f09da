package netemconv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/shaping"
)

func TestTopologyRoundTrip(t *testing.T) {
	dist := v1beta1.DistributionNormal
	in := &v1beta1.Netem{
		Delay: ptr.To[v1beta1.Duration]("50ms"), Jitter: ptr.To[v1beta1.Duration]("5ms"),
		DelayCorrelation: ptr.To[v1beta1.Percent]("25"), Distribution: &dist,
		Loss: ptr.To[v1beta1.Percent]("0.5%"), LossCorrelation: ptr.To[v1beta1.Percent]("10%"),
		Duplicate: ptr.To[v1beta1.Percent]("1%"), Corrupt: ptr.To[v1beta1.Percent]("0.1%"),
		Reorder: ptr.To[v1beta1.Percent]("25%"), Gap: ptr.To[int32](5),
		Rate: ptr.To[v1beta1.Rate]("100mbit"), Limit: ptr.To[int32](10000),
	}
	s, err := FromTopology(in)
	if err != nil {
		t.Fatal(err)
	}
	want := shaping.Spec{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, DelayCorrelation: 25, Distribution: shaping.DistributionNormal,
		Loss: 0.5, LossCorrelation: 10, Duplicate: 1, Corrupt: 0.1, Reorder: 25, Gap: 5, RateBps: 100e6, Limit: 10000}
	if s != want {
		t.Fatalf("FromTopology = %+v, want %+v", s, want)
	}
	out := ToTopology(s)
	for name, pair := range map[string][2]string{
		"delay": {"50ms", string(*out.Delay)}, "jitter": {"5ms", string(*out.Jitter)},
		"delay_correlation": {"25%", string(*out.DelayCorrelation)}, "distribution": {"normal", string(*out.Distribution)},
		"loss": {"0.5%", string(*out.Loss)}, "reorder": {"25%", string(*out.Reorder)}, "rate": {"100mbit", string(*out.Rate)},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s: got %q, want %q", name, pair[1], pair[0])
		}
	}
	if *out.Gap != 5 || *out.Limit != 10000 {
		t.Errorf("gap %d limit %d, want 5 and 10000", *out.Gap, *out.Limit)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	s := shaping.Spec{Delay: time.Second, Jitter: time.Millisecond, Distribution: shaping.DistributionPareto, Loss: 2, Reorder: 5, Gap: 2, RateBps: 8e6, Limit: 10000}
	back, err := FromProto(ToProto(s))
	if err != nil || back != s {
		t.Fatalf("round trip %+v (%v), want %+v", back, err, s)
	}
}

func TestNothingIsNil(t *testing.T) {
	for _, n := range []*v1beta1.Netem{nil, {}} {
		s, err := FromTopology(n)
		if err != nil || s != (shaping.Spec{}) {
			t.Errorf("FromTopology(%+v) = %+v, %v; want no shaping", n, s, err)
		}
	}
	if got := ToTopology(shaping.Spec{Limit: 1000}); got != nil {
		t.Errorf("ToTopology(nothing on) = %+v, want nil", got)
	}
	if s, err := FromProto(nil); err != nil || s != (shaping.Spec{}) {
		t.Errorf("FromProto(nil) = %+v, %v", s, err)
	}
}

// TestErrorsNameTheFormsField: the same rule, named as each form spells it.
func TestErrorsNameTheFormsField(t *testing.T) {
	_, err := FromTopology(&v1beta1.Netem{Delay: ptr.To[v1beta1.Duration]("10ms"), DelayCorrelation: ptr.To[v1beta1.Percent]("25")})
	var fe *shaping.FieldError
	if !errors.As(err, &fe) || fe.Field != "delay_correlation" || fe.Reason != "needs jitter" {
		t.Errorf("topology form: %v, want delay_correlation: needs jitter", err)
	}
	_, err = FromProto(&meshnetv1.NetemSpec{DelayCorrelationPercent: 25})
	if !errors.As(err, &fe) || fe.Field != "delay_correlation_percent" || fe.Reason != "needs jitter" {
		t.Errorf("API form: %v, want delay_correlation_percent: needs jitter", err)
	}
	_, err = FromTopology(&v1beta1.Netem{Rate: ptr.To[v1beta1.Rate]("fast"), Loss: ptr.To[v1beta1.Percent]("120")})
	if err == nil || !strings.Contains(err.Error(), "rate") || !strings.Contains(err.Error(), "loss") {
		t.Errorf("two bad fields: %v, want both named", err)
	}
}

func TestWords(t *testing.T) {
	for _, tc := range []struct {
		spec shaping.Spec
		want string
	}{
		{shaping.Spec{}, ""},
		{shaping.Spec{Loss: 1}, "loss 1%"},
		{shaping.Spec{Limit: 10000}, ""},
		{shaping.Spec{Delay: 40 * time.Millisecond, Jitter: 5 * time.Millisecond, DelayCorrelation: 25,
			Distribution: shaping.DistributionNormal, Loss: 0.5, LossCorrelation: 10, Duplicate: 1, Corrupt: 0.1,
			Reorder: 25, Gap: 5, RateBps: 1e9},
			"delay 40ms 5ms 25% distribution normal loss 0.5% 10% duplicate 1% corrupt 0.1% reorder 25% gap 5 rate 1gbit"},
	} {
		if got := Words(tc.spec); got != tc.want {
			t.Errorf("Words(%+v) = %q, want %q", tc.spec, got, tc.want)
		}
	}
}
