// Package topographtest holds the Grafana Node Graph contract that
// topograph's frames, and the data API serving them, are checked against.
package topographtest

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Columns the Node Graph panel requires, or reads, of every row.
var (
	NodeColumns = []string{"id", "title", "subtitle", "mainstat", "color"}
	EdgeColumns = []string{"id", "source", "target", "mainstat", "secondarystat", "color", "thickness"}
)

// CheckRow checks one decoded JSON row of a frame of m's type against the
// Node Graph data API: the required columns are there (id, source, target,
// title and color not empty), detail__ and arc__ columns are lower case (the
// panel matches them so), and every column of m is a JSON number, string or
// bool as its proto field is: never a 64-bit integer, which protojson
// writes as a string.
func CheckRow(t testing.TB, m proto.Message, row map[string]any, required []string) {
	t.Helper()
	for _, c := range required {
		v, ok := row[c]
		if !ok {
			t.Errorf("%s row %v: no %s column", m.ProtoReflect().Descriptor().Name(), row["id"], c)
			continue
		}
		if s, isString := v.(string); isString && s == "" && slices.Contains([]string{"id", "source", "target", "title", "color"}, c) {
			t.Errorf("row %v: %s is empty", row["id"], c)
		}
	}
	for k := range row {
		lower := strings.ToLower(k)
		if (strings.HasPrefix(lower, "detail__") || strings.HasPrefix(lower, "arc__")) && k != lower {
			t.Errorf("column %q: the panel matches detail__/arc__ columns in lower case", k)
		}
	}
	fields := m.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		v, ok := row[f.JSONName()]
		if !ok {
			t.Errorf("row %v: no %s column (the gateway must emit unpopulated fields)", row["id"], f.JSONName())
			continue
		}
		switch f.Kind() {
		case protoreflect.DoubleKind, protoreflect.FloatKind, protoreflect.Uint32Kind, protoreflect.Int32Kind:
			if _, ok := v.(float64); !ok {
				t.Errorf("row %v: %s = %#v, want a JSON number", row["id"], f.JSONName(), v)
			}
		case protoreflect.StringKind:
			if _, ok := v.(string); !ok {
				t.Errorf("row %v: %s = %#v, want a JSON string", row["id"], f.JSONName(), v)
			}
		case protoreflect.BoolKind:
			if _, ok := v.(bool); !ok {
				t.Errorf("row %v: %s = %#v, want a JSON bool", row["id"], f.JSONName(), v)
			}
		default:
			t.Errorf("%s is %s: a Node Graph column must be a number, string or bool", f.FullName(), f.Kind())
		}
	}
}
