package grafana

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// Every key and identifier dashboard.json and provisioning/ use, audited
// against the source of Grafana (grafana/grafana) and of the Infinity
// datasource (grafana/grafana-infinity-datasource). Grafana matches all of
// them case and all, and ignores a key it does not know without a word: a
// misspelt option is a dashboard that loads and silently does less. The
// tests below fail on a key or identifier that is not in these audited sets;
// to use a new one, find where upstream defines it and add it here with that
// place.

// Dashboard keys: grafana/grafana kinds/dashboard/dashboard_kind.cue (the
// dashboard schema, generated to
// packages/grafana-schema/src/raw/dashboard/x/dashboard_types.gen.ts).
const (
	// The dashboard's own fields: title, uid, description, tags, editable,
	// graphTooltip (#DashboardCursorSync), time with from and to,
	// refresh (an interval string), schemaVersion, version, templating with
	// its list, panels.
	keyTitle         = "title"
	keyUID           = "uid"
	keyDescription   = "description"
	keyTags          = "tags"
	keyEditable      = "editable"
	keyGraphTooltip  = "graphTooltip"
	keyTime          = "time"
	keyFrom          = "from"
	keyTo            = "to"
	keyRefresh       = "refresh"
	keySchemaVersion = "schemaVersion"
	keyVersion       = "version"
	keyTemplating    = "templating"
	keyList          = "list"
	keyPanels        = "panels"

	// #Panel: type (the panel plugin id), id, title, description,
	// datasource (type and uid), gridPos (#GridPos: h, w, x, y), targets,
	// options (the panel plugin's), fieldConfig (#FieldConfigSource:
	// defaults, and overrides of a matcher (#MatcherConfig: id, options)
	// and properties (#DynamicConfigValue: id, value)).
	keyType        = "type"
	keyID          = "id"
	keyDatasource  = "datasource"
	keyGridPos     = "gridPos"
	keyTargets     = "targets"
	keyOptions     = "options"
	keyFieldConfig = "fieldConfig"
	keyDefaults    = "defaults"
	keyOverrides   = "overrides"
	keyMatcher     = "matcher"
	keyProperties  = "properties"
	keyValue       = "value"

	// #VariableModel: type (#VariableType), name, label, description,
	// query, hide (#VariableHide). current (text and value) is the
	// variable's selected option: packages/grafana-data/src/types/
	// templateVars.ts, VariableWithOptions has current, a VariableOption of
	// text and value.
	keyName    = "name"
	keyLabel   = "label"
	keyQuery   = "query"
	keyHide    = "hide"
	keyCurrent = "current"
	keyText    = "text"

	// DataQuery, which every query extends:
	// packages/grafana-schema/src/common/dataquery_gen.cue has refId and
	// datasource (a DataSourceRef of type and uid).
	keyRefID = "refId"
)

// Dashboard enumerations: grafana/grafana kinds/dashboard/dashboard_kind.cue.
const (
	// #DashboardCursorSync is 0 (off), 1 (crosshair), 2 (crosshair and
	// tooltip); the dashboard shares the crosshair.
	cursorSyncCrosshair = 1
	// #VariableHide is 0 (dontHide), 1 (hideLabel), 2 (hideVariable).
	variableDontHide = 0
	// #VariableType lists query, adhoc, constant, datasource, interval,
	// textbox, custom, system: a datasource picker and a free text box.
	variableDatasource = "datasource"
	variableTextbox    = "textbox"
)

// Node Graph panel options: grafana/grafana
// public/app/plugins/panel/nodeGraph/module.tsx (nested option groups
// "nodes" with unit pickers mainStatUnit and secondaryStatUnit and the custom
// editor "arcs", and "edges" with the two unit pickers) and panelcfg.cue
// (NodeOptions, EdgeOptions, ArcOption of field and color). utils.ts
// applyOptionsToFrames sets the units on the mainstat and secondarystat
// fields and each arc's colour as the fixed colour of the field it names.
const (
	nodesMainStatUnit      = "nodes.mainStatUnit"
	nodesSecondaryStatUnit = "nodes.secondaryStatUnit"
	nodesArcField          = "nodes.arcs[].field"
	nodesArcColor          = "nodes.arcs[].color"
	edgesMainStatUnit      = "edges.mainStatUnit"
	edgesSecondaryStatUnit = "edges.secondaryStatUnit"
)

