package clabfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshnet/meshnet/internal/topofile"
)

// item is a value the file sets, with where it sets it.
type item struct {
	at    string
	value string
}

// def is one node definition: topology.defaults, a kind's, a group's or a
// node's.
type def struct {
	at      string
	scalars map[string]item
	lists   map[string][]item
	maps    map[string]map[string]item
	// objects are the mapping settings (objectFields), as JSON.
	objects map[string]item
	// ignored and refused are reported only once a node uses the
	// definition: settings of a kind or group no node has change nothing.
	ignored []Ignored
	refused []Ignored
}

// list and map settings; every other mapped setting is a string.
var (
	listFields = map[string]bool{"binds": true, "cap-add": true, "exec": true, "ports": true}
	mapFields  = map[string]bool{"env": true, "labels": true}
)

// defs parses a mapping of definitions (kinds, groups or nodes).
func (p *parser) defs(at string, raw json.RawMessage) map[string]*def {
	if raw == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		p.errorf("%s: want a mapping of names to settings", at)
		return nil
	}
	out := map[string]*def{}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out[name] = p.def(at+"."+name, m[name])
	}
	return out
}

// def parses one definition; null is one with no settings.
func (p *parser) def(at string, raw json.RawMessage) *def {
	d := &def{at: at, scalars: map[string]item{}, lists: map[string][]item{}, maps: map[string]map[string]item{}, objects: map[string]item{}}
	var m map[string]json.RawMessage
	if raw != nil && json.Unmarshal(raw, &m) != nil {
		p.errorf("%s: want a mapping of settings", at)
		return d
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		field := at + "." + k
		r, ok := nodeFields[k]
		switch {
		case !ok:
			p.errorf("%s: unknown setting", field)
		case r.how == ignored:
			d.ignored = append(d.ignored, Ignored{Field: field, Reason: r.reason})
		case r.how == refused:
			d.refused = append(d.refused, Ignored{Field: field, Reason: r.reason})
		case listFields[k]:
			d.lists[k] = p.list(field, m[k])
		case mapFields[k]:
			d.maps[k] = p.dict(field, m[k])
		case objectFields[k]:
			p.objectSetting(d, field, m[k])
		case k == "privileged":
			var b *bool
			if json.Unmarshal(m[k], &b) != nil {
				p.errorf("%s: want true or false", field)
			} else if b != nil {
				d.scalars[k] = item{field, strconv.FormatBool(*b)}
			}
		default:
			if s, ok := p.scalar(field, m[k]); ok && s != "" {
				d.scalars[k] = item{field, s}
			}
		}
	}
	return d
}

func (p *parser) list(at string, raw json.RawMessage) []item {
	v, err := decodeAny(raw)
	l, ok := v.([]any)
	if err != nil || !ok && v != nil {
		p.errorf("%s: want a list of strings", at)
		return nil
	}
	var out []item
	for i, e := range l {
		s, ok := scalarText(e)
		if !ok {
			p.errorf("%s[%d]: want a string", at, i)
			continue
		}
		out = append(out, item{fmt.Sprintf("%s[%d]", at, i), s})
	}
	return out
}

func (p *parser) dict(at string, raw json.RawMessage) map[string]item {
	v, err := decodeAny(raw)
	m, ok := v.(map[string]any)
	if err != nil || !ok && v != nil {
		p.errorf("%s: want a mapping of names to strings", at)
		return nil
	}
	out := map[string]item{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s, ok := scalarText(m[k])
		if !ok {
			p.errorf("%s.%s: want a string", at, k)
			continue
		}
		out[k] = item{at + "." + k, s}
	}
	return out
}

// chain is a node's definitions, most specific first: the node, its group,
// its kind, topology.defaults. Containerlab's inheritance: a string
// setting is the first one set along the chain; env and labels merge, the
// most specific winning per name; exec and binds concatenate from
// defaults to the node, duplicates dropped.
type chain []*def

func (c chain) scalar(key string) (item, bool) {
	for _, d := range c {
		if d != nil {
			if it, ok := d.scalars[key]; ok {
				return it, true
			}
		}
	}
	return item{}, false
}

func (c chain) list(key string) []item {
	var out []item
	seen := map[string]bool{}
	for i := len(c) - 1; i >= 0; i-- {
		if c[i] == nil {
			continue
		}
		for _, it := range c[i].lists[key] {
			if !seen[it.value] {
				seen[it.value] = true
				out = append(out, it)
			}
		}
	}
	return out
}

