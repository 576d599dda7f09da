package meshnetctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/netemconv"
	"github.com/meshnet/meshnet/internal/relayapi"
	"github.com/meshnet/meshnet/internal/topograph"
)

func newLinksCommand(o *options) *cobra.Command {
	var (
		output   string
		counters bool
	)
	cmd := &cobra.Command{
		Use:   "links [POD]",
		Short: "List the links of a namespace's pods, or of one pod, as the kernel has them",
		Long: `List every link end: its peer, kind, admin state, carrier, MTU and netem,
as the pod's node read them from the kernel into the Topology's status, and
its far end (FAR-END) as the far end's own node reads it: up, down, or
missing (a VXLAN end has carrier whether its far end exists or not).
-o wide adds BRIDGE: the bridge an end of an L2 segment's pod is a port of.
A link whose state is <pending> is not wired yet (its status says why).

--counters adds each end's packet, byte and drop counters, read from the
kernel now by the meshnetd of each pod's node, through the API server and
meshnet's aggregated API (list on links in meshnet.networkop.co.uk, in the
namespace's view role).`,
		Example: `  # Every link of the namespace
  kubectl meshnet links -n lab

  # One pod's links, with what the Topology asks for next to them
  kubectl meshnet links r1 -n lab -o wide

  # With the kernel's counters, read now
  kubectl meshnet links -n lab --counters

  # The links that are down, with jq
  kubectl meshnet links -n lab -o json | jq '.items[] | select(.status.state == "down")'`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completePods,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "wide", "json", "yaml"); err != nil {
				return err
			}
			if err := o.connectPod(cmd.Context(), args); err != nil {
				return err
			}
			topos, err := o.topologies(cmd.Context(), args)
			if err != nil {
				return err
			}
			views := linkViews(topos)
			if counters {
				if err := o.addCounters(cmd.Context(), views, args); err != nil {
					return err
				}
			}
			switch output {
			case "json", "yaml":
				return printStructured(cmd.OutOrStdout(), output, linkList{Items: views})
			}
			if len(views) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "No links found in %s namespace.\n", o.namespace)
				return nil
			}
			return printLinks(cmd.OutOrStdout(), views, output == "wide", counters)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json or yaml")
	cmd.Flags().BoolVar(&counters, "counters", false, "add the kernel's packet, byte and drop counters of each end, read now from the pods' nodes")
	return cmd
}

// topologies is the named pod's Topology, or every Topology of the
// namespace when args is empty.
func (o *options) topologies(ctx context.Context, args []string) ([]v1beta1.Topology, error) {
	if len(args) == 1 {
		t, err := o.topology(ctx, args[0])
		if err != nil {
			return nil, err
		}
		return []v1beta1.Topology{*t}, nil
	}
	var list v1beta1.TopologyList
	if err := o.client.List(ctx, &list, client.InNamespace(o.namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// topology reads pod's Topology, saying which pod has none.
func (o *options) topology(ctx context.Context, pod string) (*v1beta1.Topology, error) {
	var t v1beta1.Topology
	if err := o.client.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: pod}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %q: no Topology %s in namespace %s (kubectl get topologies -n %s lists them)", pod, pod, o.namespace, o.namespace)
		}
		return nil, err
	}
	return &t, nil
}

// linkView is one link end: what the Topology asks for and what its status
// says the kernel has (nil until the link is wired).
type linkView struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Node is the pod's, as the status says.
	Node   string              `json:"node,omitempty"`
	Peer   string              `json:"peer"`
	Spec   v1beta1.Link        `json:"spec"`
	Status *v1beta1.LinkStatus `json:"status,omitempty"`
	// AsSpecified is true when the status leaves the link out because it
	// is up, with carrier, as specified: a Topology past 4,096 links lists
	// only the others.
	AsSpecified bool `json:"asSpecified,omitempty"`
	// Counters are the kernel's, read now (--counters); nil when not
	// asked for, or when the end is not in the kernel.
	Counters *counters `json:"counters,omitempty"`
}

// counters are an end's kernel counters.
type counters struct {
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
	RxBytes   uint64 `json:"rxBytes"`
	TxBytes   uint64 `json:"txBytes"`
	// Drops are the interface's drops, both ways, and its qdisc's (netem
	// loss among them).
	Drops uint64 `json:"drops"`
}

// linkList is the -o json and -o yaml form of links.
type linkList struct {
	Items []linkView `json:"items"`
}

func linkViews(topos []v1beta1.Topology) []linkView {
	var views []linkView
	for i := range topos {
		t := &topos[i]
		statuses := t.LinkStatuses()
		for _, l := range t.Spec.Links {
			views = append(views, linkView{
				Namespace: t.Namespace, Pod: t.Name, Node: t.Status.Node, Peer: peerOf(t, &l), Spec: l,
				Status: statuses.Of(l.UID), AsSpecified: statuses.AsSpecified(l.UID),
			})
		}
	}
	return views
}

// peerOf names a link's far end as the data API's graph does, with its
// interface: pod:intf, physical:device:intf or host:node:nic.
func peerOf(t *v1beta1.Topology, l *v1beta1.Link) string {
	if l.PeerPod == v1beta1.PeerHost {
		return topograph.PeerID(l, t.Status.Node) // the NIC is its name
	}
	return topograph.PeerID(l, t.Status.Node) + ":" + l.PeerIntf
}

