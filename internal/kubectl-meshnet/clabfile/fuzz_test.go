package clabfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// malformed are files that must fail, or convert, without a panic: broken
// YAML, wrong types at every level, odd links.
var malformed = []string{
	"",
	"null",
	"~",
	"[]",
	"42",
	"name: [",
	"name:\n\t- tab",
	"name: a\ntopology: null",
	"name: a\ntopology: {nodes: null}",
	"name: a\ntopology: {nodes: {r1: null}}",
	"name: a\ntopology: {nodes: {r1: 5}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: null}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [null]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{endpoints: null}]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{type: veth, endpoints: [null, null]}]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{type: macvlan, endpoint: null, host-interface: null}]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{type: [x]}]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{endpoints: [\":\", \":\"]}]}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a}}, links: [{endpoints: [\"macvlan:\", \"macvlan:\"]}]}",
	"name: a\ntopology: {defaults: [1], kinds: [1], groups: \"x\", nodes: {r1: {kind: linux, image: a}}}",
	"name: a\ntopology: {groups: {g: null}, nodes: {r1: {group: g, kind: linux, image: a, binds: null, exec: null, env: null}}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, binds: [\":\", \"::\", \":::\", \"a:b:c:d\"]}}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, exec: [\"\\\\\", \"'\", \"#\"]}}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, startup-config: \"\"}}}",
	"name: ${\ntopology: {}",
	"name: $\ntopology: {}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, env: {\"\": x}, labels: {\"\": \"\"}}}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, user: \":\"}}}",
	"name: a\ntopology: {nodes: {r1: {kind: linux, image: a, privileged: null, cap-add: [null]}}}",
	"&a [*a]",
	"name: &x a\ntopology: {nodes: {r1: {kind: linux, image: *x}}}",
}

func TestMalformedDoesNotPanic(t *testing.T) {
	for _, f := range malformed {
		convertAnything(t, []byte(f))
	}
}

// FuzzParse feeds Parse arbitrary files; it must never panic, and what it
// accepts must convert.
func FuzzParse(f *testing.F) {
	for _, m := range malformed {
		f.Add([]byte(m))
	}
	if data, err := os.ReadFile(filepath.Join(frrLab, "frr-ospf.clab.yml")); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		convertAnything(t, data)
	})
}

// convertAnything parses data and, when it parses, makes its objects.
func convertAnything(t *testing.T, data []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", data, r)
		}
	}()
	dir := fstest.MapFS{"a": {Data: []byte("a")}, "d/f": {Data: []byte("f")}}
	lab, err := Parse(data, dir, nil)
	if err != nil {
		if strings.TrimSpace(err.Error()) == "" {
			t.Fatalf("empty error for %q", data)
		}
		return
	}
	if _, err := lab.Objects("lab"); err != nil {
		t.Fatalf("parsed %q but Objects failed: %v", data, err)
	}
}