// Field config: the standard properties are FieldConfigProperty in
// grafana/grafana packages/grafana-data/src/types/fieldOverrides.ts (unit,
// min, max, decimals, mappings, ...); a panel's own ones are registered by its
// module and get the "custom." prefix in
// packages/grafana-data/src/panel/registryFactories.ts. An override
// property's id and a key of fieldConfig.defaults are the same name.
const (
	propUnit     = "unit"
	propMin      = "min"
	propMax      = "max"
	propDecimals = "decimals"
	propMappings = "mappings"
	// public/app/plugins/panel/table/module.tsx: the custom editor with
	// path cellOptions (the cell type).
	propTableCellOptions = "custom.cellOptions"
	// public/app/plugins/panel/timeseries/config.ts: the radio with path
	// lineInterpolation.
	propLineInterpolation = "custom.lineInterpolation"
)

// Field config values.
const (
	// packages/grafana-data/src/transformations/matchers/ids.ts:
	// FieldMatcherID has byName (options: a field's display name) and
	// byRegexp (options: a regular expression).
	matcherByName   = "byName"
	matcherByRegexp = "byRegexp"
	// packages/grafana-schema/src/common/table.cue: TableCellDisplayMode
	// color-background, the "type" of TableColoredBackgroundCellOptions.
	cellColorBackground = "color-background"
	keyCellType         = "type"
	// kinds/dashboard/dashboard_kind.cue: #MappingType "value" is a
	// #ValueMap, whose options map a value to a #ValueMappingResult of
	// text, color, icon, index.
	mappingValue = "value"
	keyColor     = "color"
	keyIcon      = "icon"
	keyIndex     = "index"
	// packages/grafana-schema/src/common/mudball.cue: LineInterpolation
	// is linear, smooth, stepBefore or stepAfter.
	lineStepAfter = "stepAfter"
)

// Units: grafana/grafana packages/grafana-data/src/valueFormats/categories.ts
// registers each unit id with its formatter.
const (
	unitDecBytes = "decbytes" // "Data (metric)": bytes(Metric), SI prefixes
	unitBps      = "bps"      // "Data rate": bits/sec
	unitPps      = "pps"      // "Data rate": packets/sec
	unitMs       = "ms"       // "Time": milliseconds
)

// Custom units: packages/grafana-data/src/valueFormats/valueFormats.ts
// getValueFormat formats an id that no category registers and that has no
// "prefix:"-style key before a colon with toFixedUnit(id): the value, a space,
// the id. The Node Graph's statToString (public/app/plugins/panel/nodeGraph/
// utils.ts) appends the unit the same way. So each of these is shown as
// written after the number.
var customUnits = []string{"up", "links", "% loss"}

// Colours: grafana/grafana packages/grafana-data/src/themes/
// createVisualizationColors.ts. getColorByName looks a name up in the hues
// (red, orange, yellow, green, blue, purple and their shades) and then in
// nativeColorNames (the CSS colour names, gray among them).
const (
	colorGreen = "green" // a hue
	colorRed   = "red"   // a hue
	colorGray  = "gray"  // nativeColorNames: #808080
)

// Node Graph frames: grafana/grafana packages/grafana-data/src/utils/
// nodeGraph.ts NodeGraphDataFrameFieldNames. public/app/plugins/panel/
// nodeGraph/utils.ts getNodeFields and getEdgeFields lower-case every field
// name before looking these up, and findFieldsByPrefix picks arc__ and
// detail__ fields by prefix.
var (
	nodeGraphNodeFields = []string{"id", "title", "subtitle", "mainstat", "secondarystat", "color", "icon", "noderadius", "highlighted"}
	nodeGraphEdgeFields = []string{"id", "source", "target", "mainstat", "secondarystat", "color", "thickness", "highlighted", "strokedasharray"}
)

const (
	nodeGraphArcPrefix    = "arc__"
	nodeGraphDetailPrefix = "detail__"
	// utils.ts getNodeGraphDataFrames takes a frame named, or of refId,
	// nodes or edges; getGraphFrame takes the one named edges (or with a
	// source field) as edges. Infinity names a frame after its query's refId
	// (grafana/grafana-infinity-datasource pkg/infinity/jsonBackend.go:
	// FrameName is query.RefID).
	nodesFrame = "nodes"
	edgesFrame = "edges"
)