func printLinks(w io.Writer, views []linkView, wide, withCounters bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := "POD\tINTERFACE\tPEER\tKIND\tSTATE\tCARRIER\tFAR-END\tMTU\tNETEM\tNODE"
	if withCounters {
		head += "\tRX-PACKETS\tTX-PACKETS\tRX-BYTES\tTX-BYTES\tDROPS"
	}
	if wide {
		head += "\tUID\tADDRESS\tWANTED\tBRIDGE\tFAULTS\tERROR"
	}
	fmt.Fprintln(tw, head)
	for _, v := range views {
		kind, state, carrier, far, mtu, netem, node, bridge, faults, lastErr := none, pending, none, none, none, none, none, none, none, none
		switch s := v.Status; {
		case s != nil:
			kind, state, carrier = or(string(s.Kind), none), or(string(s.State), pending), yesNo(s.Carrier)
			far = or(string(s.FarEnd), unknown)
			mtu, node = strconv.Itoa(int(s.MTU)), or(s.Node, none)
			netem, faults, lastErr = words(s.Netem), or(strings.Join(s.Faults, ","), none), or(s.LastError, none)
			bridge = or(s.Bridge, none)
		case v.AsSpecified:
			state, carrier = string(v1beta1.LinkUp), "yes"
			kind, far, mtu, netem, node = unlisted, unlisted, unlisted, unlisted, or(v.Node, unlisted)
		}
		row := []string{v.Pod, v.Spec.LocalIntf, v.Peer, kind, state, carrier, far, mtu, netem, node}
		if withCounters {
			if c := v.Counters; c != nil {
				row = append(row, fmtUint(c.RxPackets), fmtUint(c.TxPackets), fmtUint(c.RxBytes), fmtUint(c.TxBytes), fmtUint(c.Drops))
			} else {
				row = append(row, none, none, none, none, none)
			}
		}
		if wide {
			row = append(row, strconv.Itoa(v.Spec.UID), or(v.Spec.LocalIP, none), wanted(&v.Spec), bridge, faults, lastErr)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// wanted spells what the spec asks of a link beyond wiring it.
func wanted(l *v1beta1.Link) string {
	var w []string
	if l.State != nil {
		w = append(w, string(*l.State))
	}
	if l.MTU != nil {
		w = append(w, "mtu "+strconv.Itoa(int(*l.MTU)))
	}
	if l.Netem != nil {
		w = append(w, words(l.Netem))
	}
	return or(strings.Join(w, ", "), none)
}

// words spells a Topology's netem block in tc's words, <none> for none.
func words(n *v1beta1.Netem) string {
	s, _ := netemconv.FromTopology(n) // what the kernel reported: spelled even where a spec would be refused
	return or(netemconv.Words(s), none)
}

const (
	none    = "<none>"
	pending = "<pending>"
	// unlisted stands for what the status does not say of a link it
	// leaves out because it is up as specified.
	unlisted = "<unlisted>"
	// unknown is a far end whose node cannot be read now, or that is not a
	// pod's.
	unknown = "<unknown>"
)

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func fmtUint(n uint64) string { return strconv.FormatUint(n, 10) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// checkOutput refuses an -o the command does not have.
func checkOutput(output string, allowed ...string) error {
	if output == "" {
		return nil
	}
	for _, a := range allowed {
		if output == a {
			return nil
		}
	}
	return fmt.Errorf("--output %q: unknown format, want one of: %s", output, strings.Join(allowed, ", "))
}

func printStructured(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// addCounters reads the kernel's counters of the namespace's link ends, or
// of the one pod's in args, through meshnet's aggregated API, and adds them
// to views.
func (o *options) addCounters(ctx context.Context, views []linkView, args []string) error {
	api, err := o.aggregated(o.rest.Timeout)
	if err != nil {
		return err
	}
	req := api.Get().AbsPath(relayapi.LinksPath(o.namespace))
	if len(args) == 1 {
		req = req.Param(relayapi.PodParam, args[0])
	}
	data, err := do(ctx, req)
	if err != nil {
		return fmt.Errorf("counters: %w", err)
	}
	var resp meshnetv1.ListLinksResponse
	if err := protojson.Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("counters: read the aggregated API's answer: %w", err)
	}
	type end struct{ pod, intf string }
	read := make(map[end]*meshnetv1.LinkStatus, len(resp.GetLinks()))
	for _, l := range resp.GetLinks() {
		read[end{l.GetPod().GetName(), l.GetInterface()}] = l
	}
	for i := range views {
		l, ok := read[end{views[i].Pod, views[i].Spec.LocalIntf}]
		if !ok {
			continue
		}
		c := l.GetCounters()
		views[i].Counters = &counters{RxPackets: c.GetRxPackets(), TxPackets: c.GetTxPackets(), RxBytes: c.GetRxBytes(), TxBytes: c.GetTxBytes(),
			Drops: c.GetRxDrops() + c.GetTxDrops() + l.GetQdiscDrops()}
	}
	return nil
}
