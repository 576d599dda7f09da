package clabfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/topofile"
)

// MeshnetVar is the key of a link's vars that holds meshnet's own
// settings of the link: containerlab keeps a link's vars for its kinds'
// configuration templates and reads nothing in them for kind linux, so
// the same file still runs under containerlab.
const MeshnetVar = "meshnet"

// linkVars are the settings of a link under vars.meshnet: netem and state
// of both ends, as a Topology link has them, and LinkFaults on the link,
// each a LinkFault's spec without links (the link's first end is its).
type linkVars struct {
	Netem  *v1beta1.Netem          `json:"netem,omitempty"`
	State  *v1beta1.LinkState      `json:"state,omitempty"`
	Faults []v1beta1.LinkFaultSpec `json:"faults,omitempty"`
}

// vars parses a link's vars: meshnet's own into l and the lab's faults,
// the rest ignored, as containerlab's kind linux ignores them.
func (p *parser) vars(at string, raw json.RawMessage, l *topofile.Link) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		p.errorf("%s: want a mapping", at)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != MeshnetVar {
			p.ignore(at+"."+k, linkVarsReason)
		}
	}
	r, ok := m[MeshnetVar]
	if !ok {
		return
	}
	at += "." + MeshnetVar
	var v linkVars
	d := json.NewDecoder(bytes.NewReader(r))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		p.errorf("%s: want netem, state and faults: %v", at, err)
		return
	}
	// Set on the link only when valid: topofile checks them again, where
	// the link is, by the same rules.
	if v.Netem != nil {
		if _, err := netemconv.FromTopology(v.Netem); err != nil {
			p.errorf("%s.netem: %v", at, err)
		} else {
			l.Netem = v.Netem
		}
	}
	if v.State != nil {
		if *v.State != v1beta1.LinkUp && *v.State != v1beta1.LinkDown {
			p.errorf("%s.state: %q: want up or down", at, *v.State)
		} else {
			l.State = v.State
		}
	}
	for i, f := range v.Faults {
		fat := fmt.Sprintf("%s.faults[%d]", at, i)
		if len(f.Links) > 0 || f.Selector != nil || len(f.Interfaces) > 0 {
			p.errorf("%s: links, selector and interfaces: the fault holds its link, none other", fat)
			continue
		}
		if f.State == nil && f.Netem == nil {
			p.errorf("%s: want state down, netem or both: a fault does something to its link", fat)
			continue
		}
		if f.State != nil && *f.State != v1beta1.LinkDown {
			p.errorf("%s.state: %q: must be down (the end of its window puts the cable back)", fat, *f.State)
			continue
		}
		if f.Netem != nil {
			if _, err := netemconv.FromTopology(f.Netem); err != nil {
				p.errorf("%s.netem: %v", fat, err)
				continue
			}
		}
		probe := v1beta1.LinkFault{Spec: f}
		if probe.Spec.Start == nil {
			probe.Spec.Start = &metav1.MicroTime{Time: time.Now()}
		}
		if _, err := probe.ScheduleAt(probe.Spec.Start.Time); err != nil {
			p.errorf("%s: %v", fat, err)
			continue
		}
		p.lab.faults = append(p.lab.faults, labFault{uid: l.UID, index: i, spec: f})
	}
}

// labFault is a LinkFault the file asks for on link uid.
type labFault struct {
	uid, index int
	spec       v1beta1.LinkFaultSpec
}

// faults are the lab's LinkFaults, each on its link's first end (a pod's),
// named <pod>-<interface>-fault-<n>.
func (l *Lab) faultObjects(namespace string, names *namer) []v1beta1.LinkFault {
	var out []v1beta1.LinkFault
	for _, f := range l.faults {
		link := l.links.Links[f.uid]
		end := link.Endpoints[0]
		spec := f.spec
		spec.Links = []v1beta1.FaultLink{{Pod: end.Name, Interface: end.Intf}}
		name := names.name(slug(end.Name+"-"+end.Intf)+"-fault-"+strconv.Itoa(f.index), fmt.Sprintf("%d\x00fault\x00%d", f.uid, f.index))
		out = append(out, v1beta1.LinkFault{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "LinkFault"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{LabLabel: l.Name}},
			Spec:       spec,
		})
	}
	return out
}
