package meshnetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
)

func newRoutesCommand(o *options) *cobra.Command {
	var (
		wf            waitFlags
		add, via, dev string
		del           string
	)
	cmd := &cobra.Command{
		Use:   "routes POD [--add DST --via GW [--dev INTERFACE] | --delete DST]",
		Short: "List a pod's routes, or add or delete one",
		Long: `List the routes meshnet installs in POD, or add or delete one.

A change edits spec.routes of POD's Topology. An added route replaces the
one to the same destination.
` + declarative,
		Example: `  # r1's routes
  kubectl meshnet routes r1 -n lab

  # Reach 192.0.2.0/24 through r2
  kubectl meshnet routes r1 -n lab --add 192.0.2.0/24 --via 10.0.0.2

  # And no more
  kubectl meshnet routes r1 -n lab --delete 192.0.2.0/24`,
		Args:              exactArgs("POD"),
		ValidArgsFunction: o.completePods,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			switch {
			case add != "" && del != "":
				return errors.New("--add and --delete: give one of them")
			case add == "" && (fs.Changed("via") || fs.Changed("dev")):
				return errors.New("--via and --dev describe a route to add: give --add DST as well")
			case add != "" && via == "" && dev == "":
				return fmt.Errorf("--add %s: a route needs --via GW, --dev INTERFACE or both", add)
			}
			if err := o.connectPod(cmd.Context(), args); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if add == "" && del == "" {
				t, err := o.topology(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printRoutes(w, t)
			}
			return o.changeRoutes(cmd.Context(), w, args[0], v1beta1.Route{Dst: add, Gw: via, Dev: dev}, del, wf)
		},
	}
	cmd.Flags().StringVar(&add, "add", "", "destination prefix of a route to add (192.0.2.0/24)")
	cmd.Flags().StringVar(&via, "via", "", "gateway of the route to add")
	cmd.Flags().StringVar(&dev, "dev", "", "interface of the route to add")
	cmd.Flags().StringVar(&del, "delete", "", "destination prefix of a route to delete")
	wf.bind(cmd.Flags())
	return cmd
}

// changeRoutes adds add (when its Dst is set) or deletes the route to del
// in pod's Topology, then waits for the status.
func (o *options) changeRoutes(ctx context.Context, w io.Writer, pod string, add v1beta1.Route, del string, wf waitFlags) error {
	var (
		t           *v1beta1.Topology
		path, was   string
		now, action string
	)
	for attempt := 0; ; attempt++ {
		var err error
		if t, err = o.topology(ctx, pod); err != nil {
			return err
		}
		routes := append([]v1beta1.Route(nil), t.Spec.Routes...)
		i := routeIndex(routes, add.Dst+del)
		switch {
		case del != "" && i < 0:
			return fmt.Errorf("--delete %s: pod %s has no route to it (its routes: %s)", del, pod, dsts(routes))
		case del != "":
			path, was, now, action = fmt.Sprintf("spec.routes[%d]", i), routeWords(routes[i]), none, "deleted"
			routes = append(routes[:i], routes[i+1:]...)
		case i >= 0 && routes[i] == add:
			fmt.Fprintf(w, "topology.networkop.co.uk/%s unchanged (spec.routes[%d] is already %s)\n", pod, i, routeWords(add))
			return o.waitRoutes(ctx, w, t, wf)
		case i >= 0:
			path, was, now, action = fmt.Sprintf("spec.routes[%d]", i), routeWords(routes[i]), routeWords(add), "replaced"
			routes[i] = add
		default:
			path, was, now, action = fmt.Sprintf("spec.routes[%d]", len(routes)), none, routeWords(add), "added"
			routes = append(routes, add)
		}
		// The whole list changes, so the patch tests that nothing changed
		// since the read; a status write in between makes it read again.
		ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": t.ResourceVersion}}
		switch {
		case len(routes) > 0:
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/routes", "value": routes})
		default:
			ops = append(ops, map[string]any{"op": "remove", "path": "/spec/routes"})
		}
		data, _ := json.Marshal(ops)
		err = o.client.Patch(ctx, t, client.RawPatch(types.JSONPatchType, data))
		if isPatchConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	fmt.Fprintf(w, "topology.networkop.co.uk/%s patched (%s %s: %s -> %s)\n", pod, path, action, was, now)
	return o.waitRoutes(ctx, w, t, wf)
}

func (o *options) waitRoutes(ctx context.Context, w io.Writer, t *v1beta1.Topology, wf waitFlags) error {
	if !wf.wait {
		return nil
	}
	t, err := o.waitConverged(ctx, w, t, -1, "", wf.timeout)
	if err != nil {
		return err
	}
	return printRoutes(w, t)
}

func routeIndex(routes []v1beta1.Route, dst string) int {
	for i := range routes {
		if routes[i].Dst == dst {
			return i
		}
	}
	return -1
}

func dsts(routes []v1beta1.Route) string {
	var d []string
	for _, r := range routes {
		d = append(d, r.Dst)
	}
	return or(strings.Join(d, ", "), "none")
}

// routeWords spells a route as ip route does.
func routeWords(r v1beta1.Route) string {
	w := []string{r.Dst}
	if r.Gw != "" {
		w = append(w, "via", r.Gw)
	}
	if r.Dev != "" {
		w = append(w, "dev", r.Dev)
	}
	return strings.Join(w, " ")
}

func printRoutes(w io.Writer, t *v1beta1.Topology) error {
	if len(t.Spec.Routes) == 0 {
		fmt.Fprintf(w, "%s has no routes in its Topology.\n", t.Name)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "POD\tDESTINATION\tGATEWAY\tINTERFACE\tINSTALLED")
	for _, r := range t.Spec.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, r.Dst, or(r.Gw, none), or(r.Dev, none), yesNo(t.Status.RoutesManaged && t.Status.ObservedGeneration >= t.Generation))
	}
	return tw.Flush()
}
