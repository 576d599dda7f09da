package meshnetctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/topograph"
)

func newGraphCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "Show a namespace's topology: every link once, as text, DOT, Mermaid or draw.io",
		Long: `Show the namespace's topology: its pods, physical devices and host NICs,
and every link once with its kind, state, MTU and netem. The graph is the
one meshnetd's data API draws for Grafana, from the Topologies and Pods.`,
		Example: `  # The topology as a table
  kubectl meshnet graph -n lab

  # As a picture, with Graphviz
  kubectl meshnet graph -n lab -o dot | dot -Tsvg > lab.svg

  # For a README (Mermaid) or to edit in draw.io
  kubectl meshnet graph -n lab -o mermaid
  kubectl meshnet graph -n lab -o drawio > lab.drawio`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "dot", "mermaid", "drawio"); err != nil {
				return err
			}
			if err := o.connect(); err != nil {
				return err
			}
			g, err := o.graph(cmd.Context())
			if err != nil {
				return err
			}
			nodes, edges := topograph.Frames(g)
			switch output {
			case "dot":
				return printDOT(cmd.OutOrStdout(), g.Namespace, nodes, edges)
			case "mermaid":
				return printMermaid(cmd.OutOrStdout(), nodes, edges)
			case "drawio":
				return printDrawio(cmd.OutOrStdout(), g.Namespace, nodes, edges)
			}
			if len(edges) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "No links found in %s namespace.\n", o.namespace)
				return nil
			}
			return printGraph(cmd.OutOrStdout(), nodes, edges)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, dot, mermaid or drawio")
	return cmd
}

// graph reads what the namespace's graph is drawn from.
func (o *options) graph(ctx context.Context) (topograph.Graph, error) {
	g := topograph.Graph{Namespace: o.namespace, Pods: map[string]*corev1.Pod{}}
	var err error
	if g.Topologies, err = o.topologies(ctx, nil); err != nil {
		return g, err
	}
	var pods corev1.PodList
	if err := o.client.List(ctx, &pods, client.InNamespace(o.namespace)); err != nil {
		return g, err
	}
	for i := range pods.Items {
		g.Pods[pods.Items[i].Name] = &pods.Items[i]
	}
	return g, nil
}

func printGraph(w io.Writer, nodes []*meshnetv1.GraphNode, edges []*meshnetv1.GraphEdge) error {
	pods := 0
	for _, n := range nodes {
		if n.DetailKind == "pod" {
			pods++
		}
	}
	fmt.Fprintf(w, "%d pods, %d other ends, %d links\n\n", pods, len(nodes)-pods, len(edges))
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "LINK\tKIND\tSTATE\tMTU\tNETEM\tERROR")
	for _, e := range edges {
		mtu := none
		if e.DetailMtu > 0 {
			mtu = strconv.Itoa(int(e.DetailMtu))
		}
		fmt.Fprintf(tw, "%s:%s -- %s:%s\t%s\t%s\t%s\t%s\t%s\n", e.Source, e.DetailSourceInterface, e.Target, e.DetailTargetInterface,
			or(e.DetailKind, none), e.DetailState, mtu, or(e.DetailNetem, none), or(e.DetailError, none))
	}
	return tw.Flush()
}

// printDOT writes the graph in Graphviz's language: nodes in their data
// API colour, each link an edge labelled with its interfaces.
func printDOT(w io.Writer, namespace string, nodes []*meshnetv1.GraphNode, edges []*meshnetv1.GraphEdge) error {
	var b strings.Builder
	fmt.Fprintf(&b, "graph %s {\n", strconv.Quote(namespace))
	b.WriteString("  node [shape=box, style=rounded];\n")
	for _, n := range nodes {
		label := n.Title
		if n.Subtitle != "" {
			label += "\n" + n.Subtitle
		}
		fmt.Fprintf(&b, "  %s [label=%s, color=%s];\n", strconv.Quote(n.Id), strconv.Quote(label), strconv.Quote(n.Color))
	}
	for _, e := range edges {
		label := e.DetailKind
		if e.DetailNetem != "" {
			label += "\n" + e.DetailNetem
		}
		style := "solid"
		if e.DetailState != "up" {
			style = "dashed"
		}
		fmt.Fprintf(&b, "  %s -- %s [taillabel=%s, headlabel=%s, label=%s, color=%s, style=%s];\n",
			strconv.Quote(e.Source), strconv.Quote(e.Target), strconv.Quote(e.DetailSourceInterface),
			strconv.Quote(e.DetailTargetInterface), strconv.Quote(label), strconv.Quote(e.Color), style)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}
