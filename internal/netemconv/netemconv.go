// Package netemconv converts netem shaping between its three forms: the
// Topology's netem block (human units: "50ms", "1%", "100mbit"), the gRPC
// API's NetemSpec (typed units), and shaping.Spec, the one the kernel code
// takes and the hub of the conversions: every form converts to and from
// shaping.Spec, once each way, and every form is validated by shaping.Spec's
// Validate, so a block is valid in one form exactly when it is in the
// others. Errors name the field as the form spells it.
package netemconv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/shaping"
)

// topologyFields and protoFields name shaping.Spec's fields as the Topology
// and the API spell them.
var (
	topologyFields = map[string]string{
		"Delay": "delay", "Jitter": "jitter", "DelayCorrelation": "delay_correlation",
		"Distribution": "distribution", "Loss": "loss", "LossCorrelation": "loss_correlation",
		"Duplicate": "duplicate", "DuplicateCorrelation": "duplicate_correlation",
		"Corrupt": "corrupt", "CorruptCorrelation": "corrupt_correlation",
		"Reorder": "reorder", "ReorderCorrelation": "reorder_correlation",
		"Gap": "gap", "RateBps": "rate", "Limit": "limit", "ECN": "ecn",
	}
	protoFields = map[string]string{
		"Delay": "delay", "Jitter": "jitter", "DelayCorrelation": "delay_correlation_percent",
		"Distribution": "distribution", "Loss": "loss_percent", "LossCorrelation": "loss_correlation_percent",
		"Duplicate": "duplicate_percent", "DuplicateCorrelation": "duplicate_correlation_percent",
		"Corrupt": "corrupt_percent", "CorruptCorrelation": "corrupt_correlation_percent",
		"Reorder": "reorder_percent", "ReorderCorrelation": "reorder_correlation_percent",
		"Gap": "gap", "RateBps": "rate_bps", "Limit": "limit_packets", "ECN": "ecn",
	}
	protoDistributions = map[meshnetv1.NetemDistribution]shaping.Distribution{
		meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_UNSPECIFIED:  shaping.DistributionNone,
		meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_UNIFORM:      shaping.DistributionUniform,
		meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_NORMAL:       shaping.DistributionNormal,
		meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETO:       shaping.DistributionPareto,
		meshnetv1.NetemDistribution_NETEM_DISTRIBUTION_PARETONORMAL: shaping.DistributionParetoNormal,
	}
)

// FromTopology converts and validates a Topology's netem block; nil is no
// shaping. Each error is a *shaping.FieldError naming the Topology's field
// ("delay_correlation: needs jitter").
func FromTopology(n *v1beta1.Netem) (shaping.Spec, error) {
	var s shaping.Spec
	if n == nil {
		return s, nil
	}
	var errs []error
	bad := func(field string, err error) {
		errs = append(errs, &shaping.FieldError{Field: field, Reason: err.Error()})
	}
	dur := func(field string, d *v1beta1.Duration, out *time.Duration) {
		if d == nil {
			return
		}
		v, err := d.Parse()
		if err != nil {
			bad(field, err)
		}
		*out = v
	}
	pct := func(field string, p *v1beta1.Percent, out *float64) {
		if p == nil {
			return
		}
		v, err := p.Parse()
		if err != nil {
			bad(field, err)
		}
		*out = v
	}
	dur("delay", n.Delay, &s.Delay)
	dur("jitter", n.Jitter, &s.Jitter)
	pct("delay_correlation", n.DelayCorrelation, &s.DelayCorrelation)
	if n.Distribution != nil {
		s.Distribution = shaping.Distribution(*n.Distribution)
	}
	pct("loss", n.Loss, &s.Loss)
	pct("loss_correlation", n.LossCorrelation, &s.LossCorrelation)
	pct("duplicate", n.Duplicate, &s.Duplicate)
	pct("duplicate_correlation", n.DuplicateCorrelation, &s.DuplicateCorrelation)
	pct("corrupt", n.Corrupt, &s.Corrupt)
	pct("corrupt_correlation", n.CorruptCorrelation, &s.CorruptCorrelation)
	pct("reorder", n.Reorder, &s.Reorder)
	pct("reorder_correlation", n.ReorderCorrelation, &s.ReorderCorrelation)
	if n.Gap != nil {
		if *n.Gap < 1 {
			bad("gap", fmt.Errorf("%d is less than 1", *n.Gap))
		}
		s.Gap = uint32(max(*n.Gap, 0))
	}
	if n.Rate != nil {
		v, err := n.Rate.Parse()
		if err != nil {
			bad("rate", err)
		}
		if v%8 != 0 { // the kernel counts whole bytes per second
			v = max(8, (v+4)/8*8)
		}
		s.RateBps = v
	}
	if n.Limit != nil {
		if *n.Limit < 1 {
			bad("limit", fmt.Errorf("%d is less than 1", *n.Limit))
		}
		s.Limit = uint32(max(*n.Limit, 0))
	}
	if n.Delay != nil && s.Delay == 0 && len(errs) == 0 {
		bad("delay", errors.New("must be more than 0s; leave delay out for none"))
	}
	errs = append(errs, missingNeeds(n)...)
	if len(errs) > 0 {
		return shaping.Spec{}, errors.Join(errs...)
	}
	zeroDependents(&s)
	return s, rename(s.Validate(), topologyFields)
}