// Infinity queries: grafana/grafana-infinity-datasource pkg/models/query.go,
// the json tags of Query (refId, type, source, parser, format, url,
// url_options, root_selector, columns), URLOptions (method, data: the body)
// and InfinityColumn (selector, text, type).
const (
	infKeyType         = "type"
	infKeySource       = "source"
	infKeyParser       = "parser"
	infKeyFormat       = "format"
	infKeyURL          = "url"
	infKeyURLOptions   = "url_options"
	infKeyMethod       = "method"
	infKeyData         = "data"
	infKeyRootSelector = "root_selector"
	infKeyColumns      = "columns"
	infKeySelector     = "selector"
	infKeyText         = "text"
)

// Infinity query values.
const (
	// pkg/models/query.go QueryTypeJSON; src/types/query.types.ts
	// InfinityQueryType.
	infTypeJSON = "json"
	// src/types/query.types.ts InfinityQuerySources ('url' | 'inline' | ...).
	infSourceURL = "url"
	// pkg/models/query.go InfinityParserBackend; InfinityParserType.
	infParserBackend = "backend"
	// src/types/query.types.ts InfinityQueryFormat, listed in
	// src/constants.ts INFINITY_RESULT_FORMATS as "Table", "Nodes - Node
	// Graph" and "Edges - Node Graph".
	infFormatTable = "table"
	infFormatNodes = "node-graph-nodes"
	infFormatEdges = "node-graph-edges"
	// src/types/query.types.ts InfinityURLMethod.
	infMethodGET = "GET"
	// src/types/query.types.ts InfinityColumnFormat (string, number,
	// timestamp, ..., boolean).
	infColumnString = "string"
	infColumnNumber = "number"
)

// Prometheus queries: grafana/grafana packages/grafana-prometheus/src/
// dataquery.ts, the Prometheus query: expr (the PromQL) and legendFormat (the
// series name template).
const (
	promKeyExpr         = "expr"
	promKeyLegendFormat = "legendFormat"
)

// Datasource provisioning: grafana/grafana pkg/services/provisioning/
// datasources/types.go, the yaml tags of configVersion (apiVersion),
// configsV1 (datasources) and upsertDataSourceFromConfigV1 (name, uid, type,
// access, url, jsonData).
const (
	provKeyAPIVersion  = "apiVersion"
	provKeyDatasources = "datasources"
	provKeyName        = "name"
	provKeyUID         = "uid"
	provKeyType        = "type"
	provKeyAccess      = "access"
	provKeyURL         = "url"
	provKeyJSONData    = "jsonData"
	// secureJsonData: Grafana keeps it encrypted, never shown to viewers.
	provKeySecureJSONData = "secureJsonData"
	// pkg/services/datasources/models.go: DS_ACCESS_PROXY is "proxy"
	// (Grafana's server makes the requests).
	accessProxy = "proxy"
	// pkg/services/provisioning/datasources/config_reader.go
	// parseDatasourceConfig reads a file whose apiVersion is above 0 with
	// configsV1 (these camelCase keys); without it, with configsV0, whose
	// keys are snake_case (json_data), and jsonData would be dropped.
	provAPIVersion = 1
)

// jsonData keys of each datasource type.
const (
	// grafana/grafana-infinity-datasource pkg/models/settings.go,
	// InfinitySettingsJson: timeoutInSeconds (request timeout, default 60)
	// and allowedHosts (URL prefixes a query may reach). LoadSettings takes
	// the datasource's URL as the base URL; pkg/infinity/request.go
	// GetQueryURL prefixes a query's URL with it, and
	// DoesAllowedHostsRequired needs no allowed hosts when that URL is set.
	infJSONTimeout      = "timeoutInSeconds"
	infJSONAllowedHosts = "allowedHosts"
	// InfinitySettingsJson's auth_method ("bearerToken": an Authorization
	// header with the secure bearerToken, InfinitySecureSettings).
	infJSONAuthMethod    = "auth_method"
	infAuthBearerToken   = "bearerToken"
	infSecureBearerToken = "bearerToken"
	// grafana/grafana packages/grafana-prometheus/src/types.ts PromOptions:
	// timeInterval, the scrape interval (the floor of $__rate_interval).
	promJSONTimeInterval = "timeInterval"
)

