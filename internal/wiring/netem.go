package wiring

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netem"
)

// NetemSpec converts a Topology's netem block into a netem.Spec.
func NetemSpec(n *v1beta1.Netem) (netem.Spec, error) {
	var s netem.Spec
	if n == nil {
		return s, nil
	}
	var errs []error
	dur := func(d *v1beta1.Duration, out *time.Duration) {
		if d == nil {
			return
		}
		v, err := d.Parse()
		if err != nil {
			errs = append(errs, err)
		}
		*out = v
	}
	pct := func(p *v1beta1.Percent, out *float64) {
		if p == nil {
			return
		}
		v, err := p.Parse()
		if err != nil {
			errs = append(errs, err)
		}
		*out = v
	}
	dur(n.Delay, &s.Delay)
	dur(n.Jitter, &s.Jitter)
	pct(n.DelayCorrelation, &s.DelayCorrelation)
	if n.Distribution != nil {
		s.Distribution = netem.Distribution(*n.Distribution)
	}
	pct(n.Loss, &s.Loss)
	pct(n.LossCorrelation, &s.LossCorrelation)
	pct(n.Duplicate, &s.Duplicate)
	pct(n.DuplicateCorrelation, &s.DuplicateCorrelation)
	pct(n.Corrupt, &s.Corrupt)
	pct(n.CorruptCorrelation, &s.CorruptCorrelation)
	pct(n.Reorder, &s.Reorder)
	pct(n.ReorderCorrelation, &s.ReorderCorrelation)
	if n.Gap != nil {
		s.Gap = uint32(*n.Gap)
	}
	if n.Rate != nil {
		v, err := n.Rate.Parse()
		if err != nil {
			errs = append(errs, err)
		}
		s.RateBps = v
	}
	if n.Limit != nil {
		s.Limit = uint32(*n.Limit)
	}
	if err := errors.Join(errs...); err != nil {
		return netem.Spec{}, fmt.Errorf("netem: %w", err)
	}
	return s, s.Validate()
}

// APINetem is the Topology's form of a netem.Spec read back from the
// kernel; zero fields are left out.
func APINetem(s netem.Spec) *v1beta1.Netem {
	n := &v1beta1.Netem{}
	dur := func(d time.Duration) *v1beta1.Duration {
		if d == 0 {
			return nil
		}
		v := v1beta1.DurationOf(d)
		return &v
	}
	pct := func(p float64) *v1beta1.Percent {
		if p == 0 {
			return nil
		}
		v := v1beta1.PercentOf(p)
		return &v
	}
	n.Delay, n.Jitter, n.DelayCorrelation = dur(s.Delay), dur(s.Jitter), pct(s.DelayCorrelation)
	n.Loss, n.LossCorrelation = pct(s.Loss), pct(s.LossCorrelation)
	n.Duplicate, n.DuplicateCorrelation = pct(s.Duplicate), pct(s.DuplicateCorrelation)
	n.Corrupt, n.CorruptCorrelation = pct(s.Corrupt), pct(s.CorruptCorrelation)
	n.Reorder, n.ReorderCorrelation = pct(s.Reorder), pct(s.ReorderCorrelation)
	if s.Gap != 0 {
		g := int32(s.Gap)
		n.Gap = &g
	}
	if s.RateBps != 0 {
		r := v1beta1.RateOf(s.RateBps)
		n.Rate = &r
	}
	if s.Limit != 0 {
		l := int32(s.Limit)
		n.Limit = &l
	}
	return n
}
