// Command meshnet-lab runs meshnet on one machine: a real kube-apiserver and
// etcd, nodes each running meshnetd (emulated, or with -real kubelet and
// containerd, meshnet installed from deploy/), meshnet-controller, and the
// pods of a k8s-topo topology file or, on real nodes, of a containerlab file,
// wired by meshnet-cni.
//
//	meshnet-lab up -real examples/frr-ospf/frr-ospf.clab.yml   start a lab in the background, print what to try
//	meshnet-lab up examples/line-3/topology.yml    the emulated lab
//	meshnet-lab down                               remove every trace of it
//	meshnet-lab import FILE [-namespace NS]        print the file's Topology objects, for kubectl apply -f -
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/florianl/go-tc/core"
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/internal/meshnet-lab/labctl"
	"github.com/meshnet/meshnet/internal/topofile"
)

const usage = `usage:
  meshnet-lab up [flags] TOPOLOGY.yml   start a lab in the background and print what to try:
                                        TOPOLOGY.yml is a k8s-topo file, or with -real a
                                        containerlab file (LAB.clab.yml)
  meshnet-lab down [-dir DIR]           stop the lab and remove every trace of it
  meshnet-lab import [-namespace NS] TOPOLOGY.yml
                                        print the Topology objects of a k8s-topo file
  meshnet-lab serve [flags] TOPOLOGY.yml
                                        run a lab in the foreground (up runs this)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "up", "serve":
		err = up(cmd, args)
	case "down":
		err = down(args)
	case "import":
		err = importFile(args)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
	default:
		err = fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshnet-lab:", err)
		os.Exit(1)
	}
}

func up(cmd string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := labctl.Config{}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	fs.StringVar(&cfg.Dir, "dir", labctl.DefaultDir, "the lab's state directory")
	fs.StringVar(&cfg.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory of kube-apiserver and etcd (hack/controlplane.sh prints it)")
	fs.StringVar(&cfg.BinDir, "bin", filepath.Dir(self), "directory of meshnetd, meshnet-cni, meshnet-controller and the loopback CNI plugin")
	fs.IntVar(&cfg.Nodes, "nodes", 2, "number of nodes")
	fs.BoolVar(&cfg.Real, "real", false, "real nodes: kubelet and containerd in each, meshnet installed with kubectl apply -k (-assets must hold the node binaries too: hack/controlplane.sh --nodes)")
	fs.StringVar(&cfg.Overlay, "overlay", "deploy/overlays/kind", "with -real: the kustomize overlay that installs meshnet")
	fs.StringVar(&cfg.Busybox, "busybox", "/bin/busybox", "with -real: the static busybox of the router image")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the pods and Topology objects")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("%s needs one topology file, got %d arguments\n%s", cmd, fs.NArg(), usage)
	}
	if cfg.Topology, err = filepath.Abs(fs.Arg(0)); err != nil {
		return err
	}
	if cfg.Overlay, err = filepath.Abs(cfg.Overlay); err != nil {
		return err
	}
	if cmd == "serve" {
		core.InitializeClock() // netem's time conversions need it
		handler := slog.NewTextHandler(os.Stderr, nil)
		cfg.Log = slog.New(handler)
		ctrllog.SetLogger(logr.FromSlogHandler(handler)) // envtest logs through controller-runtime
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return labctl.Serve(ctx, cfg)
	}
	guide, err := labctl.Up(cfg.Dir, self, append(flagArgs(fs), cfg.Topology), 5*time.Minute)
	if err != nil {
		return err
	}
	fmt.Print(guide)
	return nil
}

// flagArgs repeats every flag's value, so that serve runs with what up was
// given, defaults resolved.
func flagArgs(fs *flag.FlagSet) []string {
	var args []string
	fs.VisitAll(func(f *flag.Flag) { args = append(args, "-"+f.Name+"="+f.Value.String()) })
	return args
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", labctl.DefaultDir, "the lab's state directory")
	_ = fs.Parse(args)
	removed, err := labctl.Down(*dir, labctl.StopTimeout)
	for _, r := range removed {
		fmt.Println("removed", r)
	}
	if len(removed) == 0 && err == nil {
		fmt.Println("no lab was running; nothing left to remove")
	}
	return err
}

func importFile(args []string) error {
	fs := flag.NewFlagSet("import", flag.ExitOnError)
	ns := fs.String("namespace", "default", "namespace of the Topology objects")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return errors.New("import needs one topology file")
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	f, err := topofile.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	for _, key := range f.Ignored {
		fmt.Fprintf(os.Stderr, "meshnet-lab: %s: ignoring k8s-topo setting %q, which meshnet does not use\n", fs.Arg(0), key)
	}
	topos, err := f.Topologies(*ns)
	if err != nil {
		return err
	}
	return topofile.WriteYAML(os.Stdout, topos)
}