// Dashboard provisioning: grafana/grafana pkg/services/provisioning/
// dashboards/types.go, the yaml tags of configV1 (providers) and configs
// (name, folder, type, allowUiUpdates, options).
const (
	provKeyProviders      = "providers"
	provKeyOptions        = "options"
	provKeyFolder         = "folder"
	provKeyAllowUIUpdates = "allowUiUpdates"
	// pkg/services/provisioning/dashboards/file_reader.go
	// NewDashboardFileReader reads the directory from options "path".
	provKeyPath = "path"
	// pkg/services/provisioning/dashboards/dashboard.go getFileReaders:
	// "file" is the one provider type; any other fails provisioning.
	providerFile = "file"
)

// join makes the dotted path of nested keys, "[]" standing for any element of
// an array.
func join(keys ...string) string {
	return strings.Join(keys, ".")
}

// keyPaths lists the dotted paths of the leaves of v ("a.b[].c"), and of its
// empty objects and arrays, below prefix.
func keyPaths(v any, prefix string) []string {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 && prefix != "" {
			return []string{prefix}
		}
		var out []string
		for k, e := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, keyPaths(e, p)...)
		}
		return out
	case []any:
		if len(v) == 0 {
			return []string{prefix}
		}
		var out []string
		for _, e := range v {
			out = append(out, keyPaths(e, prefix+"[]")...)
		}
		return out
	default:
		return []string{prefix}
	}
}

// reporter is the part of testing.TB the checks use, so that a test can
// check the checks.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder is a reporter that keeps what it is told.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// checkPaths reports each key path of v that is not an audited one.
func checkPaths(t reporter, where string, v any, audited ...string) {
	t.Helper()
	paths := keyPaths(v, "")
	sort.Strings(paths)
	for _, p := range slices.Compact(paths) {
		if p != "" && !slices.Contains(audited, p) {
			t.Errorf("%s: key %q is not an audited one (audited: %s)", where, p, strings.Join(audited, ", "))
		}
	}
}

// checkKeys reports each key of the object v that is not an audited one.
func checkKeys(t reporter, where string, v any, audited ...string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: %T, want an object", where, v)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(audited, k) {
			t.Errorf("%s: key %q is not an audited one (audited: %s)", where, k, strings.Join(audited, ", "))
		}
	}
}

func rawList(v any) []any {
	l, _ := v.([]any)
	return l
}

func rawObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// panelOptions are the audited option paths of each panel type.
var panelOptions = map[string][]string{
	nodeGraphPanel:  {nodesMainStatUnit, nodesSecondaryStatUnit, nodesArcField, nodesArcColor, edgesMainStatUnit, edgesSecondaryStatUnit},
	tablePanel:      nil,
	timeSeriesPanel: nil,
}

// fieldProperties are the audited field config properties (keys of
// fieldConfig.defaults, ids of override properties) of each panel type. The
// Node Graph takes its units from its options and its colours from its
// frames; none is audited for it.
var fieldProperties = map[string][]string{
	nodeGraphPanel:  nil,
	tablePanel:      {propUnit, propMin, propMax, propDecimals, propMappings, propTableCellOptions},
	timeSeriesPanel: {propUnit, propMin, propMax, propDecimals, propMappings, propLineInterpolation},
}

// targetKeys are the audited key paths of a query of each datasource type.
var targetKeys = map[string][]string{
	infinityType: {
		keyRefID, join(keyDatasource, keyType), join(keyDatasource, keyUID),
		infKeyType, infKeySource, infKeyParser, infKeyFormat, infKeyURL,
		join(infKeyURLOptions, infKeyMethod), join(infKeyURLOptions, infKeyData),
		infKeyRootSelector, infKeyColumns,
		infKeyColumns + "[]." + infKeySelector, infKeyColumns + "[]." + infKeyText, infKeyColumns + "[]." + infKeyType,
	},
	prometheusType: {
		keyRefID, join(keyDatasource, keyType), join(keyDatasource, keyUID),
		promKeyExpr, promKeyLegendFormat,
	},
}

