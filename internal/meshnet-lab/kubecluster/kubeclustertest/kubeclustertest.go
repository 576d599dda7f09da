// Package kubeclustertest binds a cluster of real nodes (internal/meshnet-lab/kubecluster)
// to a test: every failure fails it, the cluster is removed at its end, and
// the logs of every component are kept as the test's artefacts when it
// fails.
package kubeclustertest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
)

// Prefix starts the names of the test clusters' network namespaces.
const Prefix = "meshnet-kt-"

// Binaries are the cluster's programs as `make node-bin` and
// `hack/controlplane.sh --nodes` leave them: $MESHNET_NODE_BIN for
// meshnet's binaries, the CNI plugins and pause, $KUBEBUILDER_ASSETS for
// Kubernetes'. A missing one fails the test, saying which.
func Binaries(t testing.TB) kubecluster.Binaries {
	t.Helper()
	assets, bin := os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("MESHNET_NODE_BIN")
	if assets == "" || bin == "" {
		t.Fatalf("real-node tests need KUBEBUILDER_ASSETS (hack/controlplane.sh --nodes) and MESHNET_NODE_BIN (make node-bin); have %q and %q", assets, bin)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox (Debian's busybox-static, hack/deps.sh installs it): %v", err)
	}
	return kubecluster.Binaries{Assets: assets, CNI: bin, Meshnet: bin, Pause: filepath.Join(bin, "pause"), Busybox: busybox}
}

// New starts a cluster of n real nodes for t, removed at t's end.
func New(t testing.TB, n int) *kubecluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "meshnet-kube-")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := kubecluster.New(context.Background(), kubecluster.Options{
		Dir: dir, Prefix: Prefix, Nodes: n, Binaries: Binaries(t), MeshnetImage: "meshnet:dev", Log: log,
	})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("start a cluster of %d real nodes: %v", n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), "meshnet-kube-logs-"+filepath.Base(dir))
			_ = os.RemoveAll(keep)
			if err := exec.Command("cp", "-r", filepath.Join(dir, "logs"), keep).Run(); err == nil {
				t.Logf("component logs kept in %s", keep)
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("remove the cluster: %v", err)
		}
		os.RemoveAll(dir)
	})
	return c
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
