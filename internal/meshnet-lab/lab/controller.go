package lab

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// StartController runs meshnet-controller in node n's network namespace
// (as a Deployment's pod runs on some node), where the API server and
// every node's meshnetd are reachable. It calls meshnetd with the daemon
// token, whose service account may patch topologies everywhere. name names
// its log file; args are added to the lab's flags.
func (l *Lab) StartController(n *Node, name string, args ...string) (*Process, error) {
	argv := append([]string{l.opts.Binaries.Controller,
		"--kubeconfig", l.nodeKubeconfig, "--token-file", l.tokenFile,
		"--daemon-namespace", SystemNamespace, "--leader-election-namespace", SystemNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, args...)
	if l.opts.Profiling {
		argv = append(argv, "--pprof-bind-address", fmt.Sprintf(":%d", ProfilePort))
	}
	p, err := startIn(name, n.Netns, filepath.Join(l.opts.Dir, name+".log"), argv...)
	if err != nil {
		return nil, fmt.Errorf("start meshnet-controller %s: %w", name, err)
	}
	l.onClose(func() error { return p.Stop(syscall.SIGTERM, 20*time.Second) })
	l.mu.Lock()
	l.controllers = append(l.controllers, p)
	l.mu.Unlock()
	return p, nil
}
