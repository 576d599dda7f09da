package topoview_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/meshnet/meshnet/internal/meshnetd/topoview"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestPageAndItsFiles: the page and every file it names are served, with
// their types and a policy that lets the page load nothing from elsewhere.
func TestPageAndItsFiles(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/topology", topoview.Handler()))
	defer srv.Close()

	resp, index := get(t, srv.URL+"/topology/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /topology/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q, want default-src 'self'", csp)
	}
	want := map[string]string{"topology.js": "text/javascript", "topology.css": "text/css"}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(index, -1)
	named := 0
	for _, m := range refs {
		ref := m[1]
		if ref == "data:," { // the empty favicon, so that the browser asks for none
			continue
		}
		if strings.Contains(ref, "//") || strings.HasPrefix(ref, "/") {
			t.Errorf("index.html names %q: the page loads only files next to it", ref)
			continue
		}
		resp, body := get(t, srv.URL+"/topology/"+ref)
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode != http.StatusOK || body == "" || !strings.HasPrefix(ct, want[ref]) || want[ref] == "" {
			t.Errorf("GET /topology/%s: %d, %d bytes, %s; want 200 and %q", ref, resp.StatusCode, len(body), ct, want[ref])
		}
		named++
	}
	if named != len(want) {
		t.Errorf("index.html names %d files, want %d (%v)", named, len(want), want)
	}
	if resp, _ := get(t, srv.URL+"/topology/nothing.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /topology/nothing.js: %d, want 404", resp.StatusCode)
	}
}

// TestScriptSetsNoMarkup: names of pods and interfaces come from users, so
// the script sets text only, never HTML.
func TestScriptSetsNoMarkup(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/topology", topoview.Handler()))
	defer srv.Close()
	_, js := get(t, srv.URL+"/topology/topology.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, bad) {
			t.Errorf("topology.js uses %s", bad)
		}
	}
}