// TestDashboardKeysAreAudited: every key of dashboard.json, at every level,
// is one the audited upstream sources define where it stands.
func TestDashboardKeysAreAudited(t *testing.T) {
	d := load(t)
	checkKeys(t, "dashboard", d.raw, keyTitle, keyUID, keyDescription, keyTags, keyEditable, keyGraphTooltip,
		keyTime, keyRefresh, keySchemaVersion, keyVersion, keyTemplating, keyPanels)
	checkPaths(t, "dashboard time", d.raw[keyTime], keyFrom, keyTo)
	checkKeys(t, "templating", d.raw[keyTemplating], keyList)
	for i, v := range rawList(rawObject(d.raw[keyTemplating])[keyList]) {
		checkPaths(t, fmt.Sprintf("variable %d", i), v, keyName, keyLabel, keyDescription, keyType, keyQuery, keyHide,
			join(keyCurrent, keyText), join(keyCurrent, keyValue))
	}
	for i, rp := range rawList(d.raw[keyPanels]) {
		p := d.Panels[i]
		where := fmt.Sprintf("panel %q", p.Title)
		raw := rawObject(rp)
		checkKeys(t, where, raw, keyID, keyType, keyTitle, keyDescription, keyGridPos, keyDatasource,
			keyOptions, keyTargets, keyFieldConfig)
		checkPaths(t, where+" gridPos", raw[keyGridPos], "h", "w", "x", "y")
		checkPaths(t, where+" datasource", raw[keyDatasource], keyType, keyUID)
		opts, ok := panelOptions[p.Type]
		if !ok {
			t.Errorf("%s: no audited options for panel type %q", where, p.Type)
		}
		checkPaths(t, where+" options", raw[keyOptions], opts...)

		if fc, ok := raw[keyFieldConfig]; ok {
			checkKeys(t, where+" fieldConfig", fc, keyDefaults, keyOverrides)
			for _, id := range defaultsProperties(rawObject(fc)[keyDefaults]) {
				if !slices.Contains(fieldProperties[p.Type], id) {
					t.Errorf("%s: fieldConfig.defaults has %q, which is no audited field config property of a %s panel", where, id, p.Type)
				}
			}
			for j, o := range rawList(rawObject(fc)[keyOverrides]) {
				ow := fmt.Sprintf("%s override %d", where, j)
				checkKeys(t, ow, o, keyMatcher, keyProperties)
				checkKeys(t, ow+" matcher", rawObject(o)[keyMatcher], keyID, keyOptions)
				for _, prop := range rawList(rawObject(o)[keyProperties]) {
					checkKeys(t, ow+" property", prop, keyID, keyValue)
				}
			}
		}
		for j, q := range rawList(raw[keyTargets]) {
			checkPaths(t, fmt.Sprintf("%s query %d", where, j), q, targetKeys[p.Datasource.Type]...)
		}
	}
}

// defaultsProperties names the properties of fieldConfig.defaults as an
// override would: "custom.x" for x under custom.
func defaultsProperties(v any) []string {
	var out []string
	for k, e := range rawObject(v) {
		if k != "custom" {
			out = append(out, k)
			continue
		}
		for c := range rawObject(e) {
			out = append(out, "custom."+c)
		}
	}
	sort.Strings(out)
	return out
}

// checkUnit reports a unit that is neither a registered unit id nor an
// audited custom one.
func checkUnit(t reporter, where, unit string) {
	t.Helper()
	if !slices.Contains([]string{unitDecBytes, unitBps, unitPps, unitMs}, unit) && !slices.Contains(customUnits, unit) {
		t.Errorf("%s: unit %q is no audited unit id or custom unit", where, unit)
	}
}

func checkColor(t reporter, where, color string) {
	t.Helper()
	if !slices.Contains([]string{colorGreen, colorRed, colorGray}, color) {
		t.Errorf("%s: colour %q is no audited colour name", where, color)
	}
}

