package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// Counts are counters the API server keeps by kind, as it counts them.
type Counts map[string]float64

// Requests counts the API server's requests by verb and resource ("PATCH
// topologies", "WATCH pods"), from its apiserver_request_total: what a
// component's chattiness costs the API server.
func (c *ControlPlane) Requests(ctx context.Context) (Counts, error) {
	families, err := c.metrics(ctx)
	if err != nil {
		return nil, err
	}
	r := Counts{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, resource, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if resource == "" {
			continue // /metrics, /healthz and the like
		}
		if sub != "" {
			resource += "/" + sub
		}
		r[verb+" "+resource] += m.GetCounter().GetValue()
	}
	return r, nil
}

// WatchEvents counts, by resource ("topologies"), the watch events the API
// server has sent to all its watchers, bookmarks too
// (apiserver_watch_events_total): what its watches cost their clients to
// decode.
func (c *ControlPlane) WatchEvents(ctx context.Context) (Counts, error) {
	families, err := c.metrics(ctx)
	if err != nil {
		return nil, err
	}
	events := Counts{}
	for _, m := range families["apiserver_watch_events_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				events[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return events, nil
}

func (c *ControlPlane) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse the API server's /metrics: %w", err)
	}
	return families, nil
}

// Sub is what was counted between before and r, without the kinds that
// counted none.
func (r Counts) Sub(before Counts) Counts {
	d := Counts{}
	for k, n := range r {
		if n -= before[k]; n > 0 {
			d[k] = n
		}
	}
	return d
}

// Total is the count of every kind.
func (r Counts) Total() float64 {
	var t float64
	for _, n := range r {
		t += n
	}
	return t
}

// String lists the kinds by name: "GET topologies 2, PATCH topologies/status 1".
func (r Counts) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, r[k]))
	}
	return strings.Join(parts, ", ")
}

// CPU is the processor time kube-apiserver and etcd have used so far, when
// this process started them (the tests' control plane); empty otherwise.
func (c *ControlPlane) CPU() (proccpu.Usage, error) {
	return proccpu.Children("kube-apiserver", "etcd")
}
