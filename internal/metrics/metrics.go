// Package metrics exports meshnetd's Prometheus metrics: per-link kernel
// counters, admin state, carrier and netem settings of every link of every
// pod in the pod store, read from the kernel at scrape time (nothing polls
// in the background), and the latency of meshnetd's gRPC calls.
package metrics

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netns"

	"github.com/meshnet/meshnet/internal/links"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/podstore"
)

// linkLabels label every per-link metric.
var linkLabels = []string{"namespace", "pod", "interface", "peer", "uid"}

// Links is a prometheus.Collector of the links in a pod store.
type Links struct {
	pods *podstore.Store
	log  *slog.Logger
	// workers bounds how many pods are read at once.
	workers int

	counters                     []counterDesc
	adminUp, carrier, unreadable *prometheus.Desc
	netem                        []netemDesc
	netemDrops                   *prometheus.Desc
}

type counterDesc struct {
	desc  *prometheus.Desc
	value func(links.Counters) uint64
}

type netemDesc struct {
	desc  *prometheus.Desc
	value func(netem.Spec) float64
}

// NewLinks returns a collector of the links recorded in pods; log receives
// the links that could not be read.
func NewLinks(pods *podstore.Store, log *slog.Logger) *Links {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("meshnet_"+name, help, linkLabels, nil)
	}
	c := &Links{pods: pods, log: log, workers: 8}
	c.counters = []counterDesc{
		{d("link_rx_bytes_total", "Bytes received by the link's interface."), func(c links.Counters) uint64 { return c.RxBytes }},
		{d("link_tx_bytes_total", "Bytes sent by the link's interface."), func(c links.Counters) uint64 { return c.TxBytes }},
		{d("link_rx_packets_total", "Packets received by the link's interface."), func(c links.Counters) uint64 { return c.RxPackets }},
		{d("link_tx_packets_total", "Packets sent by the link's interface."), func(c links.Counters) uint64 { return c.TxPackets }},
		{d("link_rx_drops_total", "Received packets the interface dropped."), func(c links.Counters) uint64 { return c.RxDropped }},
		{d("link_tx_drops_total", "Packets the interface dropped on send."), func(c links.Counters) uint64 { return c.TxDropped }},
	}
	c.adminUp = d("link_admin_up", "1 when the link's interface is administratively up, 0 when down (a cable pull).")
	c.carrier = d("link_carrier", "1 when the link's interface has carrier (IFF_LOWER_UP).")
	c.unreadable = prometheus.NewDesc("meshnet_links_unreadable", "Links of the pod store that could not be read from the kernel at this scrape (meshnetd logs why); they have no link metrics.", nil, nil)
	c.netem = []netemDesc{
		{d("netem_delay_seconds", "netem delay added to every packet leaving the interface."), func(s netem.Spec) float64 { return s.Delay.Seconds() }},
		{d("netem_jitter_seconds", "netem jitter of the delay."), func(s netem.Spec) float64 { return s.Jitter.Seconds() }},
		{d("netem_loss_percent", "netem random loss, percent."), func(s netem.Spec) float64 { return s.Loss }},
		{d("netem_duplicate_percent", "netem duplication, percent."), func(s netem.Spec) float64 { return s.Duplicate }},
		{d("netem_corrupt_percent", "netem corruption, percent."), func(s netem.Spec) float64 { return s.Corrupt }},
		{d("netem_reorder_percent", "netem reordering, percent."), func(s netem.Spec) float64 { return s.Reorder }},
		{d("netem_rate_bits_per_second", "netem egress rate limit; 0 is unlimited."), func(s netem.Spec) float64 { return float64(s.RateBps) }},
		{d("netem_limit_packets", "netem queue limit."), func(s netem.Spec) float64 { return float64(s.Limit) }},
	}
	c.netemDrops = d("netem_drops_total", "Packets the root netem qdisc dropped (loss and queue overflow).")
	return c
}

