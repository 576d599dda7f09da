// Package grafana holds meshnet's example Grafana dashboard
// (dashboard.json) and its provisioning; its tests check them as data, run
// the dashboard's Infinity queries against a DataService and its PromQL
// against a real Prometheus scraping meshnetd's metrics.
package grafana