func (c chain) dict(key string) map[string]item {
	out := map[string]item{}
	for i := len(c) - 1; i >= 0; i-- {
		if c[i] != nil {
			for k, it := range c[i].maps[key] {
				out[k] = it
			}
		}
	}
	return out
}

// node is a node with its settings resolved along its chain.
type node struct {
	// name is the node's name in the file; pod, the name of its pod and
	// Topology (PodName).
	name  string
	pod   string
	kind  string
	group string
	// kindAsWritten is the kind as the file writes it, a key of
	// topology.kinds; kind is it in lower case, as containerlab reads it.
	kindAsWritten string
	image         string
	pullPolicy    corev1.PullPolicy
	entrypoint    []string
	cmd           []string
	env           map[string]string
	labels        map[string]string
	privileged    bool
	capAdd        []corev1.Capability
	restart       corev1.RestartPolicy
	hostname      string
	runAsUser     *int64
	runAsGroup    *int64
	limits        corev1.ResourceList
	readiness     *corev1.Probe
	dnsPolicy     corev1.DNSPolicy
	dnsConfig     *corev1.PodDNSConfig
	ports         []corev1.ServicePort

	// bridge is a node of a bridge kind: an L2 segment, whose pod runs
	// nothing and whose Topology has spec.bridge.
	bridge bool

	chain chain
	// intfs are the node's link interfaces in link order: exec waits for
	// them, CLAB_INTFS counts them.
	intfs []string
	exec  []command
	binds []*bind
}

// where is the place of a setting as it applies to node n: at, with the
// node named when at is a group's, a kind's or the defaults', so that an
// error about an inherited setting says which node it hit.
func (n *node) where(at string) string {
	if strings.HasPrefix(at, "topology.nodes."+n.name+".") {
		return at
	}
	return at + " (node " + n.name + ")"
}

// resolveNodes resolves every node's settings, in name order, and reports
// the settings of the definitions the nodes use; those of a kind or group
// no node uses change nothing, and are listed as ignored.
func (p *parser) resolveNodes() {
	usedKinds, usedGroups := map[string][]string{}, map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(p.nodes)) {
		n := p.resolveNode(name)
		usedKinds[n.kindAsWritten] = append(usedKinds[n.kindAsWritten], name)
		if n.group != "" {
			usedGroups[n.group] = append(usedGroups[n.group], name)
		}
		p.lab.Nodes = append(p.lab.Nodes, n.pod)
		p.lab.nodes = append(p.lab.nodes, n)
	}
	p.report(p.defaults, "")
	for _, k := range slices.Sorted(maps.Keys(p.kinds)) {
		if users := usedKinds[k]; len(users) > 0 {
			p.report(p.kinds[k], " (nodes "+strings.Join(users, ", ")+")")
		} else {
			p.ignore(p.kinds[k].at, fmt.Sprintf("no node is of kind %q", k))
		}
	}
	for _, g := range slices.Sorted(maps.Keys(p.groups)) {
		if users := usedGroups[g]; len(users) > 0 {
			p.report(p.groups[g], " (nodes "+strings.Join(users, ", ")+")")
		} else {
			p.ignore(p.groups[g].at, fmt.Sprintf("no node is in group %q", g))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.nodes)) {
		p.report(p.nodes[name], "")
	}
}

// report reports the ignored and refused settings of definition d; users
// names the nodes a kind's or group's settings apply to.
func (p *parser) report(d *def, users string) {
	for _, ig := range d.ignored {
		p.ignore(ig.Field, ig.Reason)
	}
	for _, r := range d.refused {
		p.errorf("%s%s: not supported: %s", r.Field, users, r.Reason)
	}
}

// PodName is the name of the pod and Topology of containerlab node name:
// name itself when it is a DNS-1123 label (router1), else name in lower
// case with '-' for each character a pod name cannot have, without a
// leading or trailing '-' (PC1 is pc1, Spine_1 is spine-1); "" when that
// is no DNS-1123 label either. The node's own name stays in the pod's
// NodeLabel, which kubectl meshnet accepts wherever it takes a pod.
func PodName(name string) string {
	if len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	pod := strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, name), "-")
	if len(validation.IsDNS1123Label(pod)) > 0 {
		return ""
	}
	return pod
}

