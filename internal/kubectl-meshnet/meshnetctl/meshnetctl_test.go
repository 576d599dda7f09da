package meshnetctl

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestNetemFlags: the flags become the Topology's netem block, and every bad
// flag is named, checked by the rules the controller applies.
func TestNetemFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string // the block as JSON
		wantErr string
	}{
		{[]string{"--delay", "50ms", "--jitter", "5ms", "--loss", "1%"}, `{"delay":"50ms","jitter":"5ms","loss":"1%"}`, ""},
		{[]string{"--rate", "100mbit", "--limit", "2000"}, `{"rate":"100mbit","limit":2000}`, ""},
		{[]string{"--delay", "1ms", "--reorder", "25%", "--gap", "5"}, `{"delay":"1ms","reorder":"25%","gap":5}`, ""},
		{[]string{"--clear"}, `null`, ""},
		{nil, "", "no shaping given"},
		{[]string{"--clear", "--loss", "1%"}, "", "--clear: cannot be combined with --loss"},
		{[]string{"--delay", "50"}, "", `--delay "50": "50" is not a duration`},
		{[]string{"--jitter", "5ms"}, "", `--jitter "5ms": needs --delay`},
		{[]string{"--delay", "1ms", "--delay-correlation", "25%"}, "", `--delay-correlation "25%": needs --jitter`},
		{[]string{"--loss", "101%", "--rate", "fast"}, "", `--loss "101%": "101%" is not a percentage`},
		{[]string{"--gap", "two"}, "", `--gap "two": not a whole number`},
	} {
		cmd := newNetemCommand(&options{})
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		set := map[string]*string{}
		for _, f := range netemFlags {
			v, _ := cmd.Flags().GetString(f.name)
			set[f.name] = &v
		}
		clear, _ := cmd.Flags().GetBool("clear")
		n, err := netemOf(cmd.Flags(), set, clear)
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got, _ := json.Marshal(n); string(got) != tc.want {
			t.Errorf("%v: block %s, want %s", tc.args, got, tc.want)
		}
	}
}

// TestLinkPatch: the patch tests the link's place before it changes one
// field, so that a concurrent edit moving the links fails it.
func TestLinkPatch(t *testing.T) {
	l := &v1beta1.Link{UID: 7, LocalIntf: "eth2"}
	for _, tc := range []struct {
		value any
		want  string
	}{
		{v1beta1.LinkDown, `[{"op":"test","path":"/spec/links/3/uid","value":7},{"op":"test","path":"/spec/links/3/local_intf","value":"eth2"},{"op":"add","path":"/spec/links/3/state","value":"down"}]`},
		{nil, `[{"op":"test","path":"/spec/links/3/uid","value":7},{"op":"test","path":"/spec/links/3/local_intf","value":"eth2"},{"op":"remove","path":"/spec/links/3/state"}]`},
	} {
		if got := string(linkPatch(3, l, "state", tc.value)); got != tc.want {
			t.Errorf("linkPatch(%v) =\n%s\nwant\n%s", tc.value, got, tc.want)
		}
	}
}

