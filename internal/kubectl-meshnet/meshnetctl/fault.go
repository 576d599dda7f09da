package meshnetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// forHelp says what --for does, for the help of the commands that take it.
const forHelp = `
With --for DURATION the change has an end: the command creates a
LinkFault (kubectl get linkfaults) that holds the link for that long,
from now, and the link goes back to what its Topology says when the time
is up, also when meshnetd or meshnet-controller restart meanwhile (the
fault is kept in the API server). The Topology is left as it is.
kubectl delete linkfault NAME ends it at once.`

// forFlag binds --for.
func forFlag(fs *pflag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "for", 0, "hold the change this long (30s, 2m) with a LinkFault, then give the link back to its Topology (see above)")
}

// checkFor refuses the flags that mean nothing to a change with an end.
func checkFor(fs *pflag.FlagSet, d time.Duration) error {
	if d < 10*time.Millisecond {
		return fmt.Errorf("--for %v: must be at least 10ms", d)
	}
	if fs.Changed("runtime") {
		return errors.New("--for: cannot be combined with --runtime (a fault is kept in the API server; a runtime change is not)")
	}
	return nil
}

// newFlapCommand is kubectl meshnet flap.
func newFlapCommand(o *options) *cobra.Command {
	var (
		wf           waitFlags
		down, upTime time.Duration
		count        int32
	)
	cmd := &cobra.Command{
		Use:   "flap POD INTERFACE --down D --up U [--count N]",
		Short: "Flap a link: down for D, up for U, N times or until stopped",
		Long: `Flap the link of POD's INTERFACE: its cable pulled for --down, put back for
--up, --count times (without --count, until the fault is deleted).

The command creates a LinkFault (kubectl get linkfaults) whose first window
begins now; the controller holds the link down in each window and gives it
back to its Topology between them and at the end, also across restarts of
meshnetd and meshnet-controller. kubectl delete linkfault NAME stops it.`,
		Example: `  # Down 2 s, up 8 s, ten times
  kubectl meshnet flap r1 eth1 -n lab --down 2s --up 8s --count 10

  # Until stopped
  kubectl meshnet flap r1 eth1 -n lab --down 1s --up 4s
  kubectl delete linkfault -n lab r1-eth1-flap-x7k2p`,
		Args:              exactArgs("POD", "INTERFACE"),
		ValidArgsFunction: o.completeLinks,
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			if down < 10*time.Millisecond {
				errs = append(errs, fmt.Errorf("--down %v: must be at least 10ms", down))
			}
			if upTime <= 0 {
				errs = append(errs, fmt.Errorf("--up %v: must be more than 0s", upTime))
			}
			if cmd.Flags().Changed("count") && count < 1 {
				errs = append(errs, fmt.Errorf("--count %d: must be at least 1", count))
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			if err := o.connectPod(cmd.Context(), args); err != nil {
				return err
			}
			spec := v1beta1.LinkFaultSpec{
				State:    utilptr.To(v1beta1.LinkDown),
				Duration: v1beta1.DurationOf(down),
				Period:   utilptr.To(v1beta1.DurationOf(down + upTime)),
			}
			if count > 0 {
				spec.Count = &count
			}
			return o.createFault(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], "flap", spec, wf)
		},
	}
	cmd.Flags().DurationVar(&down, "down", 0, "how long the link is down in each cycle (2s)")
	cmd.Flags().DurationVar(&upTime, "up", 0, "how long the link is up between two downs (8s)")
	cmd.Flags().Int32Var(&count, "count", 0, "how many times the link goes down (default: until the fault is deleted)")
	wf.bind(cmd.Flags())
	return cmd
}

// faultName is what a fault's generated name begins with: the pod, the
// interface and the verb, in the characters an object name may have.
func faultName(pod, intf, verb string) string {
	clean := strings.Trim(nonName.ReplaceAllString(strings.ToLower(intf), "-"), "-")
	name := fmt.Sprintf("%s-%s-%s-", pod, clean, verb)
	if len(name) > 240 {
		name = name[:240]
	}
	return name
}

var nonName = regexp.MustCompile(`[^a-z0-9.-]+`)

// createFault creates a LinkFault holding pod's link intf with spec from
// now, says so, and with wf.wait waits until the pod's status shows the
// link held.
func (o *options) createFault(ctx context.Context, w io.Writer, pod, intf, verb string, spec v1beta1.LinkFaultSpec, wf waitFlags) error {
	t, err := o.topology(ctx, pod)
	if err != nil {
		return err
	}
	index, err := linkIndex(t, intf)
	if err != nil {
		return err
	}
	now := time.Now()
	spec.Links = []v1beta1.FaultLink{{Pod: pod, Interface: intf}}
	spec.Start = &metav1.MicroTime{Time: now}
	f := &v1beta1.LinkFault{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, GenerateName: faultName(pod, intf, verb)},
		Spec:       spec,
	}
	if err := o.client.Create(ctx, f); err != nil {
		return fmt.Errorf("create LinkFault for %s:%s: %w", pod, intf, err)
	}
	d, _ := spec.Duration.Parse()
	switch {
	case spec.Period != nil:
		p, _ := spec.Period.Parse()
		times := "until the fault is deleted"
		if spec.Count != nil {
			times = fmt.Sprintf("%d times, until %s", *spec.Count, now.Add(time.Duration(*spec.Count-1)*p+d).Format(time.TimeOnly))
		}
		fmt.Fprintf(w, "linkfault.networkop.co.uk/%s created (%s:%s down %v, up %v, %s)\n", f.Name, pod, intf, d, p-d, times)
	default:
		fmt.Fprintf(w, "linkfault.networkop.co.uk/%s created (%s:%s %s for %v, until %s)\n", f.Name, pod, intf, verb, d, now.Add(d).Format(time.TimeOnly))
	}
	fmt.Fprintf(w, "end it now: kubectl delete linkfault %s -n %s\n", f.Name, o.namespace)
	if !wf.wait {
		return nil
	}
	uid := t.Spec.Links[index].UID
	ctx, cancel := context.WithTimeout(ctx, wf.timeout)
	defer cancel()
	for {
		if time.Since(now) > d {
			fmt.Fprintf(w, "the first window (%v) ended before %s's status showed it\n", d, pod)
			return nil
		}
		if err := o.client.Get(ctx, client.ObjectKeyFromObject(t), t); err == nil {
			if ls := t.LinkStatuses().Of(uid); ls != nil && slices.Contains(ls.Faults, f.Name) {
				if err := printLinks(w, linkViews([]v1beta1.Topology{onlyLink(t, index)}), false, false); err != nil {
					return err
				}
				if ls.LastError != "" {
					return fmt.Errorf("%s holds %s:%s, but its node could not apply it: %s", f.Name, pod, intf, ls.LastError)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %v waiting for %s's status to show %s held by %s; it says: %s", wf.timeout, pod, intf, f.Name, readySummary(t))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