// checkProperty checks the value of a field config property.
func checkProperty(t reporter, where, id string, value json.RawMessage) {
	t.Helper()
	switch id {
	case propUnit:
		var u string
		if err := json.Unmarshal(value, &u); err != nil {
			t.Errorf("%s: unit %s: %v", where, value, err)
		}
		checkUnit(t, where, u)
	case propTableCellOptions:
		var c map[string]any
		if err := json.Unmarshal(value, &c); err != nil {
			t.Errorf("%s: cell options %s: %v", where, value, err)
		}
		checkKeys(t, where+" cellOptions", c, keyCellType)
		if c[keyCellType] != cellColorBackground {
			t.Errorf("%s: cell type %v, want %s", where, c[keyCellType], cellColorBackground)
		}
	case propMappings:
		var ms []struct {
			Type    string                    `json:"type"`
			Options map[string]map[string]any `json:"options"`
		}
		if err := json.Unmarshal(value, &ms); err != nil {
			t.Errorf("%s: mappings %s: %v", where, value, err)
		}
		var raw []map[string]any
		_ = json.Unmarshal(value, &raw)
		for _, r := range raw {
			checkKeys(t, where+" mapping", r, keyType, keyOptions)
		}
		for _, m := range ms {
			if m.Type != mappingValue {
				t.Errorf("%s: mapping type %q is no audited one (want %s)", where, m.Type, mappingValue)
			}
			for v, result := range m.Options {
				checkKeys(t, fmt.Sprintf("%s mapping of %q", where, v), result, keyText, keyColor, keyIcon, keyIndex)
				if c, ok := result[keyColor].(string); ok {
					checkColor(t, fmt.Sprintf("%s mapping of %q", where, v), c)
				}
			}
		}
	case propLineInterpolation:
		var l string
		if err := json.Unmarshal(value, &l); err != nil || l != lineStepAfter {
			t.Errorf("%s: line interpolation %s, want %s", where, value, lineStepAfter)
		}
	case propMin, propMax, propDecimals:
		var n float64
		if err := json.Unmarshal(value, &n); err != nil {
			t.Errorf("%s: %s %s is not a number", where, id, value)
		}
	}
}

// TestDashboardIdentifiersAreAudited: every identifier dashboard.json uses
// as a value (variable, datasource, matcher, property, cell, mapping and
// Infinity query types, units, colours) is an audited one.
func TestDashboardIdentifiersAreAudited(t *testing.T) {
	d := load(t)
	if d.GraphTooltip != cursorSyncCrosshair {
		t.Errorf("graphTooltip %d, want %d (shared crosshair)", d.GraphTooltip, cursorSyncCrosshair)
	}
	for _, v := range d.Templating.List {
		if v.Hide != variableDontHide {
			t.Errorf("variable %s: hide %d, want %d (shown)", v.Name, v.Hide, variableDontHide)
		}
		switch v.Type {
		case variableDatasource:
			// A datasource variable's query is the plugin id it lists
			// (public/app/features/dashboard-scene/serialization/
			// sceneVariablesSetToVariables.ts writes pluginId there).
			if v.Query != infinityType && v.Query != prometheusType {
				t.Errorf("variable %s lists datasources of type %q, no audited plugin id", v.Name, v.Query)
			}
		case variableTextbox:
		default:
			t.Errorf("variable %s: type %q is no audited variable type", v.Name, v.Type)
		}
	}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %q", p.Title)
		if p.Type == nodeGraphPanel {
			o := p.Options
			for _, u := range []string{o.Nodes.MainStatUnit, o.Nodes.SecondaryStatUnit, o.Edges.MainStatUnit, o.Edges.SecondaryStatUnit} {
				checkUnit(t, where+" options", u)
			}
			for _, a := range o.Nodes.Arcs {
				checkColor(t, where+" arc "+a.Field, a.Color)
				if !strings.HasPrefix(a.Field, nodeGraphArcPrefix) {
					t.Errorf("%s: arc field %q lacks the %s prefix, so the Node Graph does not draw it as an arc", where, a.Field, nodeGraphArcPrefix)
				}
			}
		}
		for _, id := range slices.Sorted(maps.Keys(p.FieldConfig.Defaults)) {
			if id == "custom" {
				var custom map[string]json.RawMessage
				if err := json.Unmarshal(p.FieldConfig.Defaults[id], &custom); err != nil {
					t.Errorf("%s: fieldConfig.defaults.custom: %v", where, err)
				}
				for c, v := range custom {
					checkProperty(t, where+" defaults", "custom."+c, v)
				}
				continue
			}
			checkProperty(t, where+" defaults", id, p.FieldConfig.Defaults[id])
		}
		for _, o := range p.FieldConfig.Overrides {
			ow := fmt.Sprintf("%s override %s %q", where, o.Matcher.ID, o.Matcher.Options)
			switch o.Matcher.ID {
			case matcherByName:
			case matcherByRegexp:
			default:
				t.Errorf("%s: matcher %q is no audited field matcher", ow, o.Matcher.ID)
			}
			for _, prop := range o.Properties {
				if !slices.Contains(fieldProperties[p.Type], prop.ID) {
					t.Errorf("%s: property %q is no audited field config property of a %s panel", ow, prop.ID, p.Type)
				}
				checkProperty(t, ow, prop.ID, prop.Value)
			}
		}
		for _, q := range p.Targets {
			qw := fmt.Sprintf("%s query %s", where, q.RefID)
			if q.Datasource.Type != infinityType {
				continue
			}
			if q.Type != infTypeJSON || q.Source != infSourceURL || q.Parser != infParserBackend || q.URLOptions.Method != infMethodGET {
				t.Errorf("%s: type %q source %q parser %q method %q, want the audited %s, %s, %s, %s",
					qw, q.Type, q.Source, q.Parser, q.URLOptions.Method, infTypeJSON, infSourceURL, infParserBackend, infMethodGET)
			}
			if !slices.Contains([]string{infFormatTable, infFormatNodes, infFormatEdges}, q.Format) {
				t.Errorf("%s: format %q is no audited Infinity format", qw, q.Format)
			}
			for _, c := range q.Columns {
				if c.Type != infColumnString && c.Type != infColumnNumber {
					t.Errorf("%s: column %q has type %q, no audited Infinity column type", qw, c.Text, c.Type)
				}
			}
		}
	}
}

