package version

import (
	"runtime"
	"strings"
	"testing"
)

// TestInfo: a build says its version, its commit (at most 12 characters, and
// whether the checkout was modified) and its Go version, in one line and as
// the metric's labels.
func TestInfo(t *testing.T) {
	i := Info{Version: "v0.2.0", Commit: "1a2b3c4d5e6f7a8b9c0d", Modified: true, GoVersion: "go1.26.8"}
	if got, want := i.String(), "v0.2.0 (commit 1a2b3c4d5e6f, modified, go1.26.8)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	l := i.Labels()
	if l["version"] != "v0.2.0" || l["commit"] != "1a2b3c4d5e6f7a8b9c0d-modified" || l["goversion"] != "go1.26.8" {
		t.Errorf("Labels() = %v", l)
	}
	// A test binary has no commit and the version it was not stamped with.
	if g := Get(); g.Version != "devel" || g.GoVersion != runtime.Version() || !strings.Contains(g.String(), runtime.Version()) {
		t.Errorf("Get() = %+v", g)
	}
}
