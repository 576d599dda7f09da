package meshnetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kernelstatus"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// waitFlags say whether and how long a change waits for the status.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) bind(fs *pflag.FlagSet) {
	fs.BoolVar(&w.wait, "wait", true, "wait until the pod's status shows the change applied")
	fs.DurationVar(&w.timeout, "timeout", defaultTimeout, "how long to wait for the status (with --wait)")
}

const declarative = `The change is made in the pod's Topology (the field is printed), so it
survives restarts and the controller applies it on the pod's node; the
command then waits until the Topology's status says the kernel has it.`

// runtimeOnly says what --runtime does, for the help of the commands that
// take it.
const runtimeOnly = `
With --runtime the change is made in the kernel only, on the pod's node
through meshnet's aggregated API, and the Topology is left as it is. If
the Topology sets the field (the state: either end's Topology, as a link
is one cable), meshnet-controller puts its value back at
its next pass over the pod (its --resync, 30s as deploy/ installs it, or
the next edit of the Topology): a flap. If it does not, the kernel keeps
the change until it is changed again or the pod restarts. The command
says which. It needs update (delete, to clear) on pods/proxy in
meshnet.networkop.co.uk, which the namespace's edit role has, returns
once the kernel has the change, and prints the link as read back from
the kernel.`

// runtimeFlag binds --runtime.
func runtimeFlag(fs *pflag.FlagSet, runtime *bool) {
	fs.BoolVar(runtime, "runtime", false, "change the kernel only, not the Topology, until meshnet-controller's next pass restores it (see above)")
}

// checkRuntime refuses the flags that mean nothing to a runtime change.
func checkRuntime(fs *pflag.FlagSet) error {
	for _, name := range []string{"wait", "timeout"} {
		if fs.Changed(name) {
			return fmt.Errorf("--%s: a --runtime change waits for no status; it returns when the kernel has it", name)
		}
	}
	return nil
}

func newStateCommand(o *options, state v1beta1.LinkState) *cobra.Command {
	var (
		wf      waitFlags
		runtime bool
		hold    time.Duration
	)
	what := map[v1beta1.LinkState]string{
		v1beta1.LinkDown: "Take a link down at both ends, as a cable pull does",
		v1beta1.LinkUp:   "Bring a link that was taken down up again",
	}[state]
	cmd := &cobra.Command{
		Use:   string(state) + " POD INTERFACE",
		Short: what,
		Long:  what + ".\n\nIt sets spec.links[i].state of POD's Topology to " + string(state) + ".\n" + declarative + "\n" + runtimeOnly + map[v1beta1.LinkState]string{v1beta1.LinkDown: "\n" + forHelp}[state],
		Example: fmt.Sprintf(`  # Set r1's eth1 %[1]s and wait for the kernel
  kubectl meshnet %[1]s r1 eth1 -n lab

  # Only record it in the Topology
  kubectl meshnet %[1]s r1 eth1 -n lab --wait=false

  # Set it %[1]s in the kernel, not in the Topology, until the controller's next pass
  kubectl meshnet %[1]s r1 eth1 -n lab --runtime`, state) + map[v1beta1.LinkState]string{v1beta1.LinkDown: `

  # Pull the cable for 30 s; it is put back by itself
  kubectl meshnet down r1 eth1 -n lab --for 30s`}[state],
		Args:              exactArgs("POD", "INTERFACE"),
		ValidArgsFunction: o.completeLinks,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runtime {
				if err := checkRuntime(cmd.Flags()); err != nil {
					return err
				}
			}
			if hold != 0 {
				if err := checkFor(cmd.Flags(), hold); err != nil {
					return err
				}
			}
			if err := o.connect(); err != nil {
				return err
			}
			if hold != 0 {
				return o.createFault(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], "down",
					v1beta1.LinkFaultSpec{State: &state, Duration: v1beta1.DurationOf(hold)}, wf)
			}
			f := stateField(state)
			if runtime {
				other := v1beta1.LinkUp
				if state == v1beta1.LinkUp {
					other = v1beta1.LinkDown
				}
				return o.runtimeChange(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], f, string(state), runtimeCall{
					method: http.MethodPut, tail: "state", body: &meshnetv1.SetLinkStateRequest{State: state.Proto()},
					undo: fmt.Sprintf("kubectl meshnet %s %s %s --runtime", other, args[0], args[1]),
				})
			}
			return o.changeLink(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], wf, f)
		},
	}
	wf.bind(cmd.Flags())
	runtimeFlag(cmd.Flags(), &runtime)
	if state == v1beta1.LinkDown {
		forFlag(cmd.Flags(), &hold)
	}
	return cmd
}