// resolveNode finds a node's kind and group as containerlab does (the kind
// from the node, its group, the group of topology.defaults, then
// topology.defaults; the group from the node, its kind, then
// topology.defaults) and resolves its settings along the chain.
func (p *parser) resolveNode(name string) *node {
	nd := p.nodes[name]
	n := &node{name: name}
	at := nd.at
	n.pod = PodName(name)
	switch taken, dup := p.pods[n.pod]; {
	case n.pod == "":
		p.errorf("%s: %q cannot name a pod: in lower case, with '-' for what a pod name cannot have, it is not a DNS-1123 label (at most 63 letters, digits and '-', a letter or digit at each end); rename the node", at, name)
		p.badNames[name] = true
	case dup:
		p.errorf("%s: %q names pod %s, as node %q does: rename one of them", at, name, n.pod, taken)
		p.badNames[name] = true
	case n.pod == topofile.Localhost:
		p.errorf("%s: %q is what meshnet calls the node's NIC in a link; rename the node", at, name)
		p.badNames[name] = true
	case len(content.IsLabelValue(name)) > 0:
		p.errorf("%s: %q cannot be the value of the pod's %s label: %s; rename the node", at, name, NodeLabel, strings.Join(content.IsLabelValue(name), "; "))
		p.badNames[name] = true
	default:
		p.pods[n.pod] = name
	}
	kind, _ := chain{nd, p.groups[nd.scalars["group"].value], p.groups[p.defaults.scalars["group"].value], p.defaults}.scalar("kind")
	group, _ := chain{nd, p.kinds[kind.value], p.defaults}.scalar("group")
	if group.value != "" && p.groups[group.value] == nil {
		p.ignore(group.at, fmt.Sprintf("no group %q in topology.groups: it only labels the pod (%s), as containerlab labels its container", group.value, GroupLabel))
	}
	n.kindAsWritten = kind.value
	n.group = group.value
	n.chain = chain{nd, p.groups[group.value], p.kinds[kind.value], p.defaults}
	n.kind = strings.ToLower(kind.value)
	switch reason, known := kindReasons[n.kind]; {
	case kind.value == "":
		p.errorf("%s.kind: missing (set it on the node, its group or topology.defaults)", at)
	case n.kind == kindLinux:
	case bridgeKinds[n.kind]:
		p.bridge(n, nd)
		return n
	case known:
		p.errorf("%s: kind %q (%s): not supported: %s", at, kind.value, kind.at, reason)
	default:
		p.errorf("%s: kind %q (%s): not supported: %s", at, kind.value, kind.at, otherKindReason)
	}
	p.settings(n)
	return n
}

// bridge resolves the settings of a bridge node, whose pod runs nothing:
// its labels and group; whatever else the node itself sets is ignored,
// saying why (containerlab reads nothing else of a bridge either).
func (p *parser) bridge(n *node, nd *def) {
	n.bridge = true
	n.image = BridgeImage
	n.pullPolicy = corev1.PullIfNotPresent
	n.restart = corev1.RestartPolicyAlways
	n.labels = p.labels(n, n.chain.dict("labels"))
	const reason = "a bridge node is an L2 segment (meshnet's bridge in a pod that runs nothing), not a container"
	for _, k := range slices.Sorted(maps.Keys(nd.scalars)) {
		if !slices.Contains(bridgeNodeKeys, k) {
			p.ignore(nd.scalars[k].at, reason)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(nd.lists)) {
		if len(nd.lists[k]) > 0 {
			p.ignore(nd.at+"."+k, reason)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(nd.maps)) {
		if k != "labels" && len(nd.maps[k]) > 0 {
			p.ignore(nd.at+"."+k, reason)
		}
	}
}

// settings resolves a node's pod settings along its chain, checking each
// value where the file sets it.
func (p *parser) settings(n *node) {
	c := n.chain
	if it, ok := c.scalar("image"); ok {
		n.image = strings.TrimSpace(it.value)
	} else {
		p.errorf("topology.nodes.%s.image: missing (set it on the node, its group, its kind or topology.defaults)", n.name)
	}
	n.pullPolicy = corev1.PullIfNotPresent // containerlab's default
	if it, ok := c.scalar("image-pull-policy"); ok {
		n.pullPolicy = p.pullPolicy(it)
	}
	if it, ok := c.scalar("entrypoint"); ok {
		n.entrypoint = p.words(n, it)
	}
	if it, ok := c.scalar("cmd"); ok {
		n.cmd = p.words(n, it)
	}
	n.restart = corev1.RestartPolicyAlways // kind linux's default
	if it, ok := c.scalar("restart-policy"); ok {
		n.restart = p.restartPolicy(n, it)
	}
	n.privileged = true // containerlab runs kind linux privileged
	if it, ok := c.scalar("privileged"); ok {
		n.privileged = it.value == "true"
	}
	if it, ok := c.scalar("hostname"); ok {
		if errs := validation.IsDNS1123Label(it.value); len(errs) > 0 {
			p.errorf("%s: %q: a pod's hostname must be a DNS-1123 label: %s", n.where(it.at), it.value, strings.Join(errs, "; "))
		}
		n.hostname = it.value
	}
	if it, ok := c.scalar("user"); ok {
		n.runAsUser, n.runAsGroup = p.user(n, it)
	}
	for _, it := range c.list("cap-add") {
		// docker takes NET_ADMIN or CAP_NET_ADMIN in any case; a pod the
		// former.
		if cp := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(it.value)), "CAP_"); cp != "" {
			n.capAdd = append(n.capAdd, corev1.Capability(cp))
		}
	}
	n.env = p.env(n, c.dict("env"))
	n.labels = p.labels(n, c.dict("labels"))
	if it, ok := c.scalar("startup-config"); ok {
		p.startupConfig(n, it)
	}
	p.containerSettings(n)
}

