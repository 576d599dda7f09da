package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/meshnet/meshnet/internal/meshnet-lab/teardown"
)

// netns creates the named network namespace <prefix><name> and returns its
// path; Close deletes it, taking every interface inside along.
func (l *Lab) netns(name string) (string, error) {
	return teardown.AddNetns(&l.undo, l.opts.NetnsPrefix+name)
}

// Sweep deletes the network namespaces named with prefix that a lab left
// behind (one killed before its Close) and the host's end of the node
// network, and returns what it removed.
func Sweep(prefix string) ([]string, error) {
	removed, err := teardown.SweepNetns(prefix)
	if prefix == "" {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", hostNIC)); err == nil {
		if err := exec.Command("ip", "link", "delete", hostNIC).Run(); err == nil {
			removed = append(removed, "interface "+hostNIC)
		}
	}
	return removed, err
}

// run runs a command inside the namespace at nsPath (through nsenter, so no
// thread of this process changes namespace).
func run(nsPath, name string, args ...string) error {
	_, err := output(nsPath, name, args...)
	return err
}

// output runs a command inside a namespace and returns its combined output.
func output(nsPath, name string, args ...string) (string, error) {
	argv := append([]string{"--net=" + nsPath, "--", name}, args...)
	out, err := exec.Command("nsenter", argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), nsPath, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// runHost runs a command in the host's own namespaces.
func runHost(argv ...string) error {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
