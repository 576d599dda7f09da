package clabfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsShowTheRealOutput keeps docs/containerlab.md true: it must show
// the FRR lab as examples/frr-ospf has it, the converter's objects and ignored
// settings for it, its errors for testdata/refused, and name every
// setting the converter refuses or ignores.
func TestDocsShowTheRealOutput(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "containerlab.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	mustShow := func(what, s string) {
		t.Helper()
		if !strings.Contains(text, s) {
			t.Errorf("docs/containerlab.md does not show %s as it is:\n%s", what, s)
		}
	}
	for _, f := range []string{filepath.Join(frrLab, "frr-ospf.clab.yml"), "testdata/frr-ospf.objects.yaml", "testdata/refused/refused.clab.yml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		mustShow(f, string(data))
	}
	data, _ := os.ReadFile(filepath.Join(frrLab, "frr-ospf.clab.yml"))
	lab, err := Parse(data, os.DirFS(frrLab), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ig := range lab.Ignored {
		mustShow("an ignored setting", ig.String())
	}
	data, _ = os.ReadFile("testdata/refused/refused.clab.yml")
	_, err = Parse(data, os.DirFS("testdata/refused"), nil)
	if err == nil {
		t.Fatal("testdata/refused converts")
	}
	mustShow("the errors for testdata/refused", err.Error())
	for key, r := range nodeFields {
		if r.how != mapped {
			mustShow("a refused or ignored setting", "`"+key+"`")
		}
	}
	for key := range topFields {
		mustShow("a top-level setting", "`"+key+"`")
	}
	for typ := range refusedLinkTypes {
		mustShow("a refused link type", "`"+typ+"`")
	}
}