// stateField is a link's state, set to state.
func stateField(state v1beta1.LinkState) linkField {
	return linkField{
		name: "state",
		set:  func(l *v1beta1.Link) { l.State = &state },
		value: func(l *v1beta1.Link) any {
			if l.State == nil {
				return nil
			}
			return *l.State
		},
		spell: func(l *v1beta1.Link) string {
			if l.State == nil {
				return "<unset> (up)"
			}
			return string(*l.State)
		},
	}
}

func newNetemCommand(o *options) *cobra.Command {
	var (
		wf      waitFlags
		clear   bool
		runtime bool
		hold    time.Duration
		set     = map[string]*string{}
	)
	cmd := &cobra.Command{
		Use:   "netem POD INTERFACE (--delay D [--jitter J] [--loss P] ... | --clear)",
		Short: "Shape a link's egress with netem (delay, loss, rate ...), or clear it",
		Long: `Shape the egress of POD's INTERFACE with tc-netem, or clear the shaping.

It sets spec.links[i].netem of POD's Topology to exactly the flags given
(flags not given are not kept from before); --clear removes it.
` + declarative + `

Units are tc's: durations 50ms, 1.5s, 250us; percentages 1% or 0.5;
rates 100mbit, 1gbit, 10mbps.
` + runtimeOnly + forHelp,
		Example: `  # 50 ms of delay with 5 ms of jitter, and 1% loss
  kubectl meshnet netem r1 eth1 -n lab --delay 50ms --jitter 5ms --loss 1%

  # Limit the link to 100 Mbit/s
  kubectl meshnet netem r1 eth1 -n lab --rate 100mbit

  # No more shaping
  kubectl meshnet netem r1 eth1 -n lab --clear

  # 200 ms of delay in the kernel only, until the controller's next pass
  kubectl meshnet netem r1 eth1 -n lab --delay 200ms --runtime

  # 100 ms of delay for 2 minutes, then the Topology's shaping again
  kubectl meshnet netem r1 eth1 -n lab --delay 100ms --for 2m`,
		Args:              exactArgs("POD", "INTERFACE"),
		ValidArgsFunction: o.completeLinks,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := netemOf(cmd.Flags(), set, clear)
			if err != nil {
				return err
			}
			if runtime {
				if err := checkRuntime(cmd.Flags()); err != nil {
					return err
				}
			}
			if hold != 0 {
				if err := checkFor(cmd.Flags(), hold); err != nil {
					return err
				}
				if n == nil {
					return errors.New("--for: cannot be combined with --clear (deleting the LinkFault ends its shaping: kubectl delete linkfault NAME)")
				}
			}
			if err := o.connect(); err != nil {
				return err
			}
			if hold != 0 {
				return o.createFault(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], "netem",
					v1beta1.LinkFaultSpec{Netem: n, Duration: v1beta1.DurationOf(hold)}, wf)
			}
			f := linkField{
				name: "netem",
				set:  func(l *v1beta1.Link) { l.Netem = n },
				value: func(l *v1beta1.Link) any {
					if l.Netem == nil {
						return nil
					}
					return l.Netem
				},
				spell: func(l *v1beta1.Link) string { return words(l.Netem) },
			}
			if runtime {
				call := runtimeCall{method: http.MethodDelete, tail: "netem"}
				if n != nil {
					spec, _ := netemconv.FromTopology(n) // netemOf validated it
					call = runtimeCall{method: http.MethodPut, tail: "netem", body: netemconv.ToProto(spec),
						undo: fmt.Sprintf("kubectl meshnet netem %s %s --clear --runtime", args[0], args[1])}
				}
				return o.runtimeChange(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], f, words(n), call)
			}
			return o.changeLink(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], wf, f)
		},
	}
	for _, f := range netemFlags {
		set[f.name] = cmd.Flags().String(f.name, "", f.usage)
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the link's shaping")
	wf.bind(cmd.Flags())
	runtimeFlag(cmd.Flags(), &runtime)
	forFlag(cmd.Flags(), &hold)
	return cmd
}

