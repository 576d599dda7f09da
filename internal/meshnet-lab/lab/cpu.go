package lab

import (
	"fmt"
	"slices"

	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// CPU is the processor time the lab's programs have used so far: each
// node's running meshnetd ("meshnetd/node-0"), each controller started by
// StartController (by its name), and the control plane's kube-apiserver
// and etcd when this process started them.
func (l *Lab) CPU() (proccpu.Usage, error) {
	u, err := l.ControlPlane.CPU()
	if err != nil {
		return nil, err
	}
	add := func(name string, p *Process) error {
		if p == nil || p.State() != nil {
			return nil
		}
		d, err := proccpu.Of(p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("cpu of %s: %w", name, err)
		}
		u[name] = d
		return nil
	}
	for _, n := range l.Nodes() {
		n.mu.Lock()
		p := n.meshnetd
		n.mu.Unlock()
		if err := add("meshnetd/"+n.Name, p); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	controllers := slices.Clone(l.controllers)
	l.mu.Unlock()
	for _, p := range controllers {
		if err := add(p.Name, p); err != nil {
			return nil, err
		}
	}
	return u, nil
}