// Describe implements prometheus.Collector.
func (c *Links) Describe(ch chan<- *prometheus.Desc) {
	for _, cd := range c.counters {
		ch <- cd.desc
	}
	for _, nd := range c.netem {
		ch <- nd.desc
	}
	for _, d := range []*prometheus.Desc{c.adminUp, c.carrier, c.unreadable, c.netemDrops} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads each pod's namespace
// with one link, one address and one qdisc dump (links.ReadAll), and the
// settings of the links shaped with netem.
func (c *Links) Collect(ch chan<- prometheus.Metric) {
	pods := c.pods.List()
	work := make(chan podstore.Pod)
	var wg sync.WaitGroup
	var unreadable atomic.Int64
	for range min(c.workers, len(pods)) {
		wg.Go(func() {
			for p := range work {
				unreadable.Add(int64(c.collectPod(p, ch)))
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	ch <- prometheus.MustNewConstMetric(c.unreadable, prometheus.GaugeValue, float64(unreadable.Load()))
}

func (c *Links) collectPod(p podstore.Pod, ch chan<- prometheus.Metric) (unreadable int) {
	if len(p.Links) == 0 {
		return 0
	}
	fail := func(err error, ls ...podstore.Link) int {
		for _, l := range ls {
			c.log.Warn("metrics: cannot read link", "pod", p.Key().String(), "link", l.LocalIntf, "err", err)
		}
		return len(ls)
	}
	n, err := links.OpenNetns(p.Netns)
	if err != nil {
		return fail(err, p.Links...)
	}
	defer n.Close()
	ifaces, err := links.ReadAll(n)
	if err != nil {
		return fail(err, p.Links...)
	}
	q := &podNetem{c: c, pod: p, handle: netns.None()}
	defer q.close()
	for _, l := range p.Links {
		st, ok := ifaces[l.LocalIntf]
		if !ok {
			unreadable += fail(errMissing, l)
			continue
		}
		lv := []string{p.Namespace, p.Name, l.LocalIntf, l.PeerPod, strconv.Itoa(l.UID)}
		for _, cd := range c.counters {
			ch <- prometheus.MustNewConstMetric(cd.desc, prometheus.CounterValue, float64(cd.value(st.Counters)), lv...)
		}
		ch <- prometheus.MustNewConstMetric(c.adminUp, prometheus.GaugeValue, b2f(st.AdminUp), lv...)
		ch <- prometheus.MustNewConstMetric(c.carrier, prometheus.GaugeValue, b2f(st.Carrier), lv...)
		ns, ok := q.get(l.LocalIntf, st)
		if !ok {
			continue
		}
		for _, nd := range c.netem {
			ch <- prometheus.MustNewConstMetric(nd.desc, prometheus.GaugeValue, nd.value(ns.Spec), lv...)
		}
		ch <- prometheus.MustNewConstMetric(c.netemDrops, prometheus.CounterValue, float64(ns.Stats.Drops), lv...)
	}
	return unreadable
}

// podNetem reads the netem roots of a pod's interfaces, opening its netem
// connection only when an interface has a root qdisc other than the
// kernel's default: most links of a lab are not shaped.
type podNetem struct {
	c      *Links
	pod    podstore.Pod
	conn   *netem.Conn
	handle netns.NsHandle
	failed bool
}

// get returns the netem root of intf, if it has one.
func (q *podNetem) get(intf string, iface links.Interface) (netem.State, bool) {
	if iface.RootHandle == 0 || iface.RootQdisc != "netem" || q.failed {
		return netem.State{}, false
	}
	if q.conn == nil {
		h, err := netns.GetFromPath(q.pod.Netns)
		if err == nil {
			q.handle = h
			q.conn, err = netem.Open(h)
		}
		if err != nil {
			q.c.log.Warn("metrics: cannot read qdiscs", "pod", q.pod.Key().String(), "err", err)
			q.failed = true
			return netem.State{}, false
		}
	}
	st, err := q.conn.Get(intf)
	if err != nil {
		q.c.log.Warn("metrics: cannot read qdisc", "pod", q.pod.Key().String(), "link", intf, "err", err)
		return netem.State{}, false
	}
	if st.Kind != "netem" || st.Undecoded != nil {
		return netem.State{}, false
	}
	return st, true
}

func (q *podNetem) close() {
	if q.conn != nil {
		q.conn.Close()
	}
	if q.handle.IsOpen() {
		q.handle.Close()
	}
}

var errMissing = errors.New("interface missing from the pod's network namespace")

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