// netemFlags are the netem command's flags: the Topology's netem fields,
// spelled with dashes.
var netemFlags = []struct{ name, usage string }{
	{"delay", "delay every packet by this long (50ms)"},
	{"jitter", "vary the delay by up to this much (5ms; needs --delay)"},
	{"delay-correlation", "correlation of the jitter (25%)"},
	{"distribution", "shape of the jitter: uniform, normal, pareto or paretonormal"},
	{"loss", "drop this share of packets (1%)"},
	{"loss-correlation", "correlation of the loss"},
	{"duplicate", "duplicate this share of packets"},
	{"duplicate-correlation", "correlation of the duplication"},
	{"corrupt", "flip a bit in this share of packets"},
	{"corrupt-correlation", "correlation of the corruption"},
	{"reorder", "send this share of packets at once, without the delay (needs --delay)"},
	{"reorder-correlation", "correlation of the reordering"},
	{"gap", "reorder only every gap-th packet"},
	{"rate", "limit the rate (100mbit, 1gbit, 10mbps)"},
	{"limit", "netem's queue length in packets (default: sized for delay x rate)"},
}

// netemOf builds the netem block the flags ask for (nil for --clear) and
// validates it as the controller will, naming each bad flag.
func netemOf(fs *pflag.FlagSet, set map[string]*string, clear bool) (*v1beta1.Netem, error) {
	var given []string
	for _, f := range netemFlags {
		if fs.Changed(f.name) {
			given = append(given, "--"+f.name)
		}
	}
	switch {
	case clear && len(given) > 0:
		return nil, fmt.Errorf("--clear: cannot be combined with %s", strings.Join(given, ", "))
	case clear:
		return nil, nil
	case len(given) == 0:
		return nil, errors.New("no shaping given: set at least one of --delay, --loss, --rate ... (see --help), or --clear")
	}
	// The block as JSON, from the Topology's own field names.
	block := map[string]any{}
	for _, f := range netemFlags {
		if !fs.Changed(f.name) {
			continue
		}
		field := strings.ReplaceAll(f.name, "-", "_")
		v := *set[f.name]
		if field == "gap" || field == "limit" {
			var n int32
			if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != v {
				return nil, fmt.Errorf("--%s %q: not a whole number", f.name, v)
			}
			block[field] = n
			continue
		}
		block[field] = v
	}
	data, _ := json.Marshal(block)
	var n v1beta1.Netem
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("netem flags: %w", err)
	}
	if _, err := netemconv.FromTopology(&n); err != nil {
		var msgs []string
		for _, fe := range netemconv.Fields(err) {
			if fe.Field == "" {
				msgs = append(msgs, fe.Reason)
				continue
			}
			flag := strings.ReplaceAll(fe.Field, "_", "-")
			reason := fe.Reason
			if rest, ok := strings.CutPrefix(reason, "needs "); ok {
				reason = "needs " + fieldWord.ReplaceAllStringFunc(rest, func(w string) string {
					if _, ok := set[strings.ReplaceAll(w, "_", "-")]; ok {
						return "--" + strings.ReplaceAll(w, "_", "-")
					}
					return w
				})
			}
			msgs = append(msgs, fmt.Sprintf("--%s %q: %s", flag, *set[flag], reason))
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	return &n, nil
}

// fieldWord matches the Topology's netem field names in a reason that
// names what a field needs ("needs delay and jitter"), to spell them as
// flags.
var fieldWord = regexp.MustCompile(`\b[a-z]+(_[a-z]+)?\b`)

// linkField is the one field of a link a command changes.
type linkField struct {
	name string // its JSON name in spec.links[i]
	// set changes a link as the command asks.
	set func(*v1beta1.Link)
	// value is the field's value in a link, nil when unset.
	value func(*v1beta1.Link) any
	// spell says what a link has in the field, for the message.
	spell func(*v1beta1.Link) string
}

// changeLink sets one field of pod's link intf in its Topology and waits
// for the status, printing both steps.
func (o *options) changeLink(ctx context.Context, w io.Writer, pod, intf string, wf waitFlags, f linkField) error {
	var (
		t       *v1beta1.Topology
		changed bool
		before  string
		prevErr string // the link's error before the change
		index   int
	)
	// A patch tests the link's place first; another edit that moved the
	// links between read and patch fails the test, and the change is made
	// again from a fresh read.
	for attempt := 0; ; attempt++ {
		var err error
		if t, err = o.topology(ctx, pod); err != nil {
			return err
		}
		if index, err = linkIndex(t, intf); err != nil {
			return err
		}
		l := &t.Spec.Links[index]
		before = f.spell(l)
		if ls := t.LinkStatus(l.UID); ls != nil {
			prevErr = ls.LastError
		}
		after := l.DeepCopy()
		f.set(after)
		if equality.Semantic.DeepEqual(l, after) {
			break
		}
		err = o.client.Patch(ctx, t, client.RawPatch(types.JSONPatchType, linkPatch(index, l, f.name, f.value(after))))
		if isPatchConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		changed = true
		break
	}
	path := fmt.Sprintf("spec.links[%d].%s", index, f.name)
	l := t.Spec.Links[index]
	if changed {
		fmt.Fprintf(w, "topology.networkop.co.uk/%s patched (%s: %s -> %s)\n", pod, path, before, f.spell(&l))
	} else {
		fmt.Fprintf(w, "topology.networkop.co.uk/%s unchanged (%s is already %s)\n", pod, path, before)
	}
	if !wf.wait {
		return nil
	}
	t, err := o.waitConverged(ctx, w, t, l.UID, prevErr, wf.timeout)
	if t != nil {
		if perr := printLinks(w, linkViews([]v1beta1.Topology{onlyLink(t, index)}), false, false); perr != nil {
			return perr
		}
	}
	return err
}

// runtimeCall is a runtime change as meshnetd's REST API takes it, below
// the pod's path: links/INTERFACE/tail.
type runtimeCall struct {
	method, tail string
	body         proto.Message // nil for none
	// undo is the command that takes the change back.
	undo string
}

// specEnd is what a Topology says of one end of a link: the spec's link
// and the fields the controller manages there (its link status's list).
type specEnd struct {
	pod     string
	link    *v1beta1.Link
	managed []string
}

// says reports whether e's Topology sets f, or the controller set it
// before and will undo it (managed).
func (e specEnd) says(f linkField) (set, managed bool) {
	if e.link == nil {
		return false, false
	}
	return f.value(e.link) != nil, slices.Contains(e.managed, f.name)
}

// runtimeNote says how long a runtime change of field f of the link at
// index in the spec lasts, from what the Topologies of its end and, for
// the state, of its far end (far, when a pod's) say: a link is one cable,
// down when either end's Topology says down, and the controller converges
// both ends at its next pass over either pod. A field neither sets nor had
// set stays as the change left it.
func runtimeNote(index int, f linkField, end, far specEnd, undo string) string {
	field := fmt.Sprintf("spec.links[%d].%s", index, f.name)
	set, managed := end.says(f)
	farSet, farManaged := false, false
	if f.name == "state" {
		farSet, farManaged = far.says(f)
	}
	switch {
	case farSet:
		want := v1beta1.LinkUp
		if s := end.link.State; s != nil && *s == v1beta1.LinkDown {
			want = v1beta1.LinkDown
		}
		if *far.link.State == v1beta1.LinkDown {
			want = v1beta1.LinkDown
		}
		return fmt.Sprintf("%s is %s and %s's end says %s, so meshnet-controller puts the link back %s at its next pass over either pod (its --resync)",
			field, f.spell(end.link), far.pod, f.spell(far.link), want)
	case set:
		return fmt.Sprintf("%s is %s, which meshnet-controller puts back at its next pass over the pod (its --resync)", field, f.spell(end.link))
	case managed || farManaged:
		return fmt.Sprintf("%s was dropped from the Topology, so meshnet-controller undoes it at its next pass over the pod (its --resync)", field)
	}
	if undo != "" {
		undo = " (" + undo + ")"
	}
	return fmt.Sprintf("%s is not set, so the kernel keeps it until it is changed again%s or the pod restarts", field, undo)
}

// farEnd is what the Topology of the pod at the far end of pod's link l
// says of it: nothing for a peer that is no pod, or has no Topology.
func (o *options) farEnd(ctx context.Context, namespace, pod string, l *v1beta1.Link) (specEnd, error) {
	if l.PeerPod == v1beta1.PeerHost || l.LinkOptions != nil {
		return specEnd{}, nil
	}
	var t v1beta1.Topology
	if err := o.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: l.PeerPod}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return specEnd{}, nil
		}
		return specEnd{}, err
	}
	for i := range t.Spec.Links {
		if pl := &t.Spec.Links[i]; pl.UID == l.UID && pl.PeerPod == pod {
			return specEnd{pod: t.Name, link: pl, managed: t.LinkManagedFields(pl.UID)}, nil
		}
	}
	return specEnd{}, nil
}