// TestNodeGraphFrameFields: the queries of the Node Graph are named as the
// frames it takes, and every column meshnetd serves in them is a field the
// Node Graph reads (case aside, as it lower-cases the names), so that none
// is silently ignored.
func TestNodeGraphFrameFields(t *testing.T) {
	p := load(t).panel(nodeGraphPanel)
	if p == nil {
		t.Fatalf("no %s panel", nodeGraphPanel)
	}
	refs := map[string]string{}
	for _, q := range p.Targets {
		refs[q.Format] = q.RefID
	}
	if refs[infFormatNodes] != nodesFrame || refs[infFormatEdges] != edgesFrame {
		t.Errorf("node graph queries %v, want the nodes query named %s and the edges one %s", refs, nodesFrame, edgesFrame)
	}
	for _, c := range []struct {
		frame    string
		row      proto.Message
		fields   []string
		required []string
	}{
		{nodesFrame, &meshnetv1.GraphNode{}, nodeGraphNodeFields, []string{"id"}},
		{edgesFrame, &meshnetv1.GraphEdge{}, nodeGraphEdgeFields, []string{"id", "source", "target"}},
	} {
		cols := jsonNames(c.row)
		for _, col := range cols {
			lower := strings.ToLower(col)
			if slices.Contains(c.fields, lower) || strings.HasPrefix(col, nodeGraphDetailPrefix) ||
				(c.frame == nodesFrame && strings.HasPrefix(col, nodeGraphArcPrefix)) {
				continue
			}
			t.Errorf("%s frame column %q is no Node Graph field", c.frame, col)
		}
		for _, r := range c.required {
			if !slices.Contains(cols, r) {
				t.Errorf("%s frame lacks the required field %q", c.frame, r)
			}
		}
	}
}

// datasourceJSONData are the audited jsonData keys of each datasource type.
var datasourceJSONData = map[string][]string{
	infinityType:   {infJSONTimeout, infJSONAllowedHosts, infJSONAuthMethod},
	prometheusType: {promJSONTimeInterval},
}

