//go:build kernel

package metrics_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// value is the value of the metric name with the given labels, failing
// when it is not there.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return metricValue(m)
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// reader is the API's kernel reader over store, as meshnetd gives it to the
// collector.
func reader(t testing.TB, store *podstore.Store) metrics.Reader {
	t.Helper()
	srv, err := podlinks.New(podlinks.Config{NodeName: "node-a", NodeIP: netip.MustParseAddr("127.0.0.1"), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.ReadPod
}

// TestKernelLinkMetrics scrapes links with real traffic: counters are the
// kernel's, admin state and carrier follow a cable pull, labels name the
// link.
func TestKernelLinkMetrics(t *testing.T) {
	lab := podlinkstest.NewLab(t)
	lab.Veth("lab", 4, podlinkstest.End{Pod: "r1", Intf: "eth1", Addr: "10.0.0.1/30"}, podlinkstest.End{Pod: "r2", Intf: "eth1", Addr: "10.0.0.2/30"})
	r1, r2 := lab.Pod("lab", "r1"), lab.Pod("lab", "r2")
	if ok, out := podlinkstest.Ping(r1, "10.0.0.2", 5); !ok {
		t.Fatalf("ping: %s", out)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLinks(lab.Store, reader(t, lab.Store), nil))
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	r1eth1 := map[string]string{"namespace": "lab", "pod": "r1", "interface": "eth1", "peer": "r2", "uid": "4"}
	r2eth1 := map[string]string{"namespace": "lab", "pod": "r2", "interface": "eth1", "peer": "r1", "uid": "4"}
	tx := value(t, reg, "meshnet_link_tx_packets_total", r1eth1)
	s, err := links.ReadLink(r1, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	if tx < 5 || tx != float64(s.Counters.TxPackets) {
		t.Fatalf("tx packets %v, kernel %d, want the kernel's and at least the 5 pings", tx, s.Counters.TxPackets)
	}
	if rx := value(t, reg, "meshnet_link_rx_packets_total", r2eth1); rx < 5 {
		t.Fatalf("r2 rx packets %v, want at least 5", rx)
	}
	if b := value(t, reg, "meshnet_link_tx_bytes_total", r1eth1); b < 5*84 {
		t.Fatalf("r1 tx bytes %v, want at least 5 pings of 84 bytes", b)
	}
	for _, l := range []map[string]string{r1eth1, r2eth1} {
		if value(t, reg, "meshnet_link_admin_up", l) != 1 || value(t, reg, "meshnet_link_carrier", l) != 1 {
			t.Fatalf("%v: want admin up, carrier", l)
		}
	}

	changes := value(t, reg, "meshnet_link_carrier_changes_total", r1eth1)
	if err := links.SetAdminDown(r2, nil, "eth1").Err(); err != nil {
		t.Fatal(err)
	}
	if value(t, reg, "meshnet_link_admin_up", r2eth1) != 0 || value(t, reg, "meshnet_link_carrier", r1eth1) != 0 || value(t, reg, "meshnet_link_admin_up", r1eth1) != 1 {
		t.Fatal("after r2 down: want r2 admin down, r1 admin up without carrier")
	}
	// A cable pull and its end: r1's end lost carrier and got it back.
	if err := links.SetAdminUp(r2, nil, map[string]links.Saved{"eth1": {}}).Err(); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "meshnet_link_carrier_changes_total", r1eth1); got != changes+2 {
		t.Fatalf("r1's carrier changes %v after a pull of r2's end and its end, want %v", got, changes+2)
	}
	if err := links.SetAdminDown(r2, nil, "eth1").Err(); err != nil {
		t.Fatal(err)
	}
	// The host kernel has no netem: no netem gauges (the vm tier checks them).
	if n := testutil.CollectAndCount(metrics.NewLinks(lab.Store, reader(t, lab.Store), nil), "meshnet_netem_delay_seconds"); n != 0 {
		t.Fatalf("%d netem gauges without netem", n)
	}

	if n := value(t, reg, "meshnet_links_unreadable", nil); n != 0 {
		t.Fatalf("%v unreadable links, want 0", n)
	}
	// Interfaces that vanished are counted, and do not fail the scrape.
	if err := links.Delete(r1, "eth1"); err != nil {
		t.Fatal(err)
	}
	if n := value(t, reg, "meshnet_links_unreadable", nil); n != 2 {
		t.Fatalf("%v unreadable links after deleting the veth, want 2", n)
	}
}

// BenchmarkKernelScrape1000Links is a full /metrics scrape (collect and
// encode) of 1,000 link ends: 200 pods with 5 veth links each. Target:
// 100 ms or less.
func BenchmarkKernelScrape1000Links(b *testing.B) {
	lab := podlinkstest.NewLab(b)
	lab.Mesh("lab", 200, 5)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLinks(lab.Store, reader(b, lab.Store), nil))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	cpu := podlinkstest.CPU(b)
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatalf("scrape: %d %s", rec.Code, rec.Body)
		}
	}
	cpu()
	n := testutil.CollectAndCount(reg, "meshnet_link_tx_packets_total")
	if n != 1000 {
		b.Fatalf("%d links scraped, want 1000", n)
	}
}
