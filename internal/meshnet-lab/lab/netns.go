package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// netnsDir is where iproute2 (and CNI runtimes) keep named namespaces.
const netnsDir = "/run/netns"

// netns creates the named network namespace <prefix><name> and returns its
// path; Close deletes it, taking every interface inside along.
func (l *Lab) netns(name string) (string, error) {
	full := l.opts.NetnsPrefix + name
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %w: %s", full, err, strings.TrimSpace(string(out)))
	}
	l.onClose(func() error { return deleteNetns(full) })
	return filepath.Join(netnsDir, full), nil
}

func deleteNetns(name string) error {
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Sweep deletes the network namespaces named with prefix that a lab left
// behind (one killed before its Close) and the host's end of the node
// network, and returns what it removed.
func Sweep(prefix string) ([]string, error) {
	if prefix == "" {
		return nil, fmt.Errorf("sweep: empty namespace prefix would match every namespace")
	}
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := deleteNetns(e.Name()); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "netns "+e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", hostNIC)); err == nil {
		if err := exec.Command("ip", "link", "delete", hostNIC).Run(); err == nil {
			removed = append(removed, "interface "+hostNIC)
		}
	}
	return removed, errors.Join(errs...)
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