// runtimeChange makes call on pod's link intf in the kernel of the pod's
// node only, through the aggregated API, and prints what changed (to
// value, in f's words) and the link as the kernel has it after. The
// Topology is read first, so that a pod or interface it lacks is named as
// the other commands name it, and is not changed.
func (o *options) runtimeChange(ctx context.Context, w io.Writer, pod, intf string, f linkField, value string, call runtimeCall) error {
	t, err := o.topology(ctx, pod)
	if err != nil {
		return err
	}
	index, err := linkIndex(t, intf)
	if err != nil {
		return err
	}
	api, err := o.aggregated(o.rest.Timeout)
	if err != nil {
		return err
	}
	req := api.Verb(call.method).AbsPath(relayapi.ProxyPath(o.namespace, pod, "links/"+intf+"/"+call.tail))
	if call.body != nil {
		data, err := protojson.Marshal(call.body)
		if err != nil {
			return err
		}
		req = req.SetHeader("Content-Type", "application/json").Body(data)
	}
	data, err := do(ctx, req)
	if err != nil {
		return err
	}
	// Every change answers with the link read back, as "link".
	var resp meshnetv1.SetLinkStateResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("read the aggregated API's answer: %w", err)
	}
	l := t.Spec.Links[index]
	end := specEnd{pod: pod, link: &l, managed: t.LinkManagedFields(l.UID)}
	far, err := o.farEnd(ctx, t.Namespace, pod, &l)
	if err != nil {
		return fmt.Errorf("the change is made; reading the far end's Topology: %w", err)
	}
	fmt.Fprintf(w, "link %s/%s %s set to %s in the kernel only; %s\n", pod, intf, f.name, value, runtimeNote(index, f, end, far, call.undo))
	ls := &v1beta1.LinkStatus{UID: l.UID, LocalIntf: intf}
	kernelstatus.Fill(ls, resp.GetLink())
	return printLinks(w, []linkView{{Namespace: t.Namespace, Pod: t.Name, Peer: peerOf(t, &l), Spec: l, Status: ls}}, false, false)
}

