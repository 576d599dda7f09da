package clabfile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// LookupEnv finds an environment variable: its value, and whether it is set
// at all. os.LookupEnv is one.
type LookupEnv func(name string) (value string, ok bool)

// expandEnv expands the environment variables in a topology file as
// containerlab does before it reads the YAML (hellt/envsubst with
// containerlab's restrictions): $VAR and ${VAR} take VAR's value, and stay
// as $VAR when VAR is unset or empty; ${VAR:-w} and ${VAR:=w} take w when
// VAR is unset or empty, ${VAR-w} and ${VAR=w} when it is unset;
// ${VAR+w} and ${VAR:+w} are w when VAR is set, else empty (the word may
// hold variables itself); $$ is a $. Any other ${...} form is an error
// naming its line, as is an unclosed ${. A $ before anything but a name, {
// or $ (like $1) stays as written.
func expandEnv(data []byte, env LookupEnv) ([]byte, []error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	var out bytes.Buffer
	var errs []error
	for i := 0; i < len(data); {
		c := data[i]
		if c != '$' || i+1 == len(data) {
			out.WriteByte(c)
			i++
			continue
		}
		switch next := data[i+1]; {
		case next == '$':
			out.WriteByte('$')
			i += 2
		case next == '{' && i+2 < len(data) && isDigit(data[i+2]):
			out.WriteString("${")
			i += 2
		case next == '{':
			end := closingBrace(data, i+2)
			if end < 0 {
				errs = append(errs, fmt.Errorf("line %d: %s: no closing brace", lineOf(data, i), firstLine(data[i:])))
				out.Write(data[i:])
				i = len(data)
				continue
			}
			v, err := expandBraced(string(data[i+2:end]), env)
			if err != nil {
				errs = append(errs, fmt.Errorf("line %d: %s: %w", lineOf(data, i), data[i:end+1], err))
			}
			out.WriteString(v)
			i = end + 1
		case isNameStart(next):
			j := i + 2
			for j < len(data) && isNameChar(data[j]) {
				j++
			}
			out.WriteString(value(string(data[i+1:j]), env))
			i = j
		default:
			out.WriteByte('$')
			i++
		}
	}
	return out.Bytes(), errs
}

// value is $name expanded: its value, or "$name" when it is unset or
// empty.
func value(name string, env LookupEnv) string {
	if v, _ := env(name); v != "" {
		return v
	}
	return "$" + name
}

// closingBrace is the index of the } that closes a ${ whose body starts
// at from, nested ${...} counted; -1 when there is none on the line.
func closingBrace(data []byte, from int) int {
	depth := 0
	for i := from; i < len(data) && data[i] != '\n'; i++ {
		switch {
		case data[i] == '$' && i+1 < len(data) && data[i+1] == '{':
			depth++
			i++
		case data[i] == '}' && depth == 0:
			return i
		case data[i] == '}':
			depth--
		}
	}
	return -1
}

// expandBraced expands the body of ${body}.
func expandBraced(body string, env LookupEnv) (string, error) {
	n := 0
	for n < len(body) && (n == 0 && isNameStart(body[n]) || n > 0 && isNameChar(body[n])) {
		n++
	}
	name, rest := body[:n], body[n:]
	if name == "" {
		return "${" + body + "}", errors.New("want a variable name after ${")
	}
	if rest == "" {
		return value(name, env), nil
	}
	colon := strings.HasPrefix(rest, ":")
	op := strings.TrimPrefix(rest, ":")
	if op == "" || !strings.ContainsRune("-=+", rune(op[0])) {
		return "${" + body + "}", errors.New("unsupported expansion: containerlab's files use ${VAR}, ${VAR:-default}, ${VAR:=default} or ${VAR:+other}")
	}
	word, errs := expandEnv([]byte(op[1:]), env)
	if len(errs) > 0 {
		return "${" + body + "}", errs[0]
	}
	val, set := env(name)
	switch {
	case op[0] == '+' && set:
		return string(word), nil
	case op[0] == '+':
		return "", nil
	case colon && val == "", !colon && !set:
		return string(word), nil
	}
	return value(name, env), nil
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isNameChar(c byte) bool { return isNameStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lineOf is the line number of data[i].
func lineOf(data []byte, i int) int { return bytes.Count(data[:i], []byte("\n")) + 1 }

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Containerlab's magic variables: the node's name, the lab's long name
// (clab-<name>), and its lab directory and a node's directory in it, which
// containerlab makes next to the lab file (clab-<name>, clab-<name>/<node>).
const (
	varNodeName = "__clabNodeName__"
	varLabName  = "__clabLabName__"
	varLabDir   = "__clabDir__"
	varNodeDir  = "__clabNodeDir__"
)

// magicPaths replaces the magic variables in a path of the lab file, as
// containerlab does in binds and startup-config; the directories resolve
// relative to the lab file, where containerlab makes them.
func magicPaths(s, lab, node string) string {
	dir := "clab-" + lab
	return strings.NewReplacer(
		varNodeDir, dir+"/"+node,
		varLabDir, dir,
		varLabName, dir,
		varNodeName, node,
	).Replace(s)
}
