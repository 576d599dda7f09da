package clabfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshnet/meshnet/internal/topofile"
)

// Labels the converter puts on the objects it makes, with containerlab's
// own keys (containerlab labels its containers alike), so that
// `kubectl get pods,topologies,configmaps -l containerlab=frr01` lists a
// lab's objects, and the labels a lab's commands filter on keep working.
const (
	// LabLabel carries the lab's name, on every object.
	LabLabel = "containerlab"
	// NodeLabel carries the node's name, on every object.
	NodeLabel = "clab-node-name"
	// KindLabel and GroupLabel carry the node's kind and group (empty when
	// it has none), on its pod.
	KindLabel  = "clab-node-kind"
	GroupLabel = "clab-node-group"
)

// Lab is a parsed and checked containerlab topology file, with the files
// its nodes bind read: everything Objects needs to make the lab's
// Kubernetes objects.
type Lab struct {
	// Name is the lab's name, the LabLabel of its objects.
	Name string
	// Nodes are the names of the nodes' pods (PodName), in the order of
	// the nodes' names: each is the name of a Pod and of a Topology.
	Nodes []string
	// Ignored are the file's settings that have no effect here, each with
	// why, in the order found, so that a CLI can say so: nothing the file
	// sets is dropped unseen.
	Ignored []Ignored

	nodes  []*node
	links  *topofile.File
	faults []labFault
}

// Ignored is a setting of the file that has no effect on meshnet.
type Ignored struct {
	// Field is where the file sets it: "mgmt", "topology.nodes.r1.ports".
	Field string
	// Reason says why it has no effect.
	Reason string
}

// String is the setting and why, as a CLI prints it.
func (i Ignored) String() string { return i.Field + ": " + i.Reason }

// Parse reads a containerlab topology file and checks all of it. dir holds
// the lab file's directory, where containerlab resolves the relative paths
// of binds and startup-config (os.DirFS(filepath.Dir(file)), or an
// os.Root's FS to keep symbolic links inside it); nil when the file binds
// nothing. env looks up the environment variables the file refers to
// ($VAR, ${VAR:=default}), which containerlab takes from its own
// environment (os.LookupEnv); nil leaves every variable unset, so that the
// result depends on the files alone.
//
// Every problem is reported, each naming its place in the file and the
// node it concerns, like
// `topology.nodes.r1.binds[2]: "/lib/modules:/lib/modules:ro": ...`.
func Parse(data []byte, dir fs.FS, env LookupEnv) (*Lab, error) {
	if bytes.Contains(data, []byte("{{")) {
		return nil, errors.New("read containerlab file: it is a template ({{ ... }}); render it with its variables first (containerlab's --vars), and convert the result")
	}
	expanded, errs := expandEnv(data, env)
	if len(errs) > 0 {
		return nil, fmt.Errorf("expand environment variables: %w", errors.Join(errs...))
	}
	top, err := topofile.ReadTop(expanded, "containerlab file", "name and topology")
	if err != nil {
		return nil, err
	}
	p := &parser{dir: dir, lab: &Lab{}, said: map[string]bool{}, badNames: map[string]bool{}, pods: map[string]string{}, files: map[string]*source{}}
	p.top(top)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.lab, nil
}

// parser collects what it finds, every error and every ignored setting.
type parser struct {
	dir  fs.FS
	lab  *Lab
	errs []error
	// said holds the errors and ignored fields reported, so that a value
	// inherited by many nodes is reported once.
	said map[string]bool

	defaults *def
	kinds    map[string]*def
	groups   map[string]*def
	nodes    map[string]*def
	// badNames are the nodes whose names cannot be a pod's.
	badNames map[string]bool
	// pods maps each pod name given to the node that has it.
	pods map[string]string
	// files caches what was read of a bind's source, by its path in dir:
	// a group's binds are read once, not once per node.
	files map[string]*source
}

func (p *parser) errorf(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	if !p.said[err.Error()] {
		p.said[err.Error()] = true
		p.errs = append(p.errs, err)
	}
}

func (p *parser) ignore(field, reason string) {
	if !p.said["ignored "+field] {
		p.said["ignored "+field] = true
		p.lab.Ignored = append(p.lab.Ignored, Ignored{Field: field, Reason: reason})
	}
}

func (p *parser) top(top map[string]json.RawMessage) {
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch r, ok := topFields[k]; {
		case !ok:
			p.errorf("%s: unknown key (want name and topology)", k)
		case r.how == ignored:
			p.ignore(k, r.reason)
		case k == "name":
			p.name(top[k])
		}
	}
	if _, ok := top["name"]; !ok {
		p.errorf("name: missing")
	}
	raw, ok := top["topology"]
	if !ok {
		p.errorf("topology: missing")
		return
	}
	p.topology(raw)
}

func (p *parser) name(raw json.RawMessage) {
	name, ok := p.scalar("name", raw)
	switch {
	case !ok:
	case name == "":
		p.errorf("name: empty")
	default:
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
			p.errorf("name: %q: it labels the lab's objects (%s=<name>), so it must be a label value: %s", name, LabLabel, strings.Join(errs, "; "))
		}
		p.lab.Name = name
	}
}

func (p *parser) topology(raw json.RawMessage) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		p.errorf("topology: want a mapping with nodes and links")
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(topologyFields, k) {
			p.errorf("topology.%s: unknown key (want %s)", k, strings.Join(topologyFields, ", "))
		}
	}
	p.defaults = p.def("topology.defaults", m["defaults"])
	p.kinds = p.defs("topology.kinds", m["kinds"])
	p.groups = p.defs("topology.groups", m["groups"])
	p.nodes = p.defs("topology.nodes", m["nodes"])
	if len(p.nodes) == 0 {
		p.errorf("topology.nodes: missing or empty")
		return
	}
	p.resolveNodes()
	if raw, ok := m["links"]; ok {
		p.links(raw)
	}
	for _, n := range p.lab.nodes {
		if n.bridge {
			continue // no container: inherited binds and exec are the containers' (bridge)
		}
		p.binds(n)
		p.exec(n)
	}
}

// scalar decodes a string; containerlab reads numbers and booleans into
// string settings as text, and null as unset ("").
func (p *parser) scalar(at string, raw json.RawMessage) (string, bool) {
	v, err := decodeAny(raw)
	if err == nil {
		if s, ok := scalarText(v); ok {
			return s, true
		}
	}
	p.errorf("%s: want a string", at)
	return "", false
}

func decodeAny(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	}
	return "", false
}
