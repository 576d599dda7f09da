package underlay

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the guard's drops as
// meshnet_underlay_dropped_packets_total{reason}: a count that grows is a
// pod or host sending into links it does not own (or a far end the node
// does not route back through the interface it came in on).
type Collector struct {
	g    *Guard
	desc *prometheus.Desc
	err  *prometheus.Desc
}

// NewCollector collects g's drops; a nil g exports nothing.
func NewCollector(g *Guard) *Collector {
	return &Collector{
		g: g,
		desc: prometheus.NewDesc("meshnet_underlay_dropped_packets_total",
			"VXLAN datagrams the node's underlay guard dropped: not from the link's far end (not-far-end), from its address on an interface the node does not route it through (spoofed), from the far end's node but not the far end's own source port (not-far-ends-port), or forwarded by the node to the links' port (forwarded).",
			[]string{"reason"}, nil),
		err: prometheus.NewDesc("meshnet_underlay_guard_unreadable",
			"1 when the underlay guard's counters could not be read at this scrape (meshnetd's table is missing or the kernel refused).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.err
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.g == nil {
		return
	}
	n, err := c.g.Dropped()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.err, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.err, prometheus.GaugeValue, 0)
	for _, r := range Reasons {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n[r]), string(r))
	}
}