// TestProvisioningKeysAreAudited: every key and identifier of the
// provisioning files is an audited one.
func TestProvisioningKeysAreAudited(t *testing.T) {
	var p provisioning
	raw := loadYAML(t, datasourcesFile, &p)
	if p.APIVersion != provAPIVersion {
		t.Errorf("%s: apiVersion %d, want %d", datasourcesFile, p.APIVersion, provAPIVersion)
	}
	checkKeys(t, datasourcesFile, raw, provKeyAPIVersion, provKeyDatasources)
	for i, rd := range rawList(raw[provKeyDatasources]) {
		ds := p.Datasources[i]
		where := fmt.Sprintf("%s datasource %s", datasourcesFile, ds.Name)
		checkKeys(t, where, rd, provKeyName, provKeyUID, provKeyType, provKeyAccess, provKeyURL, provKeyJSONData, provKeySecureJSONData)
		if secure, ok := rawObject(rd)[provKeySecureJSONData]; ok {
			checkKeys(t, where+" secureJsonData", secure, infSecureBearerToken)
			if m := ds.JSONData[infJSONAuthMethod]; m != infAuthBearerToken {
				t.Errorf("%s: a bearer token with auth_method %v, want %s", where, m, infAuthBearerToken)
			}
		}
		keys, ok := datasourceJSONData[ds.Type]
		if !ok {
			t.Errorf("%s: type %q is no audited datasource plugin id", where, ds.Type)
		}
		checkKeys(t, where+" jsonData", rawObject(rd)[provKeyJSONData], keys...)
		if ds.Access != accessProxy {
			t.Errorf("%s: access %q, want %s", where, ds.Access, accessProxy)
		}
		if hosts, ok := ds.JSONData[infJSONAllowedHosts].([]any); ok {
			// pkg/models/settings.go ValidateAllowedHosts refuses an
			// allowed host that is not an http or https URL.
			for _, h := range hosts {
				if u, err := url.Parse(fmt.Sprint(h)); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
					t.Errorf("%s: allowed host %v is not an http(s) URL", where, h)
				}
			}
		}
		if ds.Type == infinityType {
			// GetQueryURL joins the base URL and a query's URL as they
			// are: the base must not end in a slash, a query must start
			// with one.
			if strings.HasSuffix(ds.URL, "/") {
				t.Errorf("%s: url %q ends in a slash; a query's /v1/... would follow it", where, ds.URL)
			}
			for _, q := range load(t).targets(infinityType) {
				if !strings.HasPrefix(q.URL, "/") {
					t.Errorf("query %s: url %q does not start with a slash, so it runs on into the base URL", q.RefID, q.URL)
				}
			}
		}
	}

	var dp dashboardProvisioning
	raw = loadYAML(t, dashboardsFile, &dp)
	if dp.APIVersion != provAPIVersion {
		t.Errorf("%s: apiVersion %d, want %d", dashboardsFile, dp.APIVersion, provAPIVersion)
	}
	checkKeys(t, dashboardsFile, raw, provKeyAPIVersion, provKeyProviders)
	for i, rp := range rawList(raw[provKeyProviders]) {
		where := fmt.Sprintf("%s provider %d", dashboardsFile, i)
		checkPaths(t, where, rp, provKeyName, provKeyFolder, provKeyType, provKeyAllowUIUpdates, join(provKeyOptions, provKeyPath))
		if dp.Providers[i].Type != providerFile {
			t.Errorf("%s: type %q, want %s", where, dp.Providers[i].Type, providerFile)
		}
	}
}

// TestAuditCatchesUnknownIdentifiers: the audit refuses what it should, on
// altered copies of the dashboard's own keys.
func TestAuditCatchesUnknownIdentifiers(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		audited []string
	}{
		{"misspelt node graph option", map[string]any{"nodes": map[string]any{"mainstatUnit": "up"}}, panelOptions[nodeGraphPanel]},
		{"unknown node graph option", map[string]any{"nodes": map[string]any{"zoom": 1}}, panelOptions[nodeGraphPanel]},
		{"table option not audited", map[string]any{"showHeader": true}, panelOptions[tablePanel]},
		{"Infinity key in another case", map[string]any{"rootSelector": "edges"}, targetKeys[infinityType]},
		{"unknown column key", map[string]any{"columns": []any{map[string]any{"selector": "x", "name": "x"}}}, targetKeys[infinityType]},
	} {
		r := &recorder{}
		checkPaths(r, c.name, c.v, c.audited...)
		if len(r.errs) == 0 {
			t.Errorf("%s: not refused", c.name)
		}
	}
	for _, c := range []struct {
		name, id string
		value    string
	}{
		{"unknown unit", propUnit, `"bytes/s"`},
		{"cell type of another Grafana", propTableCellOptions, `{"type": "color-background-solid"}`},
		{"mapping of a range", propMappings, `[{"type": "range", "options": {}}]`},
		{"mapping result key", propMappings, `[{"type": "value", "options": {"up": {"colour": "green"}}}]`},
		{"unknown colour name", propMappings, `[{"type": "value", "options": {"up": {"color": "grey-ish"}}}]`},
		{"line interpolation", propLineInterpolation, `"step"`},
	} {
		r := &recorder{}
		checkProperty(r, c.name, c.id, json.RawMessage(c.value))
		if len(r.errs) == 0 {
			t.Errorf("%s: not refused", c.name)
		}
	}
}
