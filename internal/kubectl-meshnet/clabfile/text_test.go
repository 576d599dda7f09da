package clabfile

import (
	"slices"
	"strings"
	"testing"
)

// TestSplitWords follows github.com/google/shlex, which containerlab
// splits cmd, entrypoint and exec with.
func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"ip addr add 10.0.0.1/24 dev eth1", []string{"ip", "addr", "add", "10.0.0.1/24", "dev", "eth1"}, ""},
		{"  spaced\tout\n words  ", []string{"spaced", "out", "words"}, ""},
		{`bash -c "echo $HOME; ip link"`, []string{"bash", "-c", "echo $HOME; ip link"}, ""},
		{`sh -c 'echo "a b"'`, []string{"sh", "-c", `echo "a b"`}, ""},
		{`a"b c"d'e f'`, []string{"ab cde f"}, ""},
		{`"" ''`, []string{"", ""}, ""},
		{`a\ b "c\"d" 'e\f'`, []string{"a b", `c"d`, `e\f`}, ""},
		{`"\$x \q"`, []string{"$x q"}, ""},
		{"echo a#b # a comment\nnext", []string{"echo", "a#b", "next"}, ""},
		{"", []string{}, ""},
		{"sh -c 'unterminated", nil, "quote is not closed"},
		{`"open`, nil, "quote is not closed"},
		{`trailing\`, nil, "backslash"},
		{`"trailing\`, nil, "backslash"},
		{"ünïcode wörds", []string{"ünïcode", "wörds"}, ""},
	} {
		got, err := splitWords(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("splitWords(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestExpandEnv follows hellt/envsubst with containerlab's restrictions
// (unset and empty variables stay as $NAME, $1 stays).
func TestExpandEnv(t *testing.T) {
	env := map[string]string{"IMG": "frr:10", "EMPTY": "", "N": "3"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ in, want, err string }{
		{"image: $IMG", "image: frr:10", ""},
		{"image: ${IMG}", "image: frr:10", ""},
		{"image: $UNSET and ${UNSET} and $EMPTY", "image: $UNSET and $UNSET and $EMPTY", ""},
		{"image: ${UNSET:-alpine} ${EMPTY:-alpine} ${IMG:-alpine}", "image: alpine alpine frr:10", ""},
		{"image: ${UNSET:=alpine} ${EMPTY:=alpine}", "image: alpine alpine", ""},
		{"image: ${UNSET-alpine} ${EMPTY-alpine} ${IMG-alpine}", "image: alpine $EMPTY frr:10", ""},
		{"x: ${IMG:+set} ${EMPTY+set} ${UNSET:+set}.", "x: set set .", ""},
		{"x: ${UNSET:-${IMG}}", "x: frr:10", ""},
		{"cost: $$5 and $1 and ${1} and $ alone and $(", "cost: $5 and $1 and ${1} and $ alone and $(", ""},
		{"n: r$N", "n: r3", ""},
		{"x: ${IMG", "", "no closing brace"},
		{"x: ${IMG/a/b}", "", "unsupported expansion"},
		{"x: ${}", "", "want a variable name"},
	} {
		got, errs := expandEnv([]byte(tc.in), lookup)
		if tc.err != "" {
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.err) || !strings.Contains(errs[0].Error(), "line 1") {
				t.Errorf("expandEnv(%q): errors %v, want one with line 1 and %q", tc.in, errs, tc.err)
			}
			continue
		}
		if len(errs) > 0 || string(got) != tc.want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tc.in, got, errs, tc.want)
		}
	}
	if got, _ := expandEnv([]byte("image: $IMG"), nil); string(got) != "image: $IMG" {
		t.Errorf("without an environment: %q", got)
	}
}

// TestParseExpandsEnvironment checks that Parse expands variables before
// reading the YAML, as containerlab does.
func TestParseExpandsEnvironment(t *testing.T) {
	lab, err := Parse([]byte("name: ${LAB:=env}\ntopology: {nodes: {r1: {kind: linux, image: \"${IMAGE}\"}}}\n"), nil,
		func(k string) (string, bool) { return map[string]string{"IMAGE": "alpine:3"}[k], k == "IMAGE" })
	if err != nil {
		t.Fatal(err)
	}
	o, err := lab.Objects("")
	if err != nil {
		t.Fatal(err)
	}
	if lab.Name != "env" || o.Pods[0].Spec.Containers[0].Image != "alpine:3" {
		t.Errorf("lab %q image %q", lab.Name, o.Pods[0].Spec.Containers[0].Image)
	}
}
