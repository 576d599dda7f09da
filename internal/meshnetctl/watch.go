package meshnetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func newWatchCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the link changes of a namespace as they happen",
		Long: `Print every change of a link of the namespace's pods as it happens: wired,
state, carrier, MTU, netem, errors, and each pod's Ready condition.

The changes are those the pods' Topology status records: what the
controller wrote back from the kernel, within a second or so of the
change, not each notification of the kernel. Ctrl-C ends it.`,
		Example: `  # Watch the lab while pulling a cable in another terminal
  kubectl meshnet watch -n lab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.connect(); err != nil {
				return err
			}
			err := o.watch(cmd.Context(), cmd.OutOrStdout())
			if errors.Is(err, context.Canceled) {
				return nil // Ctrl-C
			}
			return err
		},
	}
	return cmd
}

// watch prints the changes of the namespace's Topologies until ctx ends.
func (o *options) watch(ctx context.Context, w io.Writer) error {
	known := map[string]*v1beta1.Topology{}
	fmt.Fprintf(w, "%-8s  %-16s  %-10s  %s\n", "TIME", "POD", "INTERFACE", "CHANGE")
	for first := true; ; first = false {
		if !first {
			// A watch the server ended at once must not become a busy
			// loop of lists.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
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
		if o == nil || (o.State == "" && n.State != "") {
			if n.State != "" {
				out = append(out, change{n.LocalIntf, fmt.Sprintf("wired: %s, %s, carrier %s, mtu %d%s",
					or(string(n.Kind), "?"), n.State, yesNo(n.Carrier), n.MTU, netemSuffix(n.Netem))})
			}
			continue
		}
		var d []string
		diff := func(name, a, b string) {
			if a != b {
				d = append(d, fmt.Sprintf("%s %s -> %s", name, a, b))
			}
		}
		diff("state", or(string(o.State), pending), or(string(n.State), pending))
		diff("carrier", yesNo(o.Carrier), yesNo(n.Carrier))
		diff("mtu", strconv.Itoa(int(o.MTU)), strconv.Itoa(int(n.MTU)))
		diff("netem", words(o.Netem), words(n.Netem))
		diff("error", or(o.LastError, none), or(n.LastError, none))
		if len(d) > 0 {
			out = append(out, change{n.LocalIntf, strings.Join(d, ", ")})
		}
	}
	for _, o := range old.Status.Links {
		if was[o.UID] != nil {
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

func netemSuffix(n *v1beta1.Netem) string {
	if n == nil {
		return ""
	}
	return ", netem " + words(n)
}

func printLine(w io.Writer, pod, intf, what string) {
	fmt.Fprintf(w, "%-8s  %-16s  %-10s  %s\n", time.Now().Format(time.TimeOnly), pod, intf, what)
}
