// Package version says which build of meshnet a binary is, for every
// binary's --version and the meshnet_build_info metric: the release stamped
// at link time, and the commit and Go version the Go toolchain records in
// the binary itself, so that a build from any checkout says where it came
// from without a build script's help.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the release, stamped at link time by make build and make
// release:
//
//	-ldflags "-X github.com/meshnet/meshnet/internal/version.Version=v0.2.0"
//
// A build without it says "devel".
var Version = "devel"

// Commit is the revision, stamped at link time as Version is, for builds
// whose toolchain records none (GOFLAGS=-buildvcs=false, a build outside
// the checkout); empty: what the toolchain recorded.
var Commit = ""

// MetricName is the gauge meshnetd and meshnet-controller export, always 1,
// labelled with Info.Labels, as Prometheus' own *_build_info are.
const MetricName = "meshnet_build_info"

// Info is one build of a binary.
type Info struct {
	Version string
	// Commit is the revision the binary was built from, "unknown" when it
	// was not built in a checkout (go test, go run of a file).
	Commit string
	// Modified is set when the checkout had uncommitted changes.
	Modified  bool
	GoVersion string
}

// Get is this binary's build.
func Get() Info {
	i := Info{Version: Version, Commit: "unknown", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if Commit != "" {
		i.Commit, i.Modified = strings.TrimSuffix(Commit, "-modified"), strings.HasSuffix(Commit, "-modified")
	}
	return i
}

// String is the build in one line: "v0.2.0 (commit 1a2b3c4d5e6f, go1.26.8)",
// "modified" after the commit when the checkout had changes.
func (i Info) String() string {
	commit := i.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if i.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, commit, i.GoVersion)
}

// Labels are the build's labels of MetricName.
func (i Info) Labels() map[string]string {
	commit := i.Commit
	if i.Modified {
		commit += "-modified"
	}
	return map[string]string{"version": i.Version, "commit": commit, "goversion": i.GoVersion}
}
