package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/metrics"
)

// dashboard is the part of Grafana's dashboard model the tests read. Every
// key dashboard.json has is a field here; identifiers_test.go checks each key
// and identifier against the upstream sources, from raw (the same file
// decoded without a schema, so that a key is compared case and all).
type dashboard struct {
	Title         string   `json:"title"`
	UID           string   `json:"uid"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Editable      bool     `json:"editable"`
	GraphTooltip  int      `json:"graphTooltip"`
	SchemaVersion int      `json:"schemaVersion"`
	Version       int      `json:"version"`
	Refresh       string   `json:"refresh"`
	Time          struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`

	raw map[string]any
}

type variable struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	Description string `json:"description"`
	Type        string `json:"type"`
	Query       string `json:"query"`
	Hide        int    `json:"hide"`
	Current     struct {
		Text  string `json:"text"`
		Value string `json:"value"`
	} `json:"current"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	GridPos     struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	Datasource datasourceRef `json:"datasource"`
	Options    struct {
		Nodes struct {
			MainStatUnit      string `json:"mainStatUnit"`
			SecondaryStatUnit string `json:"secondaryStatUnit"`
			Arcs              []struct {
				Field string `json:"field"`
				Color string `json:"color"`
			} `json:"arcs"`
		} `json:"nodes"`
		Edges struct {
			MainStatUnit      string `json:"mainStatUnit"`
			SecondaryStatUnit string `json:"secondaryStatUnit"`
		} `json:"edges"`
	} `json:"options"`
	Targets     []target `json:"targets"`
	FieldConfig struct {
		Defaults  map[string]json.RawMessage `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

