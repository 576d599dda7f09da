// Package versionmetric is meshnet_build_info, which meshnetd and
// meshnet-controller export: apart from package version, so that the
// binaries that only print their version (meshnet-cni, kubectl meshnet) do
// not link Prometheus.
package versionmetric

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnet/meshnet/internal/version"
)

// Collector is meshnet_build_info of binary: always 1, labelled with the
// build's version, commit and Go version, so that a dashboard follows a
// rollout replica by replica.
func Collector(binary string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        version.MetricName,
		Help:        "Which build of " + binary + " this is: always 1, labelled with its version, commit and Go version.",
		ConstLabels: version.Get().Labels(),
	}, func() float64 { return 1 })
}