// missingNeeds is the CRD's rules (api/v1beta1): a field that needs another
// needs it present.
func missingNeeds(n *v1beta1.Netem) []error {
	var errs []error
	needs := func(field string, has bool, needed string, hasNeeded bool) {
		if has && !hasNeeded {
			errs = append(errs, &shaping.FieldError{Field: field, Reason: "needs " + needed})
		}
	}
	needs("jitter", n.Jitter != nil, "delay", n.Delay != nil)
	needs("delay_correlation", n.DelayCorrelation != nil, "jitter", n.Jitter != nil)
	needs("distribution", n.Distribution != nil, "delay and jitter", n.Delay != nil && n.Jitter != nil)
	needs("loss_correlation", n.LossCorrelation != nil, "loss", n.Loss != nil)
	needs("duplicate_correlation", n.DuplicateCorrelation != nil, "duplicate", n.Duplicate != nil)
	needs("corrupt_correlation", n.CorruptCorrelation != nil, "corrupt", n.Corrupt != nil)
	needs("reorder", n.Reorder != nil, "delay", n.Delay != nil)
	needs("reorder_correlation", n.ReorderCorrelation != nil, "reorder", n.Reorder != nil)
	needs("gap", n.Gap != nil, "reorder", n.Reorder != nil)
	return errs
}

// zeroDependents turns off what depends on a base of zero, as no shaping
// at all does.
func zeroDependents(s *shaping.Spec) {
	if s.Jitter == 0 {
		s.DelayCorrelation, s.Distribution = 0, shaping.DistributionNone
	}
	if s.Loss == 0 {
		s.LossCorrelation = 0
	}
	if s.Duplicate == 0 {
		s.DuplicateCorrelation = 0
	}
	if s.Corrupt == 0 {
		s.CorruptCorrelation = 0
	}
	if s.Reorder == 0 {
		s.ReorderCorrelation, s.Gap = 0, 0
	}
}

// ToTopology spells s in the Topology's units, as the status shows shaping
// read back from the kernel: fields that are off are left out, a
// distribution only with jitter, a gap only with reorder, and nothing on
// at all gives nil.
func ToTopology(s shaping.Spec) *v1beta1.Netem {
	n := &v1beta1.Netem{}
	empty := true
	dur := func(d time.Duration) *v1beta1.Duration {
		if d <= 0 {
			return nil
		}
		empty = false
		v := v1beta1.DurationOf(d)
		return &v
	}
	pct := func(p float64) *v1beta1.Percent {
		if p <= 0 {
			return nil
		}
		empty = false
		v := v1beta1.PercentOf(p)
		return &v
	}
	n.Delay, n.Jitter, n.DelayCorrelation = dur(s.Delay), dur(s.Jitter), pct(s.DelayCorrelation)
	if s.Distribution != shaping.DistributionNone && n.Jitter != nil {
		d := v1beta1.Distribution(s.Distribution)
		n.Distribution = &d
	}
	n.Loss, n.LossCorrelation = pct(s.Loss), pct(s.LossCorrelation)
	n.Duplicate, n.DuplicateCorrelation = pct(s.Duplicate), pct(s.DuplicateCorrelation)
	n.Corrupt, n.CorruptCorrelation = pct(s.Corrupt), pct(s.CorruptCorrelation)
	n.Reorder, n.ReorderCorrelation = pct(s.Reorder), pct(s.ReorderCorrelation)
	if s.Gap > 0 && n.Reorder != nil {
		g := int32(s.Gap)
		n.Gap = &g
	}
	if s.RateBps > 0 {
		empty = false
		r := v1beta1.RateOf(s.RateBps)
		n.Rate = &r
	}
	if empty {
		return nil
	}
	if s.Limit > 0 {
		l := int32(s.Limit)
		n.Limit = &l
	}
	return n
}

// Words spells s as tc does ("delay 40ms 5ms loss 1%"): the one spelling
// of shaping for people, in the data API's detail__netem and in kubectl
// meshnet. Empty when s shapes nothing; the queue limit is left out, as tc
// leaves out its default.
func Words(s shaping.Spec) string {
	var w []string
	pct := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "%" }
	opt := func(name string, v, corr float64) {
		if v > 0 {
			w = append(w, name, pct(v))
			if corr > 0 {
				w = append(w, pct(corr))
			}
		}
	}
	if s.Delay > 0 {
		w = append(w, "delay", s.Delay.String())
		if s.Jitter > 0 {
			w = append(w, s.Jitter.String())
			if s.DelayCorrelation > 0 {
				w = append(w, pct(s.DelayCorrelation))
			}
			if s.Distribution != shaping.DistributionNone {
				w = append(w, "distribution", string(s.Distribution))
			}
		}
	}
	opt("loss", s.Loss, s.LossCorrelation)
	if s.ECN && s.Loss > 0 {
		w = append(w, "ecn")
	}
	opt("duplicate", s.Duplicate, s.DuplicateCorrelation)
	opt("corrupt", s.Corrupt, s.CorruptCorrelation)
	opt("reorder", s.Reorder, s.ReorderCorrelation)
	if s.Gap > 0 && s.Reorder > 0 {
		w = append(w, "gap", strconv.FormatUint(uint64(s.Gap), 10))
	}
	if s.RateBps > 0 {
		w = append(w, "rate", string(v1beta1.RateOf(s.RateBps)))
	}
	return strings.Join(w, " ")
}

