package meshnetctl

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// The graph as Mermaid and draw.io draw it, for a README or a slide: the
// same nodes and edges as -o dot, each link an edge labelled with its
// interfaces and kind, one that is not up dashed.

// edgeLabel is what an edge says: its ends' interfaces, its kind, and
// its netem.
func edgeLabel(e *meshnetv1.GraphEdge, sep string) string {
	label := e.DetailSourceInterface + " – " + e.DetailTargetInterface
	if e.DetailKind != "" {
		label += sep + e.DetailKind
	}
	if e.DetailNetem != "" {
		label += sep + e.DetailNetem
	}
	return label
}

// printMermaid writes a Mermaid flowchart: nodes n0, n1 ... (Mermaid's ids
// take no punctuation) labelled with the pod and its node, each link an
// edge, dashed when it is not up.
func printMermaid(w io.Writer, nodes []*meshnetv1.GraphNode, edges []*meshnetv1.GraphEdge) error {
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	ids := map[string]string{}
	for i, n := range nodes {
		ids[n.Id] = "n" + strconv.Itoa(i)
		label := n.Title
		if n.Subtitle != "" {
			label += "<br/>" + n.Subtitle
		}
		fmt.Fprintf(&b, "  %s[\"%s\"]\n", ids[n.Id], mermaidText(label))
	}
	var dashed []string
	for i, e := range edges {
		line := "---"
		if e.DetailState != "up" {
			line = "-.-"
			dashed = append(dashed, strconv.Itoa(i))
		}
		fmt.Fprintf(&b, "  %s %s|\"%s\"| %s\n", ids[e.Source], line, mermaidText(edgeLabel(e, "<br/>")), ids[e.Target])
	}
	if len(dashed) > 0 {
		fmt.Fprintf(&b, "  linkStyle %s stroke:red\n", strings.Join(dashed, ","))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidText escapes what would end a quoted Mermaid label.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;").Replace(s)
}

// drawio is a draw.io (diagrams.net) file: one page, its cells.
type drawio struct {
	XMLName xml.Name `xml:"mxfile"`
	Host    string   `xml:"host,attr"`
	Diagram struct {
		Name  string `xml:"name,attr"`
		Model struct {
			Cells []mxCell `xml:"root>mxCell"`
		} `xml:"mxGraphModel"`
	} `xml:"diagram"`
}

type mxCell struct {
	ID       string      `xml:"id,attr"`
	Value    string      `xml:"value,attr,omitempty"`
	Style    string      `xml:"style,attr,omitempty"`
	Vertex   string      `xml:"vertex,attr,omitempty"`
	Edge     string      `xml:"edge,attr,omitempty"`
	Parent   string      `xml:"parent,attr,omitempty"`
	Source   string      `xml:"source,attr,omitempty"`
	Target   string      `xml:"target,attr,omitempty"`
	Geometry *mxGeometry `xml:"mxGeometry,omitempty"`
}

type mxGeometry struct {
	X        int    `xml:"x,attr,omitempty"`
	Y        int    `xml:"y,attr,omitempty"`
	Width    int    `xml:"width,attr,omitempty"`
	Height   int    `xml:"height,attr,omitempty"`
	Relative string `xml:"relative,attr,omitempty"`
	As       string `xml:"as,attr"`
}

// drawioColors are the data API's colours as draw.io's styles take them.
var drawioColors = map[string]string{"green": "#2e7d32", "red": "#c62828", "gray": "#757575"}

// printDrawio writes a draw.io file: the nodes on a circle (Arrange >
// Layout in draw.io lays them out otherwise), each link an edge between
// them labelled with its interfaces and kind, dashed when it is not up.
func printDrawio(w io.Writer, namespace string, nodes []*meshnetv1.GraphNode, edges []*meshnetv1.GraphEdge) error {
	var f drawio
	f.Host = "kubectl-meshnet"
	f.Diagram.Name = namespace
	cells := []mxCell{{ID: "0"}, {ID: "1", Parent: "0"}}
	const width, height = 140, 50
	radius := max(200, float64(len(nodes))*(width+40)/(2*math.Pi))
	for i, n := range nodes {
		angle := 2 * math.Pi * float64(i) / float64(max(len(nodes), 1))
		label := n.Title
		if n.Subtitle != "" {
			label += "\n" + n.Subtitle
		}
		cells = append(cells, mxCell{
			ID: "n" + strconv.Itoa(i), Value: label, Vertex: "1", Parent: "1",
			Style:    "rounded=1;whiteSpace=wrap;strokeWidth=2;strokeColor=" + drawioColors[n.Color] + ";",
			Geometry: &mxGeometry{X: int(radius + radius*math.Cos(angle)), Y: int(radius + radius*math.Sin(angle)), Width: width, Height: height, As: "geometry"},
		})
	}
	index := map[string]string{}
	for i, n := range nodes {
		index[n.Id] = "n" + strconv.Itoa(i)
	}
	for i, e := range edges {
		style := "endArrow=none;html=0;strokeColor=" + drawioColors[e.Color] + ";"
		if e.DetailState != "up" {
			style += "dashed=1;"
		}
		cells = append(cells, mxCell{
			ID: "e" + strconv.Itoa(i), Value: edgeLabel(e, "\n"), Edge: "1", Parent: "1",
			Source: index[e.Source], Target: index[e.Target], Style: style,
			Geometry: &mxGeometry{Relative: "1", As: "geometry"},
		})
	}
	f.Diagram.Model.Cells = cells
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(f); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