// linkIndex is the place in t's spec of its pod's link on intf; an error
// names the pod's links when it has none there.
func linkIndex(t *v1beta1.Topology, intf string) (int, error) {
	for i := range t.Spec.Links {
		if t.Spec.Links[i].LocalIntf == intf {
			return i, nil
		}
	}
	return -1, fmt.Errorf("interface %q: pod %s has no link on it (its links: %s)", intf, t.Name, intfs(t))
}

func intfs(t *v1beta1.Topology) string {
	var names []string
	for _, l := range t.Spec.Links {
		names = append(names, l.LocalIntf)
	}
	return or(strings.Join(names, ", "), "none")
}

// linkPatch is the JSON patch that sets field of link i to value (removes
// it for nil); link i must still be l (uid and interface).
func linkPatch(i int, l *v1beta1.Link, field string, value any) []byte {
	at := fmt.Sprintf("/spec/links/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": at + "/uid", "value": l.UID},
		{"op": "test", "path": at + "/local_intf", "value": l.LocalIntf},
	}
	if value != nil {
		ops = append(ops, map[string]any{"op": "add", "path": at + "/" + field, "value": value})
	} else {
		ops = append(ops, map[string]any{"op": "remove", "path": at + "/" + field})
	}
	data, _ := json.Marshal(ops)
	return data
}