// FromProto converts and validates the API's NetemSpec; nil is no shaping.
// Each error is a *shaping.FieldError naming the API's field
// ("delay_correlation_percent: needs jitter").
func FromProto(p *meshnetv1.NetemSpec) (shaping.Spec, error) {
	var errs []error
	duration := func(name string, d *durationpb.Duration) time.Duration {
		if d == nil {
			return 0
		}
		if err := d.CheckValid(); err != nil {
			errs = append(errs, &shaping.FieldError{Field: name, Reason: err.Error()})
			return 0
		}
		if d.AsDuration() < 0 {
			errs = append(errs, &shaping.FieldError{Field: name, Reason: fmt.Sprintf("%v is negative", d.AsDuration())})
			return 0
		}
		return d.AsDuration()
	}
	dist, ok := protoDistributions[p.GetDistribution()]
	if !ok {
		errs = append(errs, &shaping.FieldError{Field: "distribution", Reason: fmt.Sprintf("unknown value %d", p.GetDistribution())})
	}
	s := shaping.Spec{
		Delay:                duration("delay", p.GetDelay()),
		Jitter:               duration("jitter", p.GetJitter()),
		DelayCorrelation:     p.GetDelayCorrelationPercent(),
		Distribution:         dist,
		Loss:                 p.GetLossPercent(),
		LossCorrelation:      p.GetLossCorrelationPercent(),
		Duplicate:            p.GetDuplicatePercent(),
		DuplicateCorrelation: p.GetDuplicateCorrelationPercent(),
		Corrupt:              p.GetCorruptPercent(),
		CorruptCorrelation:   p.GetCorruptCorrelationPercent(),
		Reorder:              p.GetReorderPercent(),
		ReorderCorrelation:   p.GetReorderCorrelationPercent(),
		Gap:                  p.GetGap(),
		RateBps:              p.GetRateBps(),
		Limit:                p.GetLimitPackets(),
	}
	if len(errs) > 0 {
		return shaping.Spec{}, errors.Join(errs...)
	}
	return s, rename(s.Validate(), protoFields)
}

// ToProto is s in the API's units.
func ToProto(s shaping.Spec) *meshnetv1.NetemSpec {
	p := &meshnetv1.NetemSpec{
		DelayCorrelationPercent:     s.DelayCorrelation,
		LossPercent:                 s.Loss,
		LossCorrelationPercent:      s.LossCorrelation,
		DuplicatePercent:            s.Duplicate,
		DuplicateCorrelationPercent: s.DuplicateCorrelation,
		CorruptPercent:              s.Corrupt,
		CorruptCorrelationPercent:   s.CorruptCorrelation,
		ReorderPercent:              s.Reorder,
		ReorderCorrelationPercent:   s.ReorderCorrelation,
		Gap:                         s.Gap,
		RateBps:                     s.RateBps,
		LimitPackets:                s.Limit,
	}
	if s.Delay != 0 {
		p.Delay = durationpb.New(s.Delay)
	}
	if s.Jitter != 0 {
		p.Jitter = durationpb.New(s.Jitter)
	}
	for k, d := range protoDistributions {
		if d == s.Distribution {
			p.Distribution = k
		}
	}
	return p
}

// rename rewrites the field names of shaping.Spec's Validate errors, in the
// field and in the reason ("needs Jitter"), into a form's names.
func rename(err error, names map[string]string) error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range unjoin(err) {
		var fe *shaping.FieldError
		if !errors.As(e, &fe) {
			out = append(out, e)
			continue
		}
		field, ok := names[fe.Field]
		if !ok {
			field = fe.Field
		}
		reason := fe.Reason
		for _, w := range strings.Fields(fe.Reason) {
			w = strings.Trim(w, ",.()")
			if name, ok := names[w]; ok {
				reason = strings.ReplaceAll(reason, w, name)
			}
		}
		out = append(out, &shaping.FieldError{Field: field, Reason: reason})
	}
	return errors.Join(out...)
}

// Fields lists the field errors of a From function's error, to be named
// under their block's path ("spec.links[0].netem." + Field); an error that
// is not one is returned with an empty Field.
func Fields(err error) []*shaping.FieldError {
	if err == nil {
		return nil
	}
	var out []*shaping.FieldError
	for _, e := range unjoin(err) {
		var fe *shaping.FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		} else {
			out = append(out, &shaping.FieldError{Reason: e.Error()})
		}
	}
	return out
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
