// Package topoconv converts between the Topology API (human units in YAML)
// and the gRPC API (typed units), in both directions, so that the spec a
// user writes and the status the kernel reports use the same spelling.
package topoconv

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

var distributions = map[v1beta1.Distribution]meshnetv1.NetemDistribution{
	v1beta1.DistributionUniform:      meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_UNIFORM,
	v1beta1.DistributionNormal:       meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL,
	v1beta1.DistributionPareto:       meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETO,
	v1beta1.DistributionParetoNormal: meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETONORMAL,
}

// NetemToProto converts a Topology netem block. nil gives an empty (no
// shaping) spec. Errors name the field.
func NetemToProto(n *v1beta1.Netem) (*meshnetv1.NetemSpec, error) {
	out := &meshnetv1.NetemSpec{}
	if n == nil {
		return out, nil
	}
	var errs []error
	dur := func(field string, d *v1beta1.Duration) *durationpb.Duration {
		if d == nil {
			return nil
		}
		v, err := d.Parse()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		return durationpb.New(v)
	}
	pct := func(field string, p *v1beta1.Percent) float64 {
		if p == nil {
			return 0
		}
		v, err := p.Parse()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		return v
	}
	out.Delay = dur("delay", n.Delay)
	out.Jitter = dur("jitter", n.Jitter)
	out.DelayCorrelationPercent = pct("delay_correlation", n.DelayCorrelation)
	if n.Distribution != nil {
		d, ok := distributions[*n.Distribution]
		if !ok {
			errs = append(errs, fmt.Errorf("distribution: unknown %q", *n.Distribution))
		}
		out.Distribution = d
	}
	out.LossPercent = pct("loss", n.Loss)
	out.LossCorrelationPercent = pct("loss_correlation", n.LossCorrelation)
	out.DuplicatePercent = pct("duplicate", n.Duplicate)
	out.DuplicateCorrelationPercent = pct("duplicate_correlation", n.DuplicateCorrelation)
	out.CorruptPercent = pct("corrupt", n.Corrupt)
	out.CorruptCorrelationPercent = pct("corrupt_correlation", n.CorruptCorrelation)
	out.ReorderPercent = pct("reorder", n.Reorder)
	out.ReorderCorrelationPercent = pct("reorder_correlation", n.ReorderCorrelation)
	if n.Gap != nil {
		out.Gap = uint32(*n.Gap)
	}
	if n.Rate != nil {
		v, err := n.Rate.Parse()
		if err != nil {
			errs = append(errs, fmt.Errorf("rate: %w", err))
		}
		out.RateBps = v
	}
	if n.Limit != nil {
		out.LimitPackets = uint32(*n.Limit)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("netem: %w", err)
	}
	return out, nil
}

// NetemFromProto spells kernel shaping in the Topology's units; fields that
// are off are left out. nil or a spec with nothing on gives nil.
func NetemFromProto(s *meshnetv1.NetemSpec) *v1beta1.Netem {
	if s == nil {
		return nil
	}
	n := &v1beta1.Netem{}
	empty := true
	dur := func(d *durationpb.Duration) *v1beta1.Duration {
		if v := d.AsDuration(); d != nil && v > 0 {
			empty = false
			s := v1beta1.DurationOf(v)
			return &s
		}
		return nil
	}
	pct := func(v float64) *v1beta1.Percent {
		if v > 0 {
			empty = false
			p := v1beta1.PercentOf(v)
			return &p
		}
		return nil
	}
	n.Delay = dur(s.Delay)
	n.Jitter = dur(s.Jitter)
	n.DelayCorrelation = pct(s.DelayCorrelationPercent)
	for name, d := range distributions {
		if d == s.Distribution && n.Jitter != nil {
			name := name
			n.Distribution = &name
		}
	}
	n.Loss = pct(s.LossPercent)
	n.LossCorrelation = pct(s.LossCorrelationPercent)
	n.Duplicate = pct(s.DuplicatePercent)
	n.DuplicateCorrelation = pct(s.DuplicateCorrelationPercent)
	n.Corrupt = pct(s.CorruptPercent)
	n.CorruptCorrelation = pct(s.CorruptCorrelationPercent)
	n.Reorder = pct(s.ReorderPercent)
	n.ReorderCorrelation = pct(s.ReorderCorrelationPercent)
	if s.Gap > 0 && n.Reorder != nil {
		gap := int32(s.Gap)
		n.Gap = &gap
	}
	if s.RateBps > 0 {
		empty = false
		r := v1beta1.RateOf(s.RateBps)
		n.Rate = &r
	}
	if empty {
		return nil
	}
	if s.LimitPackets > 0 {
		limit := int32(s.LimitPackets)
		n.Limit = &limit
	}
	return n
}
