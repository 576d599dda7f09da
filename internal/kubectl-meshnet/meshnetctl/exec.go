package meshnetctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
)

// execInFlight bounds the pods a command runs in at once: a lab of a
// hundred routers is not a hundred streams through the API server at once.
const execInFlight = 8

// podSelection is how exec and save pick a namespace's pods: by name
// (pods, or containerlab nodes' names), label selector, containerlab group
// or lab; what is given narrows the selection.
type podSelection struct {
	selector string
	group    string
	lab      string
}

func (s *podSelection) flags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.selector, "selector", "l", "", "pods whose labels match this selector (as kubectl's -l)")
	cmd.Flags().StringVar(&s.group, "group", "", "the pods of this containerlab group (label "+clabfile.GroupLabel+")")
	cmd.Flags().StringVar(&s.lab, "lab", "", "the pods of this containerlab lab (label "+clabfile.LabLabel+")")
}

// pods lists the selected pods of the namespace, by name; names are pods'
// or containerlab nodes' names.
func (o *options) selectPods(ctx context.Context, s podSelection, names []string) ([]corev1.Pod, error) {
	if len(names) == 0 && s.selector == "" && s.group == "" && s.lab == "" {
		return nil, errors.New("no pods selected: name them, or give -l, --group or --lab")
	}
	sel, err := labels.Parse(s.selector)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", s.selector, err)
	}
	set := labels.Set{}
	if s.group != "" {
		set[clabfile.GroupLabel] = s.group
	}
	if s.lab != "" {
		set[clabfile.LabLabel] = s.lab
	}
	reqs, _ := labels.SelectorFromSet(set).Requirements()
	sel = sel.Add(reqs...)
	var list corev1.PodList
	if err := o.client.List(ctx, &list, client.InNamespace(o.namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		if len(list.Items) == 0 {
			return nil, fmt.Errorf("no pods in namespace %s match", o.namespace)
		}
		return list.Items, nil
	}
	var out []corev1.Pod
	for _, n := range names {
		i := slices.IndexFunc(list.Items, func(p corev1.Pod) bool { return p.Name == n || p.Labels[clabfile.NodeLabel] == n })
		if i < 0 {
			return nil, fmt.Errorf("pod %q: no such pod (or containerlab node) in namespace %s among those selected", n, o.namespace)
		}
		out = append(out, list.Items[i])
	}
	return out, nil
}

// nodeName is how output names pod p: its containerlab node's name, or its
// own.
func nodeName(p *corev1.Pod) string { return or(p.Labels[clabfile.NodeLabel], p.Name) }

// execResult is what a command run in a pod gave.
type execResult struct {
	pod            *corev1.Pod
	stdout, stderr bytes.Buffer
	err            error
}

// execAll runs argv in the first container of each pod, execInFlight at
// once, and hands each result to done as it comes, one at a time.
func (o *options) execAll(ctx context.Context, pods []corev1.Pod, argv []string, done func(*execResult)) error {
	cs, err := kubernetes.NewForConfig(o.rest)
	if err != nil {
		return fmt.Errorf("client for %s: %w", o.rest.Host, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		slots = make(chan struct{}, execInFlight)
	)
	for i := range pods {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r := &execResult{pod: &pods[i]}
			r.err = o.execIn(ctx, cs, &pods[i], argv, &r.stdout, &r.stderr)
			mu.Lock()
			defer mu.Unlock()
			done(r)
		})
	}
	wg.Wait()
	return nil
}

