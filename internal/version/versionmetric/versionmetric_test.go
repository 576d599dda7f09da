package versionmetric

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollector: the gauge as a scrape reads it, 1 with the build's labels.
func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector("meshnetd"))
	want := `
# HELP meshnet_build_info Which build of meshnetd this is: always 1, labelled with its version, commit and Go version.
# TYPE meshnet_build_info gauge
`
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gathered %v, %v; want one meshnet_build_info of 1", mfs, err)
	}
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "devel" || labels["commit"] == "" || !strings.HasPrefix(labels["goversion"], "go") {
		t.Errorf("labels %v, want version devel, a commit and a Go version", labels)
	}
	if err := testutil.CollectAndCompare(Collector("meshnetd"), strings.NewReader(want+`meshnet_build_info{commit="`+labels["commit"]+`",goversion="`+labels["goversion"]+`",version="devel"} 1
`)); err != nil {
		t.Error(err)
	}
}
