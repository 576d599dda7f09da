package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RestartAPIServer kills kube-apiserver, as a crash would, leaves it down
// for the given time and starts it again on the same address, with etcd
// running throughout: an API server outage as clients see it. (A graceful
// stop drains open watches for longer than envtest waits.) The serving
// certificate, the client CA and the service-account signing key stay the
// same, so kubeconfigs and tokens issued before keep working. It returns
// how long the API server was unreachable, kill to healthy.
func (e *Env) RestartAPIServer(t testing.TB, down time.Duration) time.Duration {
	t.Helper()
	api := e.Environment.ControlPlane.GetAPIServer()
	// envtest removes a certificate directory it made when the API server
	// stops, and a fresh one would get a new CA and signing key.
	keep := t.TempDir()
	if err := copyDir(api.CertDir, keep); err != nil {
		t.Fatalf("keep the API server's certificates: %v", err)
	}
	addr := api.SecureServing.Port
	pid, err := apiServerPID(api.CertDir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill kube-apiserver (pid %d): %v", pid, err)
	}
	if err := api.Stop(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	api.CertDir = keep
	time.Sleep(down)
	if err := api.Start(); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
	if api.SecureServing.Port != addr {
		t.Fatalf("kube-apiserver came back on port %s, was %s", api.SecureServing.Port, addr)
	}
	return time.Since(start)
}

// apiServerPID finds the kube-apiserver serving from certDir, which is this
// test's own.
func apiServerPID(certDir string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(data), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !slices.Contains(args, "--cert-dir="+certDir) {
			continue
		}
		return strconv.Atoi(filepath.Base(filepath.Dir(p)))
	}
	return 0, fmt.Errorf("no kube-apiserver process with --cert-dir=%s", certDir)
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			return fmt.Errorf("copy %s: %w", e.Name(), err)
		}
	}
	return nil
}
