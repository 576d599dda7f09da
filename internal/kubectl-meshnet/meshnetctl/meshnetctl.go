// Package meshnetctl is kubectl meshnet, the operator's command line. It
// talks to the API server only, with the user's own kubeconfig (a client
// certificate, a token or an exec plugin alike), so that it works wherever
// kubectl does and the user's own RBAC decides what they may do: reading
// links needs get/list on Topologies, changing them patch.
//
// Changes are declarative: a command patches the one Topology field it
// names, with a JSON patch that tests the link's index first (so that a
// concurrent edit of another link, or the controller's status writes, never
// conflict with it), then waits until the controller reports the pod's
// status converged at that generation.
package meshnetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/clabfile"
	"github.com/meshnet/meshnet/internal/version"
)

// Main runs kubectl meshnet with args (without the program's name) and
// returns its exit code: 0, or 1 after printing the error as kubectl does.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, message(err))
		return 1
	}
	return 0
}

// NewCommand is the kubectl meshnet command with its subcommands.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{
		rules:     clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides: &clientcmd.ConfigOverrides{},
		stderr:    stderr,
	}
	root := &cobra.Command{
		Use:   "kubectl-meshnet",
		Short: "See and change the links of meshnet's pods",
		Long: `kubectl meshnet shows and changes the links meshnet wires between pods.

It needs nothing but your kubeconfig: it reads and patches the pods'
Topology objects through the API server, so your own permissions on
Topologies decide what you may do (the namespace's view role may list
links, its edit role may change them). Changes are made in the Topology,
so they survive restarts, and the command waits until the pod's status
says the kernel has them.`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Help and completion say "kubectl meshnet", as users type it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl meshnet"},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	flags := root.PersistentFlags()
	flags.StringVar(&o.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file to use")
	clientcmd.BindOverrideFlags(o.overrides, flags, clientcmd.RecommendedConfigOverrideFlags(""))
	root.AddCommand(
		newLinksCommand(o),
		newStateCommand(o, v1beta1.LinkDown),
		newStateCommand(o, v1beta1.LinkUp),
		newNetemCommand(o),
		newFlapCommand(o),
		newRoutesCommand(o),
		newGraphCommand(o),
		newWatchCommand(o),
		newCaptureCommand(o),
		newClabCommand(o),
		newExecCommand(o),
		newSaveCommand(o),
	)
	return root
}

// options are what every subcommand shares: where the API server is and
// who the user is, from kubeconfig and flags.
type options struct {
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	// stderr takes progress, apart from the output.
	stderr io.Writer

	client    client.WithWatch
	rest      *rest.Config
	namespace string
}

// connect builds the client and namespace once, from kubeconfig and flags.
func (o *options) connect() error {
	if o.client != nil {
		return nil
	}
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.rules, o.overrides)
	rc, err := cfg.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if o.namespace, _, err = cfg.Namespace(); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// client-go's default of 5 requests a second, 10 at once, would hold
	// clab apply (3 requests an object) for minutes on a large lab; the
	// API server's priority and fairness guards it, as it does kubectl's.
	if rc.QPS == 0 && rc.Burst == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme(), Mapper: mapper()})
	if err != nil {
		return fmt.Errorf("client for %s: %w", rc.Host, err)
	}
	o.client, o.rest = c, rc
	return nil
}

// connectPod connects, then makes args[0], a command's POD, the name of a
// pod: a containerlab node's name that is not a pod name (PC1) becomes
// the name of the pod the converter gave that node (pc1), found by the
// node's label. A name that is a pod name is taken as it is.
func (o *options) connectPod(ctx context.Context, args []string) error {
	if err := o.connect(); err != nil {
		return err
	}
	if len(args) == 0 || len(validation.IsDNS1123Label(args[0])) == 0 {
		return nil
	}
	var list v1beta1.TopologyList
	if err := o.client.List(ctx, &list, client.InNamespace(o.namespace), client.MatchingLabels{clabfile.NodeLabel: args[0]}); err != nil {
		return fmt.Errorf("pod %q: find the pod of containerlab node %s: %w", args[0], args[0], err)
	}
	switch len(list.Items) {
	case 0:
		return fmt.Errorf("pod %q: not a pod name, and no containerlab node of that name in namespace %s (kubectl get topologies -n %s lists the pods)", args[0], o.namespace, o.namespace)
	case 1:
		args[0] = list.Items[0].Name
		return nil
	}
	var pods []string
	for _, t := range list.Items {
		pods = append(pods, t.Name+" (lab "+t.Labels[clabfile.LabLabel]+")")
	}
	return fmt.Errorf("pod %q: containerlab node %s of several labs in namespace %s: %s; name the pod", args[0], args[0], o.namespace, strings.Join(pods, ", "))
}

// aggregated is a client of the API server for the paths of meshnet's
// aggregated API (relayapi), which reach the pods' nodes, with timeout
// for each request: o.rest's (--request-timeout) for reads, 0 for streams,
// which last as long as they are read.
func (o *options) aggregated(timeout time.Duration) (rest.Interface, error) {
	cfg := rest.CopyConfig(o.rest)
	cfg.Timeout = timeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", o.rest.Host, err)
	}
	return cs.CoreV1().RESTClient(), nil
}

// do makes req and returns its body. An error is the API server's Status,
// as kubectl prints it: DoRaw's says "unknown" for a JSON Status.
func do(ctx context.Context, req *rest.Request) ([]byte, error) {
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

// scheme holds the kinds the command reads.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = v1beta1.AddToScheme(s)
	_ = corev1.AddToScheme(s)
	return s
}

// mapper maps the kinds the command reads without discovery, which would
// cost a round trip per group on every run.
func mapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(v1beta1.GroupVersion.WithKind("Topology"), meta.RESTScopeNamespace)
	m.Add(v1beta1.GroupVersion.WithKind("LinkFault"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Service"), meta.RESTScopeNamespace)
	return m
}

// message spells err as kubectl does: "Error from server (NotFound): ..."
// for the API server's refusals, "error: ..." for the rest.
func message(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		reason := status.Status().Reason
		if reason == "" {
			reason = "Unknown"
		}
		return fmt.Sprintf("Error from server (%s): %s", reason, err.Error())
	}
	return "error: " + err.Error()
}

// defaultTimeout bounds the wait for the status after a change.
const defaultTimeout = 60 * time.Second
