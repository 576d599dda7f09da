// Package labctl runs a meshnet lab (internal/meshnet-lab/lab) as a background service
// on one machine, for `meshnet-lab up` and `meshnet-lab down`: it keeps the
// lab's state under one directory and its network namespaces under one name
// prefix, so that down removes every trace, also of a lab that crashed.
package labctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/vishvananda/netns"

	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/netem"
	"github.com/meshnet/meshnet/internal/shaping"
	"github.com/meshnet/meshnet/internal/topofile"
)

// NetnsPrefix starts the name of every network namespace of the lab.
const NetnsPrefix = "meshnet-lab-"

// DefaultDir is where the lab keeps its state: on tmpfs, gone at reboot
// like the namespaces.
const DefaultDir = "/run/meshnet-lab"

// Config is what to run.
type Config struct {
	Dir    string // the lab's state directory
	Assets string // kube-apiserver and etcd
	BinDir string // meshnetd, meshnet-cni, meshnet-controller, loopback (and grpcurl)
	// Topology is the k8s-topo topology file, or a containerlab file
	// (IsContainerlab), which runs on real nodes only.
	Topology  string
	Namespace string
	Nodes     int
	Log       *slog.Logger
	// Real runs the lab on real nodes (kubelet, containerd; Assets must then
	// hold their binaries too, BinDir the CNI plugins and pause), meshnet
	// installed from Overlay; Busybox is the router image's busybox.
	Real             bool
	Overlay, Busybox string
}

// Files of the state directory.
const (
	pidFile   = "pid"
	guideFile = "guide.txt"
	logFile   = "lab.log"
)

// Serve runs the lab in the foreground until ctx ends, then removes it. It
// writes the guide (what to try) once every Topology is Ready.
func Serve(ctx context.Context, cfg Config) (err error) {
	if cfg.Nodes < 1 {
		return fmt.Errorf("--nodes %d: a lab needs at least one node", cfg.Nodes)
	}
	var f *topofile.File
	if IsContainerlab(cfg.Topology) {
		err = checkContainerlab(cfg)
	} else {
		f, err = readTopology(cfg.Topology)
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, pidFile), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		return err
	}
	switch {
	case f == nil:
		return serveContainerlab(ctx, cfg)
	case cfg.Real:
		return serveReal(ctx, cfg, f)
	}
	log := cfg.Log
	l, err := lab.New(lab.Options{
		Dir: cfg.Dir, Assets: cfg.Assets, Binaries: lab.BinariesIn(cfg.BinDir),
		NetnsPrefix: NetnsPrefix, HostAccess: true, Log: log,
	})
	if err != nil {
		return err
	}
	defer func() {
		log.Info("removing the lab")
		err = errors.Join(err, l.Close())
	}()
	nics := []string{"ens3", "enp0s8", "eth0"} // nodes may name their NICs differently
	for i := range cfg.Nodes {
		name := fmt.Sprintf("node-%d", i+1)
		n, err := l.AddNode(name, nics[i%len(nics)])
		if err != nil {
			return err
		}
		if err := n.PublishEndpoint(true); err != nil {
			return err
		}
		log.Info("node ready", "node", name, "ip", n.IP, "nic", n.NIC)
	}
	if _, err := l.StartController(l.Nodes()[0], "meshnet-controller"); err != nil {
		return err
	}
	d, err := l.Deploy(ctx, f, cfg.Namespace)
	if err != nil {
		return err
	}
	log.Info("pods wired", "pods", len(d.Pods), "physical", len(d.Physicals))
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = l.Converged(wait, cfg.Namespace)
	cancel()
	if err != nil {
		return err
	}
	kubeconfig, err := l.Kubeconfig()
	if err != nil {
		return err
	}
	token, err := l.OperatorToken()
	if err != nil {
		return err
	}
	g := guide{lab: l, d: d, f: f, kubeconfig: kubeconfig, token: token, binDir: cfg.BinDir, down: downCommand(cfg.Dir), netem: netemWorks()}
	if err := os.WriteFile(filepath.Join(cfg.Dir, guideFile), []byte(g.String()), 0o644); err != nil {
		return err
	}
	log.Info("lab ready", "kubeconfig", kubeconfig)
	<-ctx.Done()
	return nil
}

func readTopology(path string) (*topofile.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := topofile.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// netemWorks tells whether this kernel can make netem qdiscs (nil when it
// can), trying on a veth of a scratch namespace.
func netemWorks() error {
	const probe = NetnsPrefix + "netem-probe"
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %w: %s", probe, err, out)
	}
	defer exec.Command("ip", "netns", "delete", probe).Run()
	if out, err := exec.Command("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1").CombinedOutput(); err != nil {
		return fmt.Errorf("make a veth in %s: %w: %s", probe, err, out)
	}
	if out, err := exec.Command("ip", "-n", probe, "link", "set", "probe0", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("set probe0 up in %s: %w: %s", probe, err, out)
	}
	h, err := netns.GetFromName(probe)
	if err != nil {
		return err
	}
	defer h.Close()
	return netem.Apply(h, "probe0", shaping.Spec{Delay: time.Millisecond})
}

// downCommand is the command that removes the lab in dir, as this machine
// runs it: make lab-down is only where the repository is, not in the VM.
func downCommand(dir string) string {
	self, err := os.Executable()
	if err != nil {
		self = "meshnet-lab"
	}
	if dir != DefaultDir {
		return self + " down -dir " + dir
	}
	return self + " down"
}