// isPatchConflict: the JSON patch did not apply to the object as it is
// now (a test failed, a path another edit removed): the API server answers
// 422 with no field causes, unlike admission's refusals of a value.
func isPatchConflict(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Code == http.StatusUnprocessableEntity && (s.Details == nil || len(s.Details.Causes) == 0)
}

// onlyLink is t with its status but only link i in the spec, to print.
func onlyLink(t *v1beta1.Topology, i int) v1beta1.Topology {
	c := *t
	c.Spec.Links = []v1beta1.Link{t.Spec.Links[i]}
	return c
}

// waitConverged waits until t's status reports its current generation
// applied, and returns the Topology as it was then. The pod's being on no
// node yet ends the wait: the change is recorded and applies when the pod
// starts. An error on link uid (-1 for none) ends it too, once the node has
// tried this generation and the error is not prevErr, the one the link had
// before the change.
func (o *options) waitConverged(ctx context.Context, w io.Writer, t *v1beta1.Topology, uid int, prevErr string, timeout time.Duration) (*v1beta1.Topology, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gen := t.Generation
	stopped := func() error {
		if parent.Err() != nil {
			return fmt.Errorf("interrupted while waiting for %s's status; the change is in its Topology", t.Name)
		}
		return fmt.Errorf("timed out after %v waiting for %s's status to show generation %d applied; it says: %s",
			timeout, t.Name, gen, readySummary(t))
	}
	said := ""
	var wi watch.Interface
	defer func() {
		if wi != nil {
			wi.Stop()
		}
	}()
	for {
		if done, err := converged(w, t, gen, uid, prevErr); done {
			return t, err
		}
		// Say once why the wait goes on, as the status gives it.
		if ready := t.ReadyCondition(gen); ready != nil && ready.Message != said {
			said = ready.Message
			fmt.Fprintf(o.stderr, "waiting for %s: Ready=%s %s: %s\n", t.Name, ready.Status, ready.Reason, ready.Message)
		}
		if wi == nil {
			var err error
			wi, err = o.client.Watch(ctx, &v1beta1.TopologyList{}, &client.ListOptions{
				Namespace:     t.Namespace,
				FieldSelector: fields.OneTermEqualSelector("metadata.name", t.Name),
				Raw:           &metav1.ListOptions{ResourceVersion: t.ResourceVersion},
			})
			if err != nil {
				if ctx.Err() != nil {
					return t, stopped()
				}
				return t, err
			}
		}
		select {
		case <-ctx.Done():
			return t, stopped()
		case ev, ok := <-wi.ResultChan():
			switch {
			case !ok, ev.Type == watch.Error:
				// The watch ended early (its timeout, the server's
				// restart, an expired version): read afresh, watch again.
				wi.Stop()
				wi = nil
				var fresh v1beta1.Topology
				if err := o.client.Get(ctx, client.ObjectKeyFromObject(t), &fresh); err != nil {
					if ctx.Err() != nil {
						return t, stopped()
					}
					return t, err
				}
				t = &fresh
			case ev.Type == watch.Deleted:
				return nil, fmt.Errorf("pod %q: its Topology was deleted while waiting for its status", t.Name)
			default:
				if next, ok := ev.Object.(*v1beta1.Topology); ok {
					t = next
				}
			}
		}
	}
}

