package meshnetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
			if err := o.connectPod(cmd.Context(), args); err != nil {
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