// TestChanges: watch prints what a status write changed, link by link.
func TestChanges(t *testing.T) {
	up := v1beta1.LinkStatus{UID: 1, LocalIntf: "eth1", Kind: v1beta1.LinkKindVXLAN, State: v1beta1.LinkUp, Carrier: true, MTU: 1450}
	down := up
	down.State, down.Carrier = v1beta1.LinkDown, false
	shaped := up
	shaped.Netem = &v1beta1.Netem{Delay: ptr.To(v1beta1.Duration("50ms"))}
	held := down
	held.Faults = []string{"cut", "flap"}
	topo := func(ready metav1.ConditionStatus, links ...v1beta1.LinkStatus) *v1beta1.Topology {
		return &v1beta1.Topology{Status: v1beta1.TopologyStatus{Links: links, Conditions: []metav1.Condition{
			{Type: v1beta1.ConditionReady, Status: ready, Reason: "R", Message: "m"},
		}}}
	}
	wide := func(t *v1beta1.Topology) *v1beta1.Topology {
		t.Spec.Links = []v1beta1.Link{{UID: 1, LocalIntf: "eth1"}}
		t.Status.OmittedLinks = int32(5000 - len(t.Status.Links))
		return t
	}
	for _, tc := range []struct {
		name     string
		old, now *v1beta1.Topology
		want     []change
	}{
		{"nothing", topo("True", up), topo("True", up), nil},
		{"wired", topo("False"), topo("True", up), []change{
			{"eth1", "wired: vxlan, up, carrier yes, mtu 1450"}, {"-", "Ready True (R: m)"}}},
		{"cable pull", topo("True", up), topo("True", down), []change{{"eth1", "state up -> down, carrier yes -> no"}}},
		{"shaped", topo("True", up), topo("True", shaped), []change{{"eth1", "netem <none> -> delay 50ms"}}},
		{"removed", topo("True", up), topo("True"), []change{{"eth1", "removed from the status"}}},
		{"held by faults", topo("True", up), topo("True", held), []change{{"eth1", "state up -> down, carrier yes -> no, held by <none> -> cut,flap"}}},
		{"let go", topo("True", held), topo("True", up), []change{{"eth1", "state down -> up, carrier no -> yes, held by cut,flap -> <none>"}}},
		// Past 4,096 links the status lists only the links not up as
		// specified.
		{"wide: cable pull", wide(topo("True")), wide(topo("True", down)), []change{{"eth1", "no longer as specified: vxlan, down, carrier no, mtu 1450"}}},
		{"wide: put back", wide(topo("True", down)), wide(topo("True")), []change{{"eth1", "as specified"}}},
	} {
		got := changes(tc.old, tc.now)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// TestMessage: errors are printed as kubectl prints them.
func TestMessage(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "networkop.co.uk", Resource: "topologies"}, "r1", nil)
	if got, want := message(forbidden), `Error from server (Forbidden): topologies.networkop.co.uk "r1" is forbidden: `; !strings.HasPrefix(got, want) {
		t.Errorf("message(forbidden) = %q, want it to start %q", got, want)
	}
	if got := message(errString("interface \"eth9\": no link")); got != `error: interface "eth9": no link` {
		t.Errorf("message(plain) = %q", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestDOT: every node and link, quoted, in Graphviz's language.
func TestDOT(t *testing.T) {
	var b bytes.Buffer
	err := printDOT(&b, "lab",
		[]*meshnetv1.GraphNode{{Id: "r1", Title: "r1", Subtitle: "node-1", Color: "green"}, {Id: "r2", Title: "r2", Color: "red"}},
		[]*meshnetv1.GraphEdge{{Source: "r1", Target: "r2", DetailSourceInterface: "eth1", DetailTargetInterface: "eth2",
			DetailKind: "vxlan", DetailState: "down", DetailNetem: "delay 50ms", Color: "red"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `graph "lab" {
  node [shape=box, style=rounded];
  "r1" [label="r1\nnode-1", color="green"];
  "r2" [label="r2", color="red"];
  "r1" -- "r2" [taillabel="eth1", headlabel="eth2", label="vxlan\ndelay 50ms", color="red", style=dashed];
}
`
	if b.String() != want {
		t.Errorf("DOT:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestMermaidAndDrawio: every node and link, as Mermaid writes a
// flowchart and as draw.io reads a file; a link not up dashed and red.
func TestMermaidAndDrawio(t *testing.T) {
	nodes := []*meshnetv1.GraphNode{{Id: "r1", Title: "r1", Subtitle: "node-1", Color: "green"}, {Id: "phy:a\"b", Title: `a"b`, Color: "gray"}}
	edges := []*meshnetv1.GraphEdge{
		{Source: "r1", Target: "phy:a\"b", DetailSourceInterface: "eth1", DetailTargetInterface: "ge-0", DetailKind: "phy", DetailState: "up", Color: "green"},
		{Source: "r1", Target: "r1", DetailSourceInterface: "eth2", DetailTargetInterface: "eth3", DetailKind: "veth", DetailState: "down", DetailNetem: "delay 50ms", Color: "red"},
	}
	var b bytes.Buffer
	if err := printMermaid(&b, nodes, edges); err != nil {
		t.Fatal(err)
	}
	want := `flowchart LR
  n0["r1<br/>node-1"]
  n1["a#quot;b"]
  n0 ---|"eth1 – ge-0<br/>phy"| n1
  n0 -.-|"eth2 – eth3<br/>veth<br/>delay 50ms"| n0
  linkStyle 1 stroke:red
`
	if b.String() != want {
		t.Errorf("Mermaid:\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	if err := printDrawio(&b, "lab", nodes, edges); err != nil {
		t.Fatal(err)
	}
	var f drawio
	if err := xml.Unmarshal(b.Bytes(), &f); err != nil {
		t.Fatalf("draw.io file does not parse: %v\n%s", err, b.String())
	}
	cells := map[string]mxCell{}
	for _, c := range f.Diagram.Model.Cells {
		cells[c.ID] = c
	}
	if f.Diagram.Name != "lab" || len(cells) != 6 || cells["n0"].Value != "r1\nnode-1" || cells["n1"].Value != `a"b` {
		t.Errorf("draw.io cells %+v", f.Diagram.Model.Cells)
	}
	if e := cells["e1"]; e.Source != "n0" || e.Target != "n0" || !strings.Contains(e.Style, "dashed=1") || e.Value != "eth2 – eth3\nveth\ndelay 50ms" {
		t.Errorf("draw.io edge e1 %+v", e)
	}
	if e := cells["e0"]; e.Target != "n1" || strings.Contains(e.Style, "dashed") {
		t.Errorf("draw.io edge e0 %+v", e)
	}
}

// TestArgs: missing and extra arguments are named.
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"down"}, "POD and INTERFACE are required: see 'kubectl meshnet down --help'"},
		{[]string{"up", "r1", "eth1", "eth2"}, `unexpected argument "eth2": kubectl meshnet up takes POD INTERFACE`},
		{[]string{"links", "-o", "table"}, `--output "table": unknown format, want one of: wide, json, yaml`},
		{[]string{"routes", "r1", "--via", "10.0.0.2"}, "--via and --dev describe a route to add: give --add DST as well"},
		{[]string{"routes", "r1", "--add", "192.0.2.0/24"}, "--add 192.0.2.0/24: a route needs --via GW, --dev INTERFACE or both"},
		{[]string{"down", "r1", "eth1", "--for", "5ms"}, "--for 5ms: must be at least 10ms"},
		{[]string{"flap", "r1", "eth1", "--down", "0s", "--up", "1s", "--count", "0"}, "--down 0s: must be at least 10ms\n--count 0: must be at least 1"},
		{[]string{"up", "r1", "eth1", "--for", "5s"}, "unknown flag: --for"},
	} {
		var out, errw bytes.Buffer
		if code := Main(tc.args, &out, &errw); code != 1 || strings.TrimSpace(errw.String()) != "error: "+tc.want {
			t.Errorf("%v: exit %d, %q; want 1 and %q", tc.args, code, errw.String(), "error: "+tc.want)
		}
	}
}

// TestConverged: when the wait for a change of link 1 ends, and how. An
// error is final only when the node reported it on that link for this
// generation; the controller retries everything else.
func TestConverged(t *testing.T) {
	topo := func(reason string, ready metav1.ConditionStatus, gen int64, errs ...string) *v1beta1.Topology {
		tp := &v1beta1.Topology{}
		tp.Name, tp.Generation = "r1", 2
		tp.Status.ObservedGeneration = gen
		tp.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionReady, Status: ready, Reason: reason, Message: "m", ObservedGeneration: gen}}
		for i, e := range errs {
			tp.Status.Links = append(tp.Status.Links, v1beta1.LinkStatus{UID: i + 1, LocalIntf: "eth" + string(rune('1'+i)), LastError: e})
		}
		return tp
	}
	for _, tc := range []struct {
		name    string
		t       *v1beta1.Topology
		prevErr string
		done    bool
		err     string
	}{
		{"older generation", topo(v1beta1.ReasonConverged, "True", 1), "", false, ""},
		{"converged", topo(v1beta1.ReasonConverged, "True", 2), "", true, ""},
		{"not scheduled", topo(v1beta1.ReasonPodNotScheduled, "False", 2, "old"), "old", true, ""},
		{"daemon away, the link's old error", topo(v1beta1.ReasonDaemonUnavailable, "False", 2, "old"), "old", false, ""},
		{"apply failed, a new error", topo(v1beta1.ReasonApplyFailed, "False", 2, "no sch_netem"), "", true, "node refused it on eth1: no sch_netem"},
		{"apply failed, the same error", topo(v1beta1.ReasonApplyFailed, "False", 2, "no sch_netem"), "no sch_netem", false, ""},
		{"link errors on this link", topo(v1beta1.ReasonLinkErrors, "False", 2, "bad"), "bad", true, "node refused it on eth1: bad"},
		{"link errors on another link", topo(v1beta1.ReasonLinkErrors, "False", 2, "", "bad"), "", true, ""},
		{"invalid spec", topo(v1beta1.ReasonInvalidSpec, "False", 2), "", true, "cannot be applied"},
		{"links pending", topo(v1beta1.ReasonLinksPending, "False", 2, ""), "", false, ""},
	} {
		var out bytes.Buffer
		done, err := converged(&out, tc.t, 2, 1, tc.prevErr)
		if done != tc.done || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: done %v, error %v; want %v, %q", tc.name, done, err, tc.done, tc.err)
		}
	}
}

// TestRuntimeNote: a runtime change says whether the controller takes it
// back (a Topology at either end of the cable sets the state, or set it
// before) or the kernel keeps it.
func TestRuntimeNote(t *testing.T) {
	up, down := v1beta1.LinkUp, v1beta1.LinkDown
	const undo = "kubectl meshnet up r1 eth1 --runtime"
	for _, tc := range []struct {
		name     string
		end, far specEnd
		want     string
	}{
		{"spec sets it", specEnd{link: &v1beta1.Link{State: &down}}, specEnd{},
			"spec.links[2].state is down, which meshnet-controller puts back at its next pass over the pod (its --resync)"},
		{"far end sets it", specEnd{link: &v1beta1.Link{}}, specEnd{pod: "r2", link: &v1beta1.Link{State: &up}},
			"spec.links[2].state is <unset> (up) and r2's end says up, so meshnet-controller puts the link back up at its next pass over either pod (its --resync)"},
		{"either end down holds it down", specEnd{link: &v1beta1.Link{State: &up}}, specEnd{pod: "r2", link: &v1beta1.Link{State: &down}},
			"spec.links[2].state is up and r2's end says down, so meshnet-controller puts the link back down at its next pass over either pod (its --resync)"},
		{"spec dropped it", specEnd{link: &v1beta1.Link{}, managed: []string{"mtu", "state"}}, specEnd{},
			"spec.links[2].state was dropped from the Topology, so meshnet-controller undoes it at its next pass over the pod (its --resync)"},
		{"far end dropped it", specEnd{link: &v1beta1.Link{}}, specEnd{pod: "r2", link: &v1beta1.Link{}, managed: []string{"state"}},
			"spec.links[2].state was dropped from the Topology, so meshnet-controller undoes it at its next pass over the pod (its --resync)"},
		{"neither end has it", specEnd{link: &v1beta1.Link{}, managed: []string{"netem"}}, specEnd{pod: "r2", link: &v1beta1.Link{}},
			"spec.links[2].state is not set, so the kernel keeps it until it is changed again (kubectl meshnet up r1 eth1 --runtime) or the pod restarts"},
	} {
		if got := runtimeNote(2, stateField(v1beta1.LinkDown), tc.end, tc.far, undo); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestLinksOfAWideTopology: a link the status leaves out as up as
// specified (past 4,096 links it lists only the others) is printed up
// with carrier on the pod's node, what the status does not say unlisted; a
// link it lists is printed as it says.
func TestLinksOfAWideTopology(t *testing.T) {
	topo := v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "r1"}}
	topo.Spec.Links = []v1beta1.Link{{UID: 1, PeerPod: "r2", LocalIntf: "e1", PeerIntf: "e1"}, {UID: 2, PeerPod: "r2", LocalIntf: "e2", PeerIntf: "e2"}}
	topo.Status.Node = "node-1"
	topo.Status.Links = []v1beta1.LinkStatus{{UID: 2, LocalIntf: "e2", Kind: v1beta1.LinkKindVXLAN, State: v1beta1.LinkDown, MTU: 1450, Node: "node-1"}}
	topo.Status.OmittedLinks = 4999
	var out strings.Builder
	if err := printLinks(&out, linkViews([]v1beta1.Topology{topo}), false, false); err != nil {
		t.Fatal(err)
	}
	want := `POD   INTERFACE   PEER    KIND         STATE   CARRIER   FAR-END      MTU          NETEM        NODE
r1    e1          r2:e1   <unlisted>   up      yes       <unlisted>   <unlisted>   <unlisted>   node-1
r1    e2          r2:e2   vxlan        down    no        <unknown>    1450         <none>       node-1
`
	if out.String() != want {
		t.Errorf("links:\n%s\nwant\n%s", out.String(), want)
	}
}
