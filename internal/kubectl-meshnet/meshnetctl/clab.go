package meshnetctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
)

// fieldManager owns the fields clab apply sets, in the objects'
// managedFields.
const fieldManager = "kubectl-meshnet"

// clabTimeout bounds clab apply --wait (a lab's images may be pulled
// first) and the waits for objects to go.
const clabTimeout = 5 * time.Minute

func newClabCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clab",
		Short: "Run a containerlab topology file (*.clab.yml) on the cluster",
		Long: `Run a containerlab topology file, unchanged, in a namespace: each node
becomes a pod and a Topology named like it, each file the lab binds (and
each node's exec) a ConfigMap. Every object is labelled containerlab=<lab
name>, so that kubectl get pods,topologies,configmaps -l containerlab=NAME
lists a lab. docs/containerlab.md says what maps to what, and what is
refused or ignored, and why.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q (its commands: apply, delete)", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newClabApplyCommand(o), newClabDeleteCommand(o))
	return cmd
}

// clabApply are clab apply's flags.
type clabApply struct {
	print    bool
	force    bool
	recreate bool
	wait     bool
	timeout  time.Duration
}

func newClabApplyCommand(o *options) *cobra.Command {
	var a clabApply
	cmd := &cobra.Command{
		Use:   "apply LAB.clab.yml",
		Short: "Apply a containerlab file to a namespace (server-side apply), or print its manifests",
		Long: `Convert a containerlab topology file and apply its objects to the namespace