// target is an Infinity query (type, url, root_selector, columns) or a
// Prometheus one (expr).
type target struct {
	RefID      string        `json:"refId"`
	Datasource datasourceRef `json:"datasource"`
	Type       string        `json:"type"`
	Source     string        `json:"source"`
	Parser     string        `json:"parser"`
	Format     string        `json:"format"`
	URL        string        `json:"url"`
	URLOptions struct {
		Method string `json:"method"`
		Data   string `json:"data"`
	} `json:"url_options"`
	RootSelector string `json:"root_selector"`
	Columns      []struct {
		Selector string `json:"selector"`
		Text     string `json:"text"`
		Type     string `json:"type"`
	} `json:"columns"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// Datasource plugin ids, which a datasource reference's type, a datasource
// variable's query and a provisioned datasource's type name.
const (
	// grafana/grafana-infinity-datasource src/plugin.json: the plugin's
	// "id" is yesoreyeram-infinity-datasource (the name it kept from before
	// Grafana Labs took it over).
	infinityType = "yesoreyeram-infinity-datasource"
	// grafana/grafana public/app/plugins/datasource/prometheus/plugin.json:
	// the core datasource's "id" is prometheus.
	prometheusType = "prometheus"
)

func load(t testing.TB) dashboard {
	t.Helper()
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if err := json.Unmarshal(b, &d.raw); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// targets returns the dashboard's queries of a datasource type.
func (d dashboard) targets(dsType string) []target {
	var out []target
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			if t.Datasource.Type == dsType {
				out = append(out, t)
			}
		}
	}
	return out
}

func (d dashboard) panel(typ string) *panel {
	for i := range d.Panels {
		if d.Panels[i].Type == typ {
			return &d.Panels[i]
		}
	}
	return nil
}

// interpolate replaces the dashboard's variables as Grafana would.
func interpolate(s string, vars map[string]string) string {
	for k, v := range vars {
		s = strings.ReplaceAll(s, "${"+k+"}", v)
		s = strings.ReplaceAll(s, "$"+k, v)
	}
	return s
}

// jsonNames are the JSON column names of a frame row message.
func jsonNames(m proto.Message) []string {
	fields := m.ProtoReflect().Descriptor().Fields()
	var out []string
	for i := range fields.Len() {
		out = append(out, fields.Get(i).JSONName())
	}
	return out
}

func TestDashboardVariablesAndDatasources(t *testing.T) {
	d := load(t)
	if d.UID == "" {
		t.Error("dashboard has no uid")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type + ":" + v.Query
	}
	for name, want := range map[string]string{
		"infinity": "datasource:" + infinityType, "prometheus": "datasource:" + prometheusType, "namespace": "textbox:default",
	} {
		if vars[name] != want {
			t.Errorf("variable %s = %q, want %q", name, vars[name], want)
		}
	}
	for _, p := range d.Panels {
		refs := []datasourceRef{p.Datasource}
		for _, q := range p.Targets {
			refs = append(refs, q.Datasource)
		}
		for _, r := range refs {
			switch {
			case r.Type == infinityType && r.UID == "${infinity}":
			case r.Type == prometheusType && r.UID == "${prometheus}":
			default:
				t.Errorf("panel %q uses datasource %+v, want Infinity through ${infinity} or Prometheus through ${prometheus}", p.Title, r)
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
}

// TestNodeGraphPanel: Grafana's Node Graph takes the frame named edges (or
// with a source field) as edges and the other as nodes; Infinity names a
// frame after its query's refId.
func TestNodeGraphPanel(t *testing.T) {
	d := load(t)
	p := d.panel(nodeGraphPanel)
	if p == nil {
		t.Fatalf("no %s panel", nodeGraphPanel)
	}
	if len(p.Targets) != 2 {
		t.Fatalf("node graph has %d queries, want one nodes and one edges", len(p.Targets))
	}
	want := map[string]string{"nodes": "node-graph-nodes", "edges": "node-graph-edges"}
	for _, q := range p.Targets {
		if want[q.RefID] != q.Format {
			t.Errorf("query %s has format %s, want %s", q.RefID, q.Format, want[q.RefID])
		}
		if q.Type != "json" || q.Source != "url" || q.Parser != "backend" || q.URLOptions.Method != "GET" {
			t.Errorf("query %s: type %s source %s parser %s method %s, want a GET of JSON parsed by the backend", q.RefID, q.Type, q.Source, q.Parser, q.URLOptions.Method)
		}
		if q.URL != "/v1/namespaces/${namespace}/graph/"+q.RefID || q.RootSelector != q.RefID {
			t.Errorf("query %s: url %s root %s, want the %s endpoint and rows", q.RefID, q.URL, q.RootSelector, q.RefID)
		}
		delete(want, q.RefID)
	}
	if len(want) != 0 {
		t.Errorf("missing queries %v", want)
	}
	arcs := map[string]string{}
	for _, a := range p.Options.Nodes.Arcs {
		arcs[a.Field] = a.Color
	}
	if arcs["arc__up"] != "green" || arcs["arc__down"] != "red" || len(arcs) != 2 {
		t.Errorf("arc colours %v, want arc__up green and arc__down red (a red node has arc__down 1)", arcs)
	}
	for f := range arcs {
		if !slices.Contains(jsonNames(&meshnetv1.GraphNode{}), f) {
			t.Errorf("arc %s is not a column of the nodes frame", f)
		}
	}
}

func TestTableColumnsAreEdgeColumns(t *testing.T) {
	d := load(t)
	p := d.panel("table")
	if p == nil {
		t.Fatal("no table panel")
	}
	cols := jsonNames(&meshnetv1.GraphEdge{})
	for _, q := range p.Targets {
		if q.URL != "/v1/namespaces/${namespace}/graph/edges" || q.RootSelector != "edges" || q.Format != "table" {
			t.Errorf("table query %s: url %s root %s format %s", q.RefID, q.URL, q.RootSelector, q.Format)
		}
		for _, c := range q.Columns {
			if !slices.Contains(cols, c.Selector) {
				t.Errorf("table column %q selects %q, which the edges frame does not have", c.Text, c.Selector)
			}
		}
	}
}

var metricName = regexp.MustCompile(`\bmeshnet_[a-z0-9_]+`)
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// TestPromQLNamesMeshnetdMetrics: every metric the dashboard's PromQL names
// is one meshnetd's collectors export.
func TestPromQLNamesMeshnetdMetrics(t *testing.T) {
	exported := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		metrics.NewLinks(nil, nil, nil).Describe(ch)
		metrics.NewRPC().Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	queries := load(t).targets(prometheusType)
	if len(queries) == 0 {
		t.Fatal("no PromQL in the dashboard")
	}
	for _, q := range queries {
		names := metricName.FindAllString(q.Expr, -1)
		if len(names) == 0 {
			t.Errorf("query %s names no meshnet metric: %s", q.RefID, q.Expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("query %s uses %s, which meshnetd does not export", q.RefID, n)
			}
		}
		if !strings.Contains(q.Expr, `namespace="$namespace"`) {
			t.Errorf("query %s is not limited to the dashboard's namespace: %s", q.RefID, q.Expr)
		}
	}
}

// provisioning is Grafana's datasource provisioning file (apiVersion 1).
type provisioning struct {
	APIVersion  int `json:"apiVersion"`
	Datasources []struct {
		Name           string            `json:"name"`
		UID            string            `json:"uid"`
		Type           string            `json:"type"`
		Access         string            `json:"access"`
		URL            string            `json:"url"`
		JSONData       map[string]any    `json:"jsonData"`
		SecureJSONData map[string]string `json:"secureJsonData"`
	} `json:"datasources"`
}

// dashboardProvisioning is Grafana's dashboard provisioning file (apiVersion 1).
type dashboardProvisioning struct {
	APIVersion int `json:"apiVersion"`
	Providers  []struct {
		Name           string `json:"name"`
		Folder         string `json:"folder"`
		Type           string `json:"type"`
		AllowUIUpdates bool   `json:"allowUiUpdates"`
		Options        struct {
			Path string `json:"path"`
		} `json:"options"`
	} `json:"providers"`
}

// loadYAML reads a provisioning file into v, refusing keys v does not have,
// and returns the file decoded without a schema (for a check of its keys,
// case and all, which the decoding into v does not make).
func loadYAML(t testing.TB, path string, v any) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return raw
}

const (
	datasourcesFile = "provisioning/datasources/meshnet.yaml"
	dashboardsFile  = "provisioning/dashboards/meshnet.yaml"
)

func TestDatasourceProvisioning(t *testing.T) {
	var p provisioning
	loadYAML(t, datasourcesFile, &p)
	got := map[string]string{}
	for _, ds := range p.Datasources {
		got[ds.Type] = ds.UID
		if ds.Access != "proxy" || !strings.HasPrefix(ds.URL, "http") {
			t.Errorf("datasource %s: access %q url %q", ds.Name, ds.Access, ds.URL)
		}
		if ds.Type == "marcusolsson-json-datasource" {
			t.Errorf("datasource %s uses the retired JSON API datasource; use Infinity", ds.Name)
		}
	}
	current := map[string]string{}
	for _, v := range load(t).Templating.List {
		current[v.Query] = v.Current.Value
	}
	for _, typ := range []string{infinityType, prometheusType} {
		if got[typ] == "" || got[typ] != current[typ] {
			t.Errorf("%s datasource uid %q; the dashboard's variable defaults to %q", typ, got[typ], current[typ])
		}
	}
	if p.APIVersion != 1 {
		t.Errorf("apiVersion %d, want 1", p.APIVersion)
	}

	var dp dashboardProvisioning
	loadYAML(t, dashboardsFile, &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path == "" {
		t.Errorf("dashboard providers = %+v", dp.Providers)
	}
}

// Grafana finds a panel's plugin by its id, case and all: a panel whose
// type is no plugin's id does not load. The ids, from grafana/grafana:
const (
	// public/app/plugins/panel/nodeGraph/plugin.json: "id": "nodeGraph"
	// (not "nodegraph", which grafana-foundation-sdk writes and Grafana
	// refuses).
	nodeGraphPanel = "nodeGraph"
	// public/app/plugins/panel/table/plugin.json: "id": "table"
	tablePanel = "table"
	// public/app/plugins/panel/timeseries/plugin.json: "id": "timeseries"
	timeSeriesPanel = "timeseries"
)

// TestPanelTypesArePluginIDs fails on a panel type that is no built-in
// panel plugin's id, such as the lower-case "nodegraph".
func TestPanelTypesArePluginIDs(t *testing.T) {
	ids := map[string]bool{nodeGraphPanel: true, tablePanel: true, timeSeriesPanel: true}
	for _, p := range load(t).Panels {
		if !ids[p.Type] {
			t.Errorf("panel %q has type %q, which is no Grafana panel plugin's id (want one of %s, %s, %s)",
				p.Title, p.Type, nodeGraphPanel, tablePanel, timeSeriesPanel)
		}
	}
}
