// Package metrics exports meshnetd's Prometheus metrics: per-link kernel
// counters, admin state, carrier and netem settings of every link of every
// pod in the pod store, read from the kernel at scrape time (nothing polls
// in the background) with the reader the API uses (podlinks'), and the
// latency of meshnetd's gRPC calls.
package metrics

import (
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/shaping"
)

// Reader reads a pod's links back from the kernel (podlinks.Reconciler's
// ReadPod); a link it could not read has no counters.
type Reader func(podstore.Pod) ([]*meshnetv1.LinkStatus, error)

// linkLabels label every per-link metric.
var linkLabels = []string{"namespace", "pod", "interface", "peer", "uid"}

// Links is a prometheus.Collector of the links in a pod store.
type Links struct {
	pods *podstore.Store
	read Reader
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
	value func(*meshnetv1.LinkCounters) uint64
}

type netemDesc struct {
	desc  *prometheus.Desc
	value func(shaping.Spec) float64
}

// NewLinks returns a collector of the links recorded in pods, read with
// read; log receives the links that could not be read.
func NewLinks(pods *podstore.Store, read Reader, log *slog.Logger) *Links {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("meshnet_"+name, help, linkLabels, nil)
	}
	c := &Links{pods: pods, read: read, log: log, workers: 8}
	c.counters = []counterDesc{
		{d("link_rx_bytes_total", "Bytes received by the link's interface."), (*meshnetv1.LinkCounters).GetRxBytes},
		{d("link_tx_bytes_total", "Bytes sent by the link's interface."), (*meshnetv1.LinkCounters).GetTxBytes},
		{d("link_rx_packets_total", "Packets received by the link's interface."), (*meshnetv1.LinkCounters).GetRxPackets},
		{d("link_tx_packets_total", "Packets sent by the link's interface."), (*meshnetv1.LinkCounters).GetTxPackets},
		{d("link_rx_drops_total", "Received packets the interface dropped."), (*meshnetv1.LinkCounters).GetRxDrops},
		{d("link_tx_drops_total", "Packets the interface dropped on send."), (*meshnetv1.LinkCounters).GetTxDrops},
		{d("link_carrier_changes_total", "Times the link's interface gained or lost carrier (a cable pull and its end add 2 at both ends; a flap 2 a cycle)."), (*meshnetv1.LinkCounters).GetCarrierChanges},
	}
	c.adminUp = d("link_admin_up", "1 when the link's interface is administratively up, 0 when down (a cable pull).")
	c.carrier = d("link_carrier", "1 when the link's interface has carrier (IFF_LOWER_UP).")
	c.unreadable = prometheus.NewDesc("meshnet_links_unreadable", "Links of the pod store that could not be read from the kernel at this scrape (meshnetd logs why); they have no link metrics.", nil, nil)
	c.netem = []netemDesc{
		{d("netem_delay_seconds", "netem delay added to every packet leaving the interface."), func(s shaping.Spec) float64 { return s.Delay.Seconds() }},
		{d("netem_jitter_seconds", "netem jitter of the delay."), func(s shaping.Spec) float64 { return s.Jitter.Seconds() }},
		{d("netem_loss_percent", "netem random loss, percent."), func(s shaping.Spec) float64 { return s.Loss }},
		{d("netem_duplicate_percent", "netem duplication, percent."), func(s shaping.Spec) float64 { return s.Duplicate }},
		{d("netem_corrupt_percent", "netem corruption, percent."), func(s shaping.Spec) float64 { return s.Corrupt }},
		{d("netem_reorder_percent", "netem reordering, percent."), func(s shaping.Spec) float64 { return s.Reorder }},
		{d("netem_rate_bits_per_second", "netem egress rate limit; 0 is unlimited."), func(s shaping.Spec) float64 { return float64(s.RateBps) }},
		{d("netem_limit_packets", "netem queue limit."), func(s shaping.Spec) float64 { return float64(s.Limit) }},
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

// Collect implements prometheus.Collector: it reads each pod's links back
// as the API does (one link, address and qdisc dump per pod, and the
// settings of the links shaped with netem).
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
	read, err := c.read(p)
	if err != nil {
		for _, l := range p.Links {
			c.log.Warn("metrics: cannot read link", "pod", p.Key().String(), "link", l.LocalIntf, "error", err)
		}
		return len(p.Links)
	}
	peers := make(map[string]string, len(p.Links))
	for _, l := range p.Links {
		peers[l.LocalIntf] = l.PeerPod
	}
	for _, ls := range read {
		if ls.GetCounters() == nil {
			c.log.Warn("metrics: cannot read link", "pod", p.Key().String(), "link", ls.GetInterface(), "error", ls.GetLastError())
			unreadable++
			continue
		}
		lv := []string{p.Namespace, p.Name, ls.GetInterface(), peers[ls.GetInterface()], strconv.Itoa(int(ls.GetUid()))}
		for _, cd := range c.counters {
			ch <- prometheus.MustNewConstMetric(cd.desc, prometheus.CounterValue, float64(cd.value(ls.GetCounters())), lv...)
		}
		ch <- prometheus.MustNewConstMetric(c.adminUp, prometheus.GaugeValue, b2f(ls.GetAdminState() == meshnetv1.LinkState_LINK_STATE_UP), lv...)
		ch <- prometheus.MustNewConstMetric(c.carrier, prometheus.GaugeValue, b2f(ls.GetCarrier()), lv...)
		if ls.GetNetem() == nil {
			continue
		}
		spec, _ := netemconv.FromProto(ls.GetNetem()) // the kernel's: converted even where a spec would be refused
		for _, nd := range c.netem {
			ch <- prometheus.MustNewConstMetric(nd.desc, prometheus.GaugeValue, nd.value(spec), lv...)
		}
		ch <- prometheus.MustNewConstMetric(c.netemDrops, prometheus.CounterValue, float64(ls.GetQdiscDrops()), lv...)
	}
	return unreadable
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
