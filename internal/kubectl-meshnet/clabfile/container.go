package clabfile

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The settings of a node's container that docker takes and a pod spells
// otherwise: memory and cpu limits, a healthcheck, DNS.

// memoryValue is docker's memory size (go-units' RAMInBytes): a number and
// a binary unit, b, k, m, g, t or p, with or without a trailing b, any case.
var memoryValue = regexp.MustCompile(`^(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?$`)

// memory maps containerlab's memory (docker --memory, "1Gb", "512mib") to
// a limit in bytes.
func (p *parser) memory(n *node, it item) {
	m := memoryValue.FindStringSubmatch(strings.TrimSpace(it.value))
	if m == nil {
		p.errorf("%s: %q: want a size like 512mb or 1gb", n.where(it.at), it.value)
		return
	}
	size, _ := strconv.ParseFloat(m[1], 64)
	if unit := strings.ToLower(m[2]); unit != "" {
		size *= math.Pow(1024, float64(strings.Index("kmgtp", unit)+1))
	}
	if size < 1 || size > math.MaxInt64/2 {
		p.errorf("%s: %q: out of range", n.where(it.at), it.value)
		return
	}
	n.limits[corev1.ResourceMemory] = *resource.NewQuantity(int64(size), resource.BinarySI)
}

// cpu maps containerlab's cpu (docker --cpus, a number of CPUs, 1.5) to a
// limit in millicores.
func (p *parser) cpu(n *node, it item) {
	cpus, err := strconv.ParseFloat(strings.TrimSpace(it.value), 64)
	if err != nil || cpus <= 0 || cpus > 1e6 || math.Round(cpus*1000) < 1 {
		p.errorf("%s: %q: want a number of CPUs more than 0, like 1.5", n.where(it.at), it.value)
		return
	}
	n.limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Round(cpus*1000)), resource.DecimalSI)
}

// healthcheck is containerlab's node healthcheck (docker's, in seconds).
type healthcheck struct {
	Test        []string `json:"test"`
	StartPeriod int32    `json:"start-period"`
	Interval    int32    `json:"interval"`
	Timeout     int32    `json:"timeout"`
	Retries     int32    `json:"retries"`
}

// healthcheck maps a node's healthcheck to the container's readiness
// probe: docker marks the container healthy or not, which containerlab
// waits on; a pod is Ready or not, which kubectl meshnet clab apply --wait
// waits on. Unset numbers are docker's defaults (30 s apart, 30 s each, 3
// failures).
func (p *parser) healthcheck(n *node, it item) {
	var h healthcheck
	d := json.NewDecoder(bytes.NewReader([]byte(it.value)))
	d.DisallowUnknownFields()
	if err := d.Decode(&h); err != nil {
		p.errorf("%s: want test (a list) and start-period, interval, timeout, retries (whole seconds and a count): %v", n.where(it.at), err)
		return
	}
	var cmd []string
	switch {
	case len(h.Test) == 0:
		p.errorf("%s.test: missing: the command that checks the node", n.where(it.at))
		return
	case h.Test[0] == "NONE":
		return // docker's: no healthcheck
	case h.Test[0] == "CMD" && len(h.Test) > 1:
		cmd = h.Test[1:]
	case h.Test[0] == "CMD-SHELL" && len(h.Test) == 2:
		cmd = []string{"/bin/sh", "-c", h.Test[1]}
	default:
		p.errorf("%s.test: %q: want [CMD, program, args...], [CMD-SHELL, command] or [NONE], as docker takes it", n.where(it.at), h.Test)
		return
	}
	for field, v := range map[string]int32{"start-period": h.StartPeriod, "interval": h.Interval, "timeout": h.Timeout, "retries": h.Retries} {
		if v < 0 {
			p.errorf("%s.%s: %d is negative", n.where(it.at), field, v)
			return
		}
	}
	or := func(v, def int32) int32 {
		if v == 0 {
			return def
		}
		return v
	}
	n.readiness = &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}},
		InitialDelaySeconds: h.StartPeriod,
		PeriodSeconds:       or(h.Interval, 30),
		TimeoutSeconds:      or(h.Timeout, 30),
		FailureThreshold:    or(h.Retries, 3),
	}
}

// dnsConfig is containerlab's node dns (docker --dns, --dns-search,
// --dns-option).
type dnsConfig struct {
	Servers []string `json:"servers"`
	Search  []string `json:"search"`
	Options []string `json:"options"`
}

// dns maps a node's dns to the pod's: servers replace the cluster's, as
// docker's --dns replaces the host's (dnsPolicy None); search domains and
// options alone are added to the cluster's.
func (p *parser) dns(n *node, it item) {
	var c dnsConfig
	d := json.NewDecoder(bytes.NewReader([]byte(it.value)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		p.errorf("%s: want servers, search and options, each a list: %v", n.where(it.at), err)
		return
	}
	cfg := &corev1.PodDNSConfig{Nameservers: c.Servers, Searches: c.Search}
	for _, o := range c.Options {
		name, value, hasValue := strings.Cut(o, ":")
		opt := corev1.PodDNSConfigOption{Name: name}
		if hasValue {
			opt.Value = &value
		}
		cfg.Options = append(cfg.Options, opt)
	}
	n.dnsPolicy = corev1.DNSClusterFirst
	if len(c.Servers) > 0 {
		n.dnsPolicy = corev1.DNSNone
	}
	if len(c.Servers) > 3 || len(c.Search) > 32 {
		p.errorf("%s: %d servers and %d search domains: a pod takes at most 3 and 32", n.where(it.at), len(c.Servers), len(c.Search))
		return
	}
	n.dnsConfig = cfg
}

// containerSettings resolves the node's memory, cpu, healthcheck, dns and
// ports.
func (p *parser) containerSettings(n *node) {
	n.limits = corev1.ResourceList{}
	if it, ok := n.chain.scalar("memory"); ok {
		p.memory(n, it)
	}
	if it, ok := n.chain.scalar("cpu"); ok {
		p.cpu(n, it)
	}
	if it, ok := n.chain.object("healthcheck"); ok {
		p.healthcheck(n, it)
	}
	if it, ok := n.chain.object("dns"); ok {
		p.dns(n, it)
	}
	p.ports(n)
}

// object is the most specific of the chain's settings key that are
// mappings, as JSON.
func (c chain) object(key string) (item, bool) {
	for _, d := range c {
		if d != nil {
			if it, ok := d.objects[key]; ok {
				return it, true
			}
		}
	}
	return item{}, false
}

// objectFields are the settings that are mappings of their own, taken
// whole from the most specific definition that sets them.
var objectFields = map[string]bool{"healthcheck": true, "dns": true}

// objectSetting keeps a mapping setting's JSON, checked to be a mapping.
func (p *parser) objectSetting(d *def, field string, raw json.RawMessage) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		p.errorf("%s: want a mapping", field)
		return
	}
	if m != nil {
		d.objects[field[strings.LastIndex(field, ".")+1:]] = item{field, string(raw)}
	}
}