// converged reports whether t's status is final for generation gen, and
// the error when the final word is a failure. A failed apply is retried by
// the controller, so an error is final only when the node reported it on
// link uid itself for this generation: with LinkErrors, or new since the
// change (not prevErr). Other links' errors do not fail a link's change.
func converged(w io.Writer, t *v1beta1.Topology, gen int64, uid int, prevErr string) (bool, error) {
	ready := t.ReadyCondition(gen)
	if t.Status.ObservedGeneration < gen || ready == nil {
		return false, nil
	}
	ls := t.LinkStatus(uid)
	switch {
	case ready.Status == metav1.ConditionTrue:
		fmt.Fprintf(w, "topology.networkop.co.uk/%s converged at generation %d (%s)\n", t.Name, gen, ready.Message)
		return true, nil
	case ready.Reason == v1beta1.ReasonPodNotScheduled:
		fmt.Fprintf(w, "topology.networkop.co.uk/%s recorded at generation %d; it applies when the pod starts (%s)\n", t.Name, gen, ready.Message)
		return true, nil
	case ready.Reason == v1beta1.ReasonInvalidSpec:
		return true, fmt.Errorf("%s's Topology has the change, but it cannot be applied: %s", t.Name, ready.Message)
	case ls != nil && ls.LastError != "" && (ready.Reason == v1beta1.ReasonLinkErrors || ls.LastError != prevErr):
		return true, fmt.Errorf("%s's Topology has the change, but %s's node refused it on %s: %s", t.Name, t.Name, ls.LocalIntf, ls.LastError)
	case ready.Reason == v1beta1.ReasonLinkErrors && ls != nil:
		fmt.Fprintf(w, "topology.networkop.co.uk/%s converged at generation %d for %s; other links have errors: %s\n", t.Name, gen, ls.LocalIntf, ready.Message)
		return true, nil
	case ready.Reason == v1beta1.ReasonLinkErrors:
		return true, fmt.Errorf("%s's Topology has the change, but links have errors: %s", t.Name, ready.Message)
	}
	return false, nil
}

// readySummary is t's Ready condition in a few words.
func readySummary(t *v1beta1.Topology) string {
	ready := meta.FindStatusCondition(t.Status.Conditions, v1beta1.ConditionReady)
	if ready == nil {
		return "no Ready condition yet (is meshnet-controller running?)"
	}
	return fmt.Sprintf("Ready=%s %s: %s (generation %d)", ready.Status, ready.Reason, ready.Message, ready.ObservedGeneration)
}

// exactArgs names the missing arguments, as kubectl does.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			missing := names[len(args):]
			verb := "is"
			if len(missing) > 1 {
				verb = "are"
			}
			return fmt.Errorf("%s %s required: see '%s --help'", strings.Join(missing, " and "), verb, cmd.CommandPath())
		}
		if len(args) > len(names) {
			return fmt.Errorf("unexpected argument %q: %s takes %s", args[len(names)], cmd.CommandPath(), strings.Join(names, " "))
		}
		return nil
	}
}