(-n, or the kubeconfig's), in order: ConfigMaps, Topologies, Pods. Files
the lab binds are read relative to the lab file's directory, and ${VARS}
from the environment, as containerlab does. Settings that have no effect
on Kubernetes are printed as warnings; a file that does not convert is
refused whole, every problem named, and nothing is applied.

Each object is applied server-side, as kubectl apply --server-side does,
with the field manager kubectl-meshnet: a second apply of the same file
changes nothing and prints "unchanged", and fields others set (a cable
pulled with kubectl meshnet down, netem) are kept. Every object is first
applied as a server dry run, so that a refusal of any of them applies none:

- a field the file sets that another manager set too (kubectl edit) is a
  conflict, named; --force-conflicts takes it over, as with kubectl.
- a pod's spec cannot change once the pod exists: a changed file that
  changes it names the pod, to be deleted first; --recreate-pods deletes
  and re-creates such pods, and also those created before a ConfigMap
  they use changed (a running pod does not take up a changed bind,
  mounted by subPath, nor runs a changed exec), which are otherwise
  warned about at every apply.
- an object of the same name that is not the lab's (its containerlab label
  is another's or none) is not taken over.

--print prints the manifests instead (the namespace only with -n), for a
GitOps repository or kubectl apply -f -; it needs no cluster.`,
		Example: `  # Run the lab in namespace lab; again after editing the file
  kubectl meshnet clab apply frr-ospf.clab.yml -n lab

  # The same, then wait until every pod is Ready and every Topology converged
  kubectl meshnet clab apply frr-ospf.clab.yml -n lab --wait

  # The manifests, for GitOps
  kubectl meshnet clab apply frr-ospf.clab.yml --print > frr-ospf.yaml`,
		Args:              exactArgs("LAB.clab.yml"),
		ValidArgsFunction: completeLabFile,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.check(cmd.Flags()); err != nil {
				return err
			}
			verb := "nothing applied"
			if a.print {
				verb = "nothing printed"
			}
			lab, err := loadLab(args[0], verb)
			if err != nil {
				return err
			}
			for _, ig := range lab.Ignored {
				fmt.Fprintf(cmd.ErrOrStderr(), "Warning: %s\n", ig)
			}
			if a.print {
				objs, err := lab.Objects(o.overrides.Context.Namespace)
				if err != nil {
					return err
				}
				return objs.WriteYAML(cmd.OutOrStdout())
			}
			if err := o.connect(); err != nil {
				return err
			}
			objs, err := lab.Objects(o.namespace)
			if err != nil {
				return err
			}
			return o.applyLab(cmd.Context(), cmd.OutOrStdout(), lab, objs, a)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&a.print, "print", false, "print the manifests (YAML) instead of applying them; needs no cluster")
	fs.BoolVar(&a.force, "force-conflicts", false, "take over the fields the file sets that another field manager set (kubectl apply --server-side --force-conflicts)")
	fs.BoolVar(&a.recreate, "recreate-pods", false, "delete and re-create the pods whose spec or ConfigMaps the file changes, instead of refusing or warning")
	fs.BoolVar(&a.wait, "wait", false, "wait until every pod of the lab is Ready and every Topology converged")
	fs.DurationVar(&a.timeout, "timeout", clabTimeout, "how long to wait (--wait), and for pods to go (--recreate-pods)")
	return cmd
}

// check refuses flags that cannot go together.
func (a *clabApply) check(fs *pflag.FlagSet) error {
	if a.print {
		for _, name := range []string{"force-conflicts", "recreate-pods", "wait", "timeout"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s: --print applies nothing (it prints the manifests), so it cannot be combined with --%s", name, name)
			}
		}
	}
	if fs.Changed("timeout") && !a.wait && !a.recreate {
		return errors.New("--timeout: bounds --wait and --recreate-pods; give one of them")
	}
	if a.timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", a.timeout)
	}
	return nil
}

func newClabDeleteCommand(o *options) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete LAB.clab.yml",
		Short: "Delete the objects a containerlab file was applied as, from a namespace",
		Long: `Delete every object labelled containerlab=<the lab's name> in the namespace
(-n, or the kubeconfig's): Pods, then Topologies, then ConfigMaps, and
wait until they are gone (--wait, on by default). The file gives the lab's
name only: objects of nodes the file no longer has go too, and a file that
no longer converts is still read for its name. Deleting a lab that is not
there deletes nothing and succeeds.`,
		Example:           `  kubectl meshnet clab delete frr-ospf.clab.yml -n lab`,
		Args:              exactArgs("LAB.clab.yml"),
		ValidArgsFunction: completeLabFile,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: want a positive duration", timeout)
			}
			if cmd.Flags().Changed("timeout") && !wait {
				return errors.New("--timeout: bounds --wait, which --wait=false turns off")
			}
			name, err := o.labName(args[0])
			if err != nil {
				return err
			}
			if err := o.connect(); err != nil {
				return err
			}
			return o.deleteLab(cmd.Context(), cmd.OutOrStdout(), name, wait, timeout)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until the objects are gone")
	cmd.Flags().DurationVar(&timeout, "timeout", clabTimeout, "how long to wait for the objects to go")
	return cmd
}

// completeLabFile completes the lab file's name from YAML files.
func completeLabFile(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return []cobra.Completion{"yml", "yaml"}, cobra.ShellCompDirectiveFilterFileExt
}

// loadLab reads and converts the lab file at path: the files it binds from
// its directory (through an os.Root, so that no symbolic link leads out of
// it), its variables from the environment, as containerlab does. A file
// that does not convert is an error listing every problem, one a line,
// after saying what was not done (verb).
func loadLab(path, verb string) (*clabfile.Lab, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	lab, err := clabfile.Parse(data, root.FS(), os.LookupEnv)
	if err != nil {
		return nil, labProblems(path, verb, err)
	}
	return lab, nil
}

// labProblems is the converter's error as the command prints it: how
// many problems, then each on its own line, indented.
func labProblems(path, verb string, err error) error {
	n := 1
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		n = len(joined.Unwrap())
	}
	noun := "problem"
	if n != 1 {
		noun = "problems"
	}
	return fmt.Errorf("%s: %d %s, %s:\n  %s", path, n, noun, verb, strings.ReplaceAll(err.Error(), "\n", "\n  "))
}

// labName is the name of the lab the file at path describes. A file that
// no longer converts (a bound file removed since) still names its lab when
// its name is a plain label value, with a warning.
func (o *options) labName(path string) (string, error) {
	lab, err := loadLab(path, "nothing deleted")
	if err == nil {
		return lab.Name, nil
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return "", err
	}
	var top struct {
		Name string `json:"name"`
	}
	if yaml.Unmarshal(data, &top) != nil || top.Name == "" || strings.Contains(top.Name, "$") ||
		len(validation.IsValidLabelValue(top.Name)) > 0 {
		return "", err
	}
	fmt.Fprintf(o.stderr, "Warning: %s does not convert (kubectl meshnet clab apply --print says why); deleting lab %s by its name\n", path, top.Name)
	return top.Name, nil
}

// kindName spells an object's kind as kubectl prints it: "pod",
// "topology.networkop.co.uk".
func kindName(kind, group string) string {
	if group == "" {
		return strings.ToLower(kind)
	}
	return strings.ToLower(kind) + "." + group
}

// printDeleted prints a deletion as kubectl delete does.
func printDeleted(w io.Writer, kind, name, namespace string) {
	fmt.Fprintf(w, "%s %q deleted from %s namespace\n", kind, name, namespace)
}