// execIn runs argv in pod p's first container, as kubectl exec does
// (WebSocket, or SPDY from an API server without it).
func (o *options) execIn(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, argv []string, stdout, stderr io.Writer) error {
	if len(p.Spec.Containers) == 0 {
		return errors.New("the pod has no container")
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: argv, Stdout: true, Stderr: true}, clientscheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(o.rest, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(o.rest, "POST", req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// exitError says how a command ended in a pod: its exit status, or why it
// did not run.
func exitError(err error) string {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return fmt.Sprintf("exit status %d", exit.ExitStatus())
	}
	return err.Error()
}

// noProgram tells whether err says the program to run is not in the
// container: the runtime's refusal to start it (the exec fails with
// "executable file not found"), or a shell's exit status 126 or 127.
func noProgram(err error) bool {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitStatus() == 126 || exit.ExitStatus() == 127
	}
	return err != nil && (strings.Contains(err.Error(), "executable file not found") || strings.Contains(err.Error(), "no such file or directory"))
}

// prefixed writes b's lines to w, each after prefix.
func prefixed(w io.Writer, prefix string, b []byte) {
	for _, line := range strings.SplitAfter(strings.TrimRight(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(w, "%s%s\n", prefix, strings.TrimSuffix(line, "\n"))
		}
	}
}

func newExecCommand(o *options) *cobra.Command {
	var s podSelection
	cmd := &cobra.Command{
		Use:   "exec [POD...] [-l SELECTOR] [--group GROUP] [--lab LAB] -- COMMAND [ARG...]",
		Short: "Run a command in many pods at once, each line of output after its node's name",
		Long: `Run a command in the pods named (or containerlab nodes' names), or
selected by label, containerlab group or lab, 8 at a time, as containerlab
exec runs one on a lab's nodes. Each pod's output is printed once the
command ends there, every line after the pod's containerlab node name (or
its own). The command is run as a program, without a shell: give sh -c
'...' for pipes. It exits 1 when the command failed in any pod, naming each
on standard error.`,
		Example: `  # Every router of a lab's group
  kubectl meshnet exec -n lab --group routers -- vtysh -c 'show ip ospf neighbor'

  # Two nodes, by their containerlab names
  kubectl meshnet exec -n lab PC1 PC2 -- ip -br addr`,
		RunE: func(cmd *cobra.Command, args []string) error {
			at := cmd.ArgsLenAtDash()
			if at < 0 || at == len(args) {
				return errors.New("COMMAND is required after --: see 'kubectl meshnet exec --help'")
			}
			if err := o.connect(); err != nil {
				return err
			}
			pods, err := o.selectPods(cmd.Context(), s, args[:at])
			if err != nil {
				return err
			}
			var failed []string
			err = o.execAll(cmd.Context(), pods, args[at:], func(r *execResult) {
				node := nodeName(r.pod)
				prefixed(cmd.OutOrStdout(), node+": ", r.stdout.Bytes())
				prefixed(o.stderr, node+": ", r.stderr.Bytes())
				if r.err != nil {
					failed = append(failed, node+": "+exitError(r.err))
				}
			})
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				slices.Sort(failed)
				return fmt.Errorf("%s failed in %d of %d pods:\n  %s", args[at], len(failed), len(pods), strings.Join(failed, "\n  "))
			}
			return nil
		},
	}
	s.flags(cmd)
	return cmd
}

// frrRunningConfig is how save reads an FRR router's configuration.
var frrRunningConfig = []string{"vtysh", "-c", "show running-config"}

func newSaveCommand(o *options) *cobra.Command {
	var (
		s   podSelection
		dir string
	)
	cmd := &cobra.Command{
		Use:   "save [POD...] [-l SELECTOR] [--group GROUP] [--lab LAB] [--dir DIR]",
		Short: "Save the running configuration of FRR routers to files",
		Long: `Save the running configuration of each selected pod that runs FRR
(vtysh -c 'show running-config') to DIR/<node>/frr.conf, as containerlab
save saves its nodes' configurations into the lab's directory. DIR is
clab-<lab> with --lab, else the current directory. A pod without vtysh is
skipped, saying so; any other failure names the pod, and the others are
saved all the same.`,
		Example: `  # Every FRR router of a lab, to ./clab-frr-ospf/<node>/frr.conf
  kubectl meshnet save -n lab --lab frr-ospf`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.connect(); err != nil {
				return err
			}
			pods, err := o.selectPods(cmd.Context(), s, args)
			if err != nil {
				return err
			}
			if dir == "" && s.lab != "" {
				dir = "clab-" + s.lab
			}
			dir = or(dir, ".")
			var failed []string
			saved := 0
			err = o.execAll(cmd.Context(), pods, frrRunningConfig, func(r *execResult) {
				node := nodeName(r.pod)
				switch {
				case noProgram(r.err):
					fmt.Fprintf(o.stderr, "%s: skipped: no vtysh (not an FRR router)\n", node)
				case r.err != nil:
					failed = append(failed, fmt.Sprintf("%s: %s: %s", node, exitError(r.err), strings.TrimSpace(r.stderr.String())))
				default:
					path := filepath.Join(dir, node, "frr.conf")
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						failed = append(failed, fmt.Sprintf("%s: %v", node, err))
						return
					}
					if err := os.WriteFile(path, r.stdout.Bytes(), 0o644); err != nil {
						failed = append(failed, fmt.Sprintf("%s: %v", node, err))
						return
					}
					saved++
					fmt.Fprintf(cmd.OutOrStdout(), "%s: saved to %s\n", node, path)
				}
			})
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				slices.Sort(failed)
				return fmt.Errorf("%d of %d pods not saved:\n  %s", len(failed), len(pods), strings.Join(failed, "\n  "))
			}
			return nil
		},
	}
	s.flags(cmd)
	cmd.Flags().StringVar(&dir, "dir", "", "directory to save into (clab-<lab> with --lab, else the current one)")
	return cmd
}
