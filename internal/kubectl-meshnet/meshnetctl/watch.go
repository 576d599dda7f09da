package meshnetctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kernelstatus"
	"github.com/meshnet/meshnet/internal/relayapi"
)

func newWatchCommand(o *options) *cobra.Command {
	var source string
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the link changes of a namespace as they happen",
		Long: `Print every link of the namespace's pods, then each change as it happens:
wired, state, carrier, MTU, netem, errors, removed, routes; with the
kernel's, each window of a LinkFault beginning and ending on the links it
holds (the status names the faults holding a link).

By default (--source kernel) the changes are the kernel's own, as each
node's meshnetd sees them, within milliseconds, read through meshnet's
aggregated API (list and watch on links, which the namespace's view role
has). --source status follows the pods' Topology status instead: what the
controller wrote back from the kernel, within a second or so, and each
pod's Ready condition; it needs only the right to watch Topologies.
Ctrl-C ends it.`,
		Example: `  # Watch the lab while pulling a cable in another terminal
  kubectl meshnet watch -n lab

  # The same from the Topologies' status (no aggregated API needed)
  kubectl meshnet watch -n lab --source status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var watch func(context.Context, io.Writer) error
			switch source {
			case "kernel":
				watch = o.watchKernel
			case "status":
				watch = o.watch
			default:
				return fmt.Errorf("--source %q: want kernel or status", source)
			}
			if err := o.connect(); err != nil {
				return err
			}
			out := io.Writer(cmd.OutOrStdout())
			if source == "kernel" {
				// The kernel does not know faults; the status names them.
				lw := &lineWriter{w: out}
				go o.watchFaults(cmd.Context(), lw)
				out = lw
			}
			err := watch(cmd.Context(), out)
			if errors.Is(err, context.Canceled) {
				return nil // Ctrl-C
			}
			return err
		},
	}
	cmd.Flags().StringVar(&source, "source", "kernel", "where the changes come from: kernel (each node's meshnetd, through the aggregated API) or status (the Topologies' status)")
	return cmd
}

// watchKernel prints the link events of the namespace, as the nodes'
// meshnetd see them in the kernel, through the aggregated API, until ctx
// ends. A stream that ends (a relay replica restarting) is opened again,
// after a transient error too; its listing then prints only what changed
// meanwhile (but not the link ends removed meanwhile, which the listing
// cannot tell apart from those of a node not listed yet).
func (o *options) watchKernel(ctx context.Context, w io.Writer) error {
	api, err := o.aggregated(0) // a stream: no --request-timeout
	if err != nil {
		return err
	}
	printHeader(w)
	seen := newSeen()
	for first := true; ; first = false {
		if !first {
			if err := pause(ctx); err != nil {
				return err
			}
		}
		rc, err := api.Get().AbsPath(relayapi.LinksPath(o.namespace)).Param(relayapi.WatchParam, "true").Stream(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case first && (apierrors.IsNotFound(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsBadRequest(err)):
			return fmt.Errorf("%w (is meshnet's aggregated API, APIService %s, installed and Available? --source status follows the Topologies' status without it)", err, relayapi.APIService)
		case err != nil && (first || !transient(err)):
			return err
		case err != nil:
			continue
		}
		lines := bufio.NewScanner(rc)
		lines.Buffer(make([]byte, 64<<10), 16<<20)
		for lines.Scan() {
			var ev meshnetv1.WatchLinksResponse
			if err := protojson.Unmarshal(lines.Bytes(), &ev); err != nil {
				rc.Close()
				return fmt.Errorf("read the aggregated API's event: %w", err)
			}
			seen.print(w, &ev)
		}
		err = lines.Err()
		rc.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("read the aggregated API's events: %w", err)
		}
	}
}

// transient reports whether a watch refused with err is worth opening
// again: the relay or the API server busy or away, not the user's rights
// or request.
func transient(err error) bool {
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsUnexpectedServerError(err) || !isAPIStatus(err)
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// linkEnd names a link end in a namespace.
type linkEnd struct{ pod, intf string }

// seen is what a kernel watch last printed of each link end and each
// pod's routes, so that a listing prints only what changed.
type seen struct {
	links  map[linkEnd]*v1beta1.LinkStatus
	routes map[string]string
}

func newSeen() *seen {
	return &seen{links: map[linkEnd]*v1beta1.LinkStatus{}, routes: map[string]string{}}
}

// print prints what ev changed of what was seen, and records it. A
// listing's lines carry the time of the listing.
func (s *seen) print(w io.Writer, ev *meshnetv1.WatchLinksResponse) {
	at := ev.GetTime().AsTime().Local()
	pod := ev.GetPod().GetName()
	switch ev.GetType() {
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED, meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED:
		k := linkEnd{pod, ev.GetLink().GetInterface()}
		now := &v1beta1.LinkStatus{LocalIntf: k.intf}
		kernelstatus.Fill(now, ev.GetLink())
		if old := s.links[k]; old == nil {
			printLineAt(w, at, pod, k.intf, "wired: "+reading(now))
		} else if d := linkChanges(old, now); len(d) > 0 {
			printLineAt(w, at, pod, k.intf, strings.Join(d, ", "))
		}
		s.links[k] = now
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_DELETED:
		k := linkEnd{pod, ev.GetLink().GetInterface()}
		if s.links[k] != nil {
			printLineAt(w, at, pod, k.intf, "removed")
			delete(s.links, k)
		}
	case meshnetv1.LinkEventType_LINK_EVENT_TYPE_ROUTES:
		var rs []string
		for _, r := range ev.GetRoutes() {
			rs = append(rs, strings.TrimSpace(r.GetDst()+" via "+or(r.GetGw(), "link")+" "+r.GetDev()))
		}
		routes := or(strings.Join(rs, ", "), none)
		if old, ok := s.routes[pod]; ok && old == routes || !ok && len(rs) == 0 {
			return // unchanged, or none at the first listing
		}
		s.routes[pod] = routes
		printLineAt(w, at, pod, "-", "routes: "+routes)
	}
}

// watch prints the changes of the namespace's Topologies until ctx ends.
func (o *options) watch(ctx context.Context, w io.Writer) error {
	known := map[string]*v1beta1.Topology{}
	printHeader(w)
	for first := true; ; first = false {
		if !first {
			if err := pause(ctx); err != nil {
				return err
			}
		}
		var list v1beta1.TopologyList
		if err := o.client.List(ctx, &list, client.InNamespace(o.namespace)); err != nil {
			return err
		}
		// After a gap (the first list, or a watch that expired), what
		// changed meanwhile is printed as one change.
		seen := map[string]bool{}
		for i := range list.Items {
			t := &list.Items[i]
			seen[t.Name] = true
			old, ok := known[t.Name]
			switch {
			case ok:
				printChanges(w, old, t)
			case !first: // made during the gap
				printLine(w, t.Name, "-", fmt.Sprintf("Topology created, %d links", len(t.Spec.Links)))
				printChanges(w, &v1beta1.Topology{}, t)
			}
			known[t.Name] = t
		}
		for name := range known {
			if !seen[name] {
				printLine(w, name, "-", "Topology deleted")
				delete(known, name)
			}
		}
		err := o.follow(ctx, w, list.ResourceVersion, known)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			return err
		}
	}
}

// follow prints the changes of one watch from rv; it returns when the
// watch ends.
func (o *options) follow(ctx context.Context, w io.Writer, rv string, known map[string]*v1beta1.Topology) error {
	wi, err := o.client.Watch(ctx, &v1beta1.TopologyList{}, &client.ListOptions{
		Namespace: o.namespace,
		Raw:       &metav1.ListOptions{ResourceVersion: rv},
	})
	if err != nil {
		return err
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		case watch.Deleted:
			if t, ok := ev.Object.(*v1beta1.Topology); ok {
				printLine(w, t.Name, "-", "Topology deleted")
				delete(known, t.Name)
			}
		case watch.Added, watch.Modified:
			t, ok := ev.Object.(*v1beta1.Topology)
			if !ok {
				continue
			}
			old, ok := known[t.Name]
			if !ok {
				printLine(w, t.Name, "-", fmt.Sprintf("Topology created, %d links", len(t.Spec.Links)))
				old = &v1beta1.Topology{}
			}
			printChanges(w, old, t)
			known[t.Name] = t
		}
	}
	return nil
}

// printChanges prints what the status of a Topology says changed from old
// to now: link by link, then its Ready condition.
func printChanges(w io.Writer, old, now *v1beta1.Topology) {
	for _, c := range changes(old, now) {
		printLine(w, now.Name, c.intf, c.what)
	}
}

type change struct{ intf, what string }

// changes lists the differences of two versions' status, in the order of
// now's links.
func changes(old, now *v1beta1.Topology) []change {
	var out []change
	was := map[int]*v1beta1.LinkStatus{}
	for i := range old.Status.Links {
		was[old.Status.Links[i].UID] = &old.Status.Links[i]
	}
	for i := range now.Status.Links {
		n := &now.Status.Links[i]
		o := was[n.UID]
		delete(was, n.UID)
		switch {
		case o == nil && old.AsSpecified(n.UID):
			// A Topology past 4,096 links lists only the links not as
			// specified: this one was as specified.
			out = append(out, change{n.LocalIntf, "no longer as specified: " + reading(n)})
			continue
		case o == nil || (o.State == "" && n.State != ""):
			if n.State != "" {
				out = append(out, change{n.LocalIntf, "wired: " + reading(n)})
			}
			continue
		}
		if d := linkChanges(o, n); len(d) > 0 {
			out = append(out, change{n.LocalIntf, strings.Join(d, ", ")})
		}
	}
	for _, o := range old.Status.Links {
		switch {
		case was[o.UID] == nil:
		case now.AsSpecified(o.UID):
			out = append(out, change{o.LocalIntf, "as specified"})
		default:
			out = append(out, change{o.LocalIntf, "removed from the status"})
		}
	}
	r0 := meta.FindStatusCondition(old.Status.Conditions, v1beta1.ConditionReady)
	r1 := meta.FindStatusCondition(now.Status.Conditions, v1beta1.ConditionReady)
	if r1 != nil && (r0 == nil || r0.Status != r1.Status || r0.Reason != r1.Reason) {
		out = append(out, change{"-", fmt.Sprintf("Ready %s (%s: %s)", r1.Status, r1.Reason, r1.Message)})
	}
	return out
}

// reading says how a link end is, when it first appears.
func reading(n *v1beta1.LinkStatus) string {
	return fmt.Sprintf("%s, %s, carrier %s, mtu %d%s", or(string(n.Kind), "?"), n.State, yesNo(n.Carrier), n.MTU, netemSuffix(n.Netem))
}

// linkChanges lists what differs between two readings of a link end.
func linkChanges(o, n *v1beta1.LinkStatus) []string {
	var d []string
	diff := func(name, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %s -> %s", name, a, b))
		}
	}
	diff("kind", or(string(o.Kind), "?"), or(string(n.Kind), "?"))
	diff("state", or(string(o.State), pending), or(string(n.State), pending))
	diff("carrier", yesNo(o.Carrier), yesNo(n.Carrier))
	diff("mtu", strconv.Itoa(int(o.MTU)), strconv.Itoa(int(n.MTU)))
	diff("netem", words(o.Netem), words(n.Netem))
	diff("error", or(o.LastError, none), or(n.LastError, none))
	diff("held by", or(strings.Join(o.Faults, ","), none), or(strings.Join(n.Faults, ","), none))
	return d
}

func netemSuffix(n *v1beta1.Netem) string {
	if n == nil {
		return ""
	}
	return ", netem " + words(n)
}

// pause waits a second before a watch is opened again: one the server
// ended at once must not become a busy loop.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
		return nil
	}
}

// lineFormat is watch's columns: time, pod, interface, change.
const lineFormat = "%-8s  %-16s  %-10s  %s\n"

func printHeader(w io.Writer) { fmt.Fprintf(w, lineFormat, "TIME", "POD", "INTERFACE", "CHANGE") }

func printLine(w io.Writer, pod, intf, what string) { printLineAt(w, time.Now(), pod, intf, what) }

func printLineAt(w io.Writer, at time.Time, pod, intf, what string) {
	fmt.Fprintf(w, lineFormat, at.Format(time.TimeOnly), pod, intf, what)
}

// lineWriter lets the link watch and the fault watch print whole lines to
// one output (fmt.Fprintf writes a line in one Write).
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// watchFaults prints, for each link a LinkFault of the namespace holds,
// when its windows begin and end (the fault's status, written by the
// controller at each edge), until ctx ends. A user who may not watch
// LinkFaults is told so once.
func (o *options) watchFaults(ctx context.Context, w io.Writer) {
	known := map[string]v1beta1.LinkFaultStatus{}
	for first := true; ; first = false {
		if !first {
			if pause(ctx) != nil {
				return
			}
		}
		var list v1beta1.LinkFaultList
		if err := o.client.List(ctx, &list, client.InNamespace(o.namespace)); err != nil {
			if ctx.Err() == nil {
				printLine(w, "-", "-", "LinkFaults not followed: "+err.Error())
			}
			return
		}
		for i := range list.Items {
			printFault(w, &list.Items[i], known, first)
		}
		wi, err := o.client.Watch(ctx, &v1beta1.LinkFaultList{}, &client.ListOptions{
			Namespace: o.namespace, Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			continue
		}
		for ev := range wi.ResultChan() {
			f, ok := ev.Object.(*v1beta1.LinkFault)
			switch {
			case !ok:
			case ev.Type == watch.Deleted:
				if known[f.Name].Phase == v1beta1.FaultActive {
					for _, l := range f.Spec.Links {
						printLine(w, l.Pod, l.Interface, fmt.Sprintf("let go by LinkFault %s (deleted)", f.Name))
					}
				}
				delete(known, f.Name)
			default:
				printFault(w, f, known, false)
			}
		}
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// printFault prints what changed of fault f since known says, link by
// link: a window begun, a window ended. The first listing prints the
// faults holding links now.
func printFault(w io.Writer, f *v1beta1.LinkFault, known map[string]v1beta1.LinkFaultStatus, first bool) {
	was, seen := known[f.Name]
	now := f.Status
	known[f.Name] = now
	if seen && was.Phase == now.Phase && was.Windows == now.Windows {
		return
	}
	var what string
	switch {
	case now.Phase == v1beta1.FaultActive:
		what = fmt.Sprintf("held by LinkFault %s (window %d%s)", f.Name, now.Windows, untilEdge(now.NextEdge))
	case !first && was.Phase == v1beta1.FaultActive:
		what = fmt.Sprintf("let go by LinkFault %s (window %d ended; %s)", f.Name, was.Windows, strings.ToLower(string(now.Phase)))
	default:
		return
	}
	for _, l := range f.Spec.Links {
		printLine(w, l.Pod, l.Interface, what)
	}
	if f.Spec.Selector != nil { // the status counts what it selects
		printLine(w, "-", strings.Join(f.Spec.Interfaces, ","), fmt.Sprintf("Topologies %s: %s", metav1.FormatLabelSelector(f.Spec.Selector), what))
	}
}

func untilEdge(t *metav1.MicroTime) string {
	if t == nil {
		return ""
	}
	return ", until " + t.Local().Format(time.TimeOnly)
}
