//go:build kernel

package meshnetctl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/topofile"
)

var bins labnet.Binaries

func TestMain(m *testing.M) { os.Exit(labnet.Main(m, &bins)) }

const ns = "lab"

// ringLab is examples/ring-10 wired over three nodes by the real meshnetds
// and controller, converged, with the kubectl-meshnet binary built.
type ringLab struct {
	*labnet.Lab
	d   *lab.Deployment
	bin string // directory of kubectl-meshnet
	// Kubeconfigs: a cluster admin with a client certificate, and service
	// accounts with tokens: editor (the namespace's edit role's Topology
	// rules) and viewer (its view role's); execEditor is the editor whose
	// token comes from an exec credential plugin, as cloud providers' do.
	admin, editor, viewer, execEditor string
}

func newRingLab(t *testing.T) *ringLab {
	t.Helper()
	l := labnet.New(t, bins)
	l.AddNode("node-1", "eth0")
	l.AddNode("node-2", "ens3")
	l.AddNode("node-3", "eth0") // r10 and r1 share node-1: one veth
	l.Controller()
	data, err := os.ReadFile("../../../examples/ring-10/topology.yml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := topofile.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := l.Deploy(ctx, f, ns)
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.Converged(wait, ns); err != nil {
		t.Fatal(err)
	}
	r := &ringLab{Lab: l, d: d, bin: t.TempDir(), admin: l.Env.Kubeconfig(t)}
	if out, err := exec.Command("go", "build", "-o", r.bin, "github.com/meshnet/meshnet/cmd/kubectl-meshnet").CombinedOutput(); err != nil {
		t.Fatalf("go build kubectl-meshnet: %v\n%s", err, out)
	}
	r.editor = r.tokenKubeconfig(t, "editor", "meshnet-topology-edit")
	r.viewer = r.tokenKubeconfig(t, "viewer", "meshnet-topology-view")
	r.execEditor = execKubeconfig(t, r.editor)
	return r
}

// tokenKubeconfig makes a service account of the namespace bound there to
// role (as deploy/base/operator/rbac.yaml ships it) and to reading pods,
// which the namespace's edit and view roles both allow, and writes a
// kubeconfig that authenticates with its token.
func (r *ringLab) tokenKubeconfig(t *testing.T, name, role string) string {
	t.Helper()
	ctx := context.Background()
	c := r.Env.Client
	for _, obj := range shippedRoles(t) {
		if err := c.Create(ctx, obj); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		binding(name, role), binding(name, "system:aggregate-to-view"),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := r.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(r.admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData, a.ClientCertificate, a.ClientKey = nil, nil, "", ""
		a.Token = tok.Status.Token
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// execKubeconfig is kubeconfig with its token handed out by an exec
// credential plugin instead.
func execKubeconfig(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := filepath.Join(dir, "credential-plugin")
	for _, a := range cfg.AuthInfos {
		cred := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"` + a.Token + `"}}`
		if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho '"+cred+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		a.Token = ""
		a.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: plugin, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	}
	path := filepath.Join(dir, "exec.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func binding(sa, role string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-" + strings.ReplaceAll(role, ":", "-")},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
}

// shippedRoles are the ClusterRoles deploy/ aggregates into the built-in
// edit and view roles (this API server has no aggregation controller, so
// the test binds them itself).
func shippedRoles(t *testing.T) []client.Object {
	t.Helper()
	data, err := os.ReadFile("../../../deploy/base/operator/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []client.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" && strings.HasPrefix(role.Name, "meshnet-topology-") {
			out = append(out, &role)
		}
	}
	if len(out) != 2 {
		t.Fatalf("deploy/base/operator/rbac.yaml: %d meshnet-topology-* ClusterRoles, want 2", len(out))
	}
	return out
}

// run runs kubectl-meshnet as the user of kubeconfig in the namespace.
func (r *ringLab) run(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(r.bin, "kubectl-meshnet"), append(args, "--kubeconfig", kubeconfig, "-n", ns)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	t.Logf("$ kubectl meshnet %s  # as %s\n%s%s", strings.Join(args, " "), filepath.Base(kubeconfig), o.String(), e.String())
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("kubectl-meshnet %v: %v", args, err)
		}
		return o.String(), e.String(), exit.ExitCode()
	}
	return o.String(), e.String(), 0
}

func (r *ringLab) topology(t *testing.T, name string) *v1beta1.Topology {
	t.Helper()
	var topo v1beta1.Topology
	if err := r.Env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &topo); err != nil {
		t.Fatal(err)
	}
	return &topo
}

// link reads intf in pod's network namespace from the kernel.
func (r *ringLab) link(t *testing.T, pod, intf string) netlink.Link {
	t.Helper()
	h, err := netns.GetFromPath(r.d.Pod(pod).Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(intf)
	if err != nil {
		t.Fatalf("%s's %s: %v", pod, intf, err)
	}
	return l
}

func isUp(l netlink.Link) bool { return l.Attrs().Flags&syscall.IFF_UP != 0 }

// hasCarrier: the kernel's IFF_LOWER_UP (VXLAN's operstate stays UNKNOWN).
func hasCarrier(l netlink.Link) bool { return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 }

// TestKernelCommandsAsUsers runs every command of kubectl meshnet against
// the ring, as a client-certificate admin, a token editor and a token
// viewer, and checks each effect where it lands: the kernel of both ends,
// the Topology, or the refusal.
func TestKernelCommandsAsUsers(t *testing.T) {
	r := newRingLab(t)

	// The plugin is found by kubectl itself.
	kubectl := exec.Command("kubectl", "meshnet", "links", "r1", "--kubeconfig", r.viewer, "-n", ns)
	kubectl.Env = append(os.Environ(), "PATH="+r.bin+":"+os.Getenv("PATH"))
	if out, err := kubectl.CombinedOutput(); err != nil || !strings.Contains(string(out), "r2:eth2") {
		t.Errorf("kubectl meshnet links r1 through kubectl's plugin lookup: %v\n%s", err, out)
	}

	t.Run("links", func(t *testing.T) {
		for _, kc := range []string{r.admin, r.viewer} {
			kinds := map[string]int{}
			out, _, code := r.run(t, kc, "links")
			rows := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(rows) != 21 || !strings.HasPrefix(rows[0], "POD ") {
				t.Fatalf("links: exit %d, %d lines, want a header and 20 link ends", code, len(rows))
			}
			for _, row := range rows[1:] {
				f := strings.Fields(row)
				mtu := map[string]string{"veth": "1500", "vxlan": "1450"}[f[3]]
				if len(f) != 10 || f[4] != "up" || f[5] != "yes" || f[6] != "up" || f[7] != mtu {
					t.Errorf("link end %q: want state up, carrier yes, far end up, MTU 1500 (veth) or 1450 (vxlan)", row)
				}
				kinds[f[3]]++
			}
			if kinds["veth"] != 2 || kinds["vxlan"] != 18 {
				t.Errorf("link ends by kind: %v, want r10-r1's 2 veth ends and 18 vxlan ends", kinds)
			}
		}
		out, _, _ := r.run(t, r.viewer, "links", "r1", "-o", "json")
		for _, want := range []string{`"pod": "r1"`, `"local_intf": "eth1"`, `"peer_pod": "r2"`, `"carrier": true`} {
			if !strings.Contains(out, want) {
				t.Errorf("links r1 -o json has no %s", want)
			}
		}
	})

	t.Run("graph lists every link once", func(t *testing.T) {
		out, _, code := r.run(t, r.viewer, "graph")
		seen := map[string]int{}
		for _, m := range regexp.MustCompile(`(r\d+):eth(\d) -- (r\d+):eth(\d)`).FindAllStringSubmatch(out, -1) {
			ends := []string{m[1] + ":eth" + m[2], m[3] + ":eth" + m[4]}
			slices.Sort(ends)
			seen[strings.Join(ends, " ")]++
		}
		if code != 0 || len(seen) != 10 {
			t.Errorf("graph: exit %d, %d distinct links, want the ring's 10", code, len(seen))
		}
		for l, n := range seen {
			if n != 1 {
				t.Errorf("link %s listed %d times", l, n)
			}
		}
		dot, _, _ := r.run(t, r.viewer, "graph", "-o", "dot")
		if n := strings.Count(dot, `" -- "`); !strings.HasPrefix(dot, `graph "lab" {`) || n != 10 {
			t.Errorf("graph -o dot: %d edges, want 10 in a graph named lab", n)
		}
	})

	t.Run("viewer may not change", func(t *testing.T) {
		before := r.topology(t, "r1").Generation
		_, stderr, code := r.run(t, r.viewer, "down", "r1", "eth1")
		if code != 1 || !strings.HasPrefix(stderr, "Error from server (Forbidden): ") || !strings.Contains(stderr, "system:serviceaccount:lab:viewer") {
			t.Errorf("down as viewer: exit %d, %q; want 1 and kubectl's Forbidden naming the user", code, stderr)
		}
		if after := r.topology(t, "r1").Generation; after != before {
			t.Errorf("r1's generation %d -> %d after a refused change", before, after)
		}
	})

	t.Run("bad input names the argument and changes nothing", func(t *testing.T) {
		before := r.topology(t, "r1").Generation
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"down", "r99", "eth1"}, `error: pod "r99": no Topology r99 in namespace lab`},
			{[]string{"down", "r1", "eth9"}, `error: interface "eth9": pod r1 has no link on it (its links: eth1, eth2)`},
			{[]string{"down", "r1"}, `error: INTERFACE is required`},
			{[]string{"netem", "r1", "eth1", "--delay", "50"}, `error: --delay "50": "50" is not a duration`},
			{[]string{"netem", "r1", "eth1", "--jitter", "5ms"}, `error: --jitter "5ms": needs --delay`},
			{[]string{"netem", "r1", "eth1", "--loss", "150%"}, `error: --loss "150%": "150%" is not a percentage`},
			{[]string{"routes", "r1", "--delete", "192.0.2.0/24"}, `error: --delete 192.0.2.0/24: pod r1 has no route to it`},
			{[]string{"links", "-o", "table"}, `error: --output "table": unknown format`},
			{[]string{"down", "r1", "eth9", "--runtime"}, `error: interface "eth9": pod r1 has no link on it (its links: eth1, eth2)`},
			{[]string{"down", "r1", "eth1", "--runtime", "--timeout", "5s"}, `error: --timeout: a --runtime change waits for no status`},
			{[]string{"netem", "r1", "eth1", "--delay", "5", "--runtime"}, `error: --delay "5": "5" is not a duration`},
			{[]string{"capture", "r1", "eth1", "-w", "-", "-f", "icmp and"}, `error: --filter "icmp and": unexpected end after "and"`},
		} {
			_, stderr, code := r.run(t, r.editor, tc.args...)
			if code != 1 || !strings.HasPrefix(stderr, tc.want) {
				t.Errorf("%v: exit %d, %q; want 1 and %q", tc.args, code, stderr, tc.want)
			}
		}
		if after := r.topology(t, "r1").Generation; after != before {
			t.Errorf("r1's generation %d -> %d after refused input", before, after)
		}
	})

	t.Run("down and up reach both ends", func(t *testing.T) {
		// Link 1: r1's eth1 to r2's eth2.
		out, _, code := r.run(t, r.editor, "down", "r1", "eth1")
		if code != 0 || !strings.Contains(out, "topology.networkop.co.uk/r1 patched (spec.links[0].state: <unset> (up) -> down)") ||
			!strings.Contains(out, "topology.networkop.co.uk/r1 converged at generation") {
			t.Fatalf("down: exit %d; want the field patched and the status converged", code)
		}
		if row := lastLine(out); !strings.Contains(row, " down ") {
			t.Errorf("down printed %q, want the link's status row with state down", row)
		}
		if isUp(r.link(t, "r1", "eth1")) {
			t.Error("r1's eth1 is still up in the kernel")
		}
		// The far end: its carrier goes with the cable.
		waitFor(t, "r2's eth2 down or without carrier", func() bool {
			l := r.link(t, "r2", "eth2")
			return !isUp(l) || !hasCarrier(l)
		})
		if got := r.topology(t, "r1").Spec.Links[0].State; got == nil || *got != v1beta1.LinkDown {
			t.Errorf("r1's spec.links[0].state = %v, want down", got)
		}

		// Again: nothing to change, and said so.
		out, _, code = r.run(t, r.admin, "down", "r1", "eth1")
		if code != 0 || !strings.Contains(out, "unchanged (spec.links[0].state is already down)") {
			t.Errorf("second down: exit %d, want unchanged", code)
		}

		out, _, code = r.run(t, r.admin, "up", "r1", "eth1")
		if code != 0 || !strings.Contains(out, "(spec.links[0].state: down -> up)") {
			t.Fatalf("up: exit %d", code)
		}
		if !isUp(r.link(t, "r1", "eth1")) {
			t.Error("r1's eth1 is not up in the kernel after up")
		}
		waitFor(t, "r2's eth2 up with carrier", func() bool {
			l := r.link(t, "r2", "eth2")
			return isUp(l) && hasCarrier(l)
		})
	})

	t.Run("down --for ends by itself", func(t *testing.T) {
		// Link 2: r1's eth2 to r10's eth1. A viewer may not make a fault.
		if _, stderr, code := r.run(t, r.viewer, "down", "r1", "eth2", "--for", "2s"); code != 1 || !strings.Contains(stderr, `cannot create resource "linkfaults"`) {
			t.Errorf("down --for as viewer: exit %d, %q; want 1 and kubectl's Forbidden on linkfaults", code, stderr)
		}
		out, _, code := r.run(t, r.editor, "down", "r1", "eth2", "--for", "2s")
		if code != 0 || !strings.Contains(out, "linkfault.networkop.co.uk/r1-eth2-down-") || !strings.Contains(lastLine(out), " down ") {
			t.Fatalf("down --for 2s: exit %d; want the fault created and the link's row with state down", code)
		}
		waitFor(t, "r10's eth1 without carrier", func() bool { return !hasCarrier(r.link(t, "r10", "eth1")) })
		if wide, _, _ := r.run(t, r.viewer, "links", "r1", "-o", "wide"); !strings.Contains(wide, "FAULTS") || !strings.Contains(wide, " r1-eth2-down-") {
			t.Errorf("links r1 -o wide while the fault holds eth2: want its name in FAULTS:\n%s", wide)
		}
		if got := r.topology(t, "r1").Spec.Links[1].State; got != nil {
			t.Errorf("r1's spec.links[1].state = %v: a fault must leave the Topology as it is", *got)
		}
		waitFor(t, "r1's eth2 and r10's eth1 up with carrier after the 2 s", func() bool {
			a, b := r.link(t, "r1", "eth2"), r.link(t, "r10", "eth1")
			return isUp(a) && hasCarrier(a) && isUp(b) && hasCarrier(b)
		})
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"down", "r1", "eth2", "--for", "30s", "--runtime"}, "error: --for: cannot be combined with --runtime"},
			{[]string{"down", "r1", "eth9", "--for", "30s"}, `error: interface "eth9": pod r1 has no link on it`},
			{[]string{"netem", "r1", "eth2", "--clear", "--for", "1m"}, "error: --for: cannot be combined with --clear"},
			{[]string{"flap", "r1", "eth2", "--down", "1s"}, "error: --up 0s: must be more than 0s"},
		} {
			if _, stderr, code := r.run(t, r.editor, tc.args...); code != 1 || !strings.HasPrefix(stderr, tc.want) {
				t.Errorf("%v: exit %d, %q; want 1 and %q", tc.args, code, stderr, tc.want)
			}
		}
	})

	t.Run("exec credential plugin", func(t *testing.T) {
		out, _, code := r.run(t, r.execEditor, "down", "r2", "eth1")
		if code != 0 || !strings.Contains(out, "topology.networkop.co.uk/r2 patched (spec.links[1].state: <unset> (up) -> down)") {
			t.Fatalf("down with an exec plugin's token: exit %d", code)
		}
		if out, _, code = r.run(t, r.execEditor, "up", "r2", "eth1"); code != 0 || !strings.Contains(out, "converged") {
			t.Errorf("up with an exec plugin's token: exit %d", code)
		}
	})

	t.Run("completion", func(t *testing.T) {
		// As the shell asks: the word being completed comes last.
		complete := func(args ...string) (string, int) {
			args = append(append([]string{"__complete"}, args...), "--kubeconfig", r.viewer, "-n", ns, "")
			out, err := exec.Command(filepath.Join(r.bin, "kubectl-meshnet"), args...).Output()
			t.Logf("$ kubectl-meshnet %s\n%s", strings.Join(args, " "), out)
			if err != nil {
				return string(out), 1
			}
			return string(out), 0
		}
		out, code := complete("down")
		if pods := strings.Fields(out); code != 0 || !slices.Contains(pods, "r1") || !slices.Contains(pods, "r10") {
			t.Errorf("completion of POD: exit %d, %q; want the Topologies' names", code, out)
		}
		out, _ = complete("netem", "r1")
		if !strings.Contains(out, "eth1\tto r2:eth2\n") || !strings.Contains(out, "eth2\tto r10:eth1\n") {
			t.Errorf("completion of INTERFACE: %q; want r1's interfaces with their peers", out)
		}
	})

	t.Run("routes", func(t *testing.T) {
		out, _, code := r.run(t, r.editor, "routes", "r1", "--add", "192.0.2.0/24", "--via", "10.0.0.2")
		if code != 0 || !strings.Contains(out, "(spec.routes[0] added: <none> -> 192.0.2.0/24 via 10.0.0.2)") {
			t.Fatalf("routes --add: exit %d", code)
		}
		if route := r.route(t, "r1", "192.0.2.0/24"); !strings.Contains(route, "via 10.0.0.2") {
			t.Errorf("r1's kernel route to 192.0.2.0/24 is %q, want via 10.0.0.2", route)
		}
		out, _, code = r.run(t, r.editor, "routes", "r1", "--delete", "192.0.2.0/24")
		if code != 0 || !strings.Contains(out, "(spec.routes[0] deleted: 192.0.2.0/24 via 10.0.0.2 -> <none>)") {
			t.Fatalf("routes --delete: exit %d", code)
		}
		if route := r.route(t, "r1", "192.0.2.0/24"); route != "" {
			t.Errorf("r1 still routes 192.0.2.0/24: %q", route)
		}
	})

	t.Run("netem says what the kernel said", func(t *testing.T) {
		// This kernel has no sch_netem (the vm tier's has): the change is
		// recorded, the node refuses it, and the command says why at once.
		start := time.Now()
		_, stderr, code := r.run(t, r.editor, "netem", "r3", "eth1", "--delay", "50ms")
		if want := "error: r3's Topology has the change, but r3's node refused it on eth1: set netem on eth1: kernel has no sch_netem"; code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("netem on a kernel without sch_netem: exit %d; want 1 and %q", code, want)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("netem took %v to report the node's refusal, want it as soon as the status has it", took)
		}
		if n := r.topology(t, "r3").Spec.Links[1].Netem; n == nil || n.Delay == nil || *n.Delay != "50ms" {
			t.Errorf("r3's spec.links[1].netem = %+v, want delay 50ms recorded", n)
		}
		out, _, code := r.run(t, r.editor, "netem", "r3", "eth1", "--clear")
		if code != 0 || !strings.Contains(out, "(spec.links[1].netem: delay 50ms -> <none>)") {
			t.Errorf("netem --clear: exit %d", code)
		}
	})

	t.Run("watch", func(t *testing.T) {
		// The emulated lab's API server cannot reach a relay: the default
		// source says so and names the other one.
		_, stderr, code := r.run(t, r.viewer, "watch")
		if code != 1 || !strings.Contains(stderr, "--source status") {
			t.Errorf("watch without the aggregated API: exit %d, %q; want 1, naming --source status", code, stderr)
		}
		cmd := exec.Command(filepath.Join(r.bin, "kubectl-meshnet"), "watch", "--source", "status", "--kubeconfig", r.viewer, "-n", ns)
		// A file, which the test reads while the command writes it.
		out, err := os.Create(filepath.Join(t.TempDir(), "watch.out"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		printed := func() string { data, _ := os.ReadFile(out.Name()); return string(data) }
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		waitFor(t, "watch's header", func() bool { return strings.Contains(printed(), "CHANGE") })
		r.run(t, r.editor, "down", "r5", "eth1")
		want := regexp.MustCompile(`r5 +eth1 +state up -> down`)
		waitFor(t, "watch to print r5's eth1 going down", func() bool { return want.MatchString(printed()) })
		t.Logf("$ kubectl meshnet watch\n%s", printed())
	})
}

// route is the kernel's route to dst in pod's namespace, "" when none.
func (r *ringLab) route(t *testing.T, pod, dst string) string {
	t.Helper()
	out, err := netnstest.Run(r.d.Pod(pod).Netns, "ip", "route", "show", dst)
	if err != nil {
		t.Fatalf("ip route show %s in %s: %v\n%s", dst, pod, err, out)
	}
	return strings.TrimSpace(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