func (p *parser) words(n *node, it item) []string {
	w, err := splitWords(it.value)
	if err != nil {
		p.errorf("%s: %q: %v", n.where(it.at), it.value, err)
	}
	return w
}

// pullPolicy maps containerlab's image-pull-policy, which takes any case
// and makes any other value IfNotPresent.
func (p *parser) pullPolicy(it item) corev1.PullPolicy {
	switch strings.ToLower(strings.TrimSpace(it.value)) {
	case "always":
		return corev1.PullAlways
	case "never":
		return corev1.PullNever
	case "ifnotpresent":
		return corev1.PullIfNotPresent
	}
	p.ignore(it.at, fmt.Sprintf("%q is not a pull policy; containerlab then uses IfNotPresent, and so does the pod", it.value))
	return corev1.PullIfNotPresent
}

// restartPolicy maps docker's restart policies to the pod's.
func (p *parser) restartPolicy(n *node, it item) corev1.RestartPolicy {
	switch it.value {
	case "no":
		return corev1.RestartPolicyNever
	case "on-failure":
		return corev1.RestartPolicyOnFailure
	case "always", "unless-stopped":
		return corev1.RestartPolicyAlways
	}
	p.errorf("%s: %q: want no, on-failure, always or unless-stopped", n.where(it.at), it.value)
	return corev1.RestartPolicyAlways
}

// user maps "uid" or "uid:gid"; a pod has no user names, which only the
// image's /etc/passwd resolves.
func (p *parser) user(n *node, it item) (uid, gid *int64) {
	u, g, hasGroup := strings.Cut(it.value, ":")
	uv, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uv < 0 {
		p.errorf("%s: %q: not supported: a pod runs as a numeric uid[:gid], not a user name", n.where(it.at), it.value)
		return nil, nil
	}
	if !hasGroup {
		return &uv, nil
	}
	gv, err := strconv.ParseInt(g, 10, 64)
	if err != nil || gv < 0 {
		p.errorf("%s: %q: not supported: a pod runs as a numeric uid[:gid], not a group name", n.where(it.at), it.value)
		return &uv, nil
	}
	return &uv, &gv
}

// importEnvs is containerlab's env switch that copies its own environment
// into the node's.
const importEnvs = "__IMPORT_ENVS"

func (p *parser) env(n *node, m map[string]item) map[string]string {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		it := m[k]
		switch errs := validation.IsRelaxedEnvVarName(k); {
		case k == importEnvs && it.value == "true":
			p.errorf("%s: not supported: it would copy the environment of the machine running the converter into the pod; set the variables one by one", n.where(it.at))
		case len(errs) > 0:
			p.errorf("%s: %q is not an environment variable name: %s", n.where(it.at), k, strings.Join(errs, "; "))
		default:
			out[k] = it.value
		}
	}
	return out
}

// ownLabels are the labels containerlab sets on its containers itself,
// over the file's.
var ownLabels = []string{LabLabel, NodeLabel, KindLabel, GroupLabel,
	"clab-node-longname", "clab-node-type", "clab-node-lab-dir", "clab-topo-file", "clab-owner"}

// labels checks the node's labels: a pod's must be Kubernetes labels.
func (p *parser) labels(n *node, m map[string]item) map[string]string {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		it := m[k]
		if slices.Contains(ownLabels, k) {
			p.ignore(it.at, "containerlab sets this label itself, over the file's")
			continue
		}
		errs := append(content.IsLabelKey(k), content.IsLabelValue(it.value)...)
		if len(errs) > 0 {
			p.errorf("%s: %s=%q is not a Kubernetes label: %s", n.where(it.at), k, it.value, strings.Join(errs, "; "))
			continue
		}
		out[k] = it.value
	}
	return out
}
