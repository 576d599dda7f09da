//go:build node

package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster/kubeclustertest"
	"github.com/meshnet/meshnet/internal/relayapi"
)

// overlay is how this cluster installs meshnet: the kind overlay (a
// locally built meshnet:dev, pulled if not present, here from the
// cluster's registry).
const overlay = "overlays/kind"

// TestNodeMeshnetAsInstalled installs meshnet with kubectl apply -k on two
// real nodes and runs meshnet-cni-style manifests (Topology and Pod
// objects in one List, image alpine) as real pods: links made at pod
// creation, pinged from inside the containers.
func TestNodeMeshnetAsInstalled(t *testing.T) {
	ctx := context.Background()
	c := kubeclustertest.New(t, 2)
	start := time.Now()
	if err := c.Install(ctx, overlay); err != nil {
		t.Fatalf("install meshnet: %v", err)
	}
	t.Logf("meshnet installed and Ready in %v", time.Since(start).Round(time.Millisecond))

	t.Run("DaemonSetOnEveryNode", func(t *testing.T) {
		pods := podsOf(t, c, "meshnet", "app.kubernetes.io/name=meshnetd")
		nodes := map[string]bool{}
		for _, p := range pods {
			if !podReady(&p) {
				t.Errorf("meshnetd pod %s on %s is not Ready", p.Name, p.Spec.NodeName)
			}
			nodes[p.Spec.NodeName] = true
		}
		for _, n := range c.Nodes() {
			if !nodes[n.Name] {
				t.Errorf("no meshnetd pod on %s", n.Name)
			}
		}
	})
	t.Run("NodesSayTheirVersion", func(t *testing.T) {
		// The version tools/kubernetes/go.mod pins, stamped into the
		// binaries as Kubernetes' own build stamps it.
		mod, err := os.ReadFile("../tools/kubernetes/go.mod")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
		if m == nil {
			t.Fatal("tools/kubernetes/go.mod requires no k8s.io/kubernetes")
		}
		want := string(m[1])
		out, err := c.Kubectl(ctx, "get", "nodes")
		t.Logf("$ kubectl get nodes\n%s", out)
		if err != nil || strings.Count(out, " "+want) != len(c.Nodes()) {
			t.Errorf("kubectl get nodes: %v; want each node's VERSION %s", err, want)
		}
		var nodes corev1.NodeList
		if err := c.Client.List(ctx, &nodes); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != want {
				t.Errorf("%s: kubelet version %q, want %s", n.Name, n.Status.NodeInfo.KubeletVersion, want)
			}
		}
		out, err = c.Kubectl(ctx, "version", "-o", "json")
		var v struct {
			ServerVersion struct{ GitVersion, Major, Minor string }
		}
		if jerr := json.Unmarshal([]byte(out), &v); err != nil || jerr != nil || v.ServerVersion.GitVersion != want || v.ServerVersion.Major == "" {
			t.Errorf("kubectl version: %v %v %+v; want the API server at %s with its major and minor", err, jerr, v.ServerVersion, want)
		}
	})
	t.Run("ConflistSortsFirstAndKeepsPrimary", func(t *testing.T) {
		for _, n := range c.Nodes() {
			dir := filepath.Join(n.Dir, "cni", "net.d")
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) == 0 || entries[0].Name() != cniconf.FileName {
				t.Errorf("%s: %s sorts first in %v, want %s", n.Name, dir, names(entries), cniconf.FileName)
				continue
			}
			var conf struct {
				Name    string
				Plugins []struct{ Type string }
			}
			data, _ := os.ReadFile(filepath.Join(dir, cniconf.FileName))
			if err := json.Unmarshal(data, &conf); err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			if len(conf.Plugins) < 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[len(conf.Plugins)-1].Type != cniconf.PluginType || conf.Name != "kubenet" {
				t.Errorf("%s: conflist %s plugins %v, want the primary's network kubenet with bridge first and meshnet last", n.Name, conf.Name, conf.Plugins)
			}
		}
	})
	t.Run("ControllerHasOneLeader", func(t *testing.T) {
		var leases coordinationv1.LeaseList
		if err := c.Client.List(ctx, &leases, client.InNamespace("meshnet")); err != nil {
			t.Fatal(err)
		}
		pods := podsOf(t, c, "meshnet", "app.kubernetes.io/name=meshnet-controller")
		var holders []string
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				holders = append(holders, *l.Spec.HolderIdentity)
			}
		}
		if len(holders) != 1 {
			t.Fatalf("leases held in meshnet: %v, want exactly one", holders)
		}
		found := false
		for _, p := range pods {
			found = found || strings.HasPrefix(holders[0], p.Name)
		}
		if !found {
			t.Errorf("lease holder %q is none of the controller's pods", holders[0])
		}
	})

	t.Run("VethOnOneNode", func(t *testing.T) {
		// Both routers on one node: the other node cordoned while they are
		// scheduled.
		ns := "veth"
		other := c.Nodes()[1].Name
		kubectl(t, c, "cordon", other)
		applyManifest(t, c, ns, twoRouters)
		waitRunning(t, c, ns, "r1", "r2")
		kubectl(t, c, "uncordon", other)
		r1, r2 := pod(t, c, ns, "r1"), pod(t, c, ns, "r2")
		if r1.Spec.NodeName != r2.Spec.NodeName {
			t.Fatalf("r1 on %s, r2 on %s: want one node", r1.Spec.NodeName, r2.Spec.NodeName)
		}
		ping(t, c, ns, "r1", "12.12.12.2")
		ping(t, c, ns, "r2", "12.12.12.1")
		waitLinkKind(t, c, ns, "r1", v1beta1.LinkKindVeth)
		// The eth0 of each pod is still the primary CNI's.
		out := kubectl(t, c, "-n", ns, "exec", "r1", "--", "ip", "-4", "addr", "show", "eth0")
		if !strings.Contains(out, "10.244.") {
			t.Errorf("r1's eth0 is not the primary CNI's (10.244.0.0/16):\n%s", out)
		}
	})
	t.Run("VXLANAcrossNodes", func(t *testing.T) {
		ns := "vxlan"
		routersAcrossNodes(t, c, ns)
		waitAPIServiceAvailable(t, c, relayapi.APIService)
		editor, viewer := userKubeconfig(t, c, ns, "edit"), userKubeconfig(t, c, ns, "view")
		t.Run("CaptureThroughTheAPIServer", func(t *testing.T) { captureThroughAPIServer(t, c, ns, editor, viewer) })
		t.Run("RuntimeChangesThroughTheAPIServer", func(t *testing.T) { runtimeChangesThroughAPIServer(t, c, ns, editor, viewer) })
		t.Run("HostileCallsChangeNothing", func(t *testing.T) { hostileCallsChangeNothing(t, c, ns) })
		t.Run("UnderlayKeepsToLinkEnds", func(t *testing.T) { underlayKeepsToLinkEnds(t, c, ns) })
		t.Run("FloodOnOneNode", func(t *testing.T) { floodOnOneNode(t, c, ns, editor) })
	})
	t.Run("ContainerlabFRRLab", func(t *testing.T) { containerlabFRRLab(t, c, "clab") })
	t.Run("BroadcastSegmentAcrossNodes", func(t *testing.T) { broadcastSegmentAcrossNodes(t, c, "lan") })
	t.Run("ContainerlabNamesAndExec", func(t *testing.T) { containerlabNamesAndExec(t, c, "caps") })
	t.Run("MacvlanToTheNodeNIC", func(t *testing.T) {
		ns := "macvlan"
		// Without a cluster admin's consent the macvlan is refused at
		// admission (deploy/admission), naming the link and the label.
		if err := c.Namespace(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "topology.yaml")
		topology := macvlanRouter[:strings.Index(macvlanRouter, "- apiVersion: v1\n")] // the Topology alone
		if err := os.WriteFile(f, []byte(topology), 0o644); err != nil {
			t.Fatal(err)
		}
		refusal, err := c.Kubectl(context.Background(), "-n", ns, "apply", "-f", f)
		if err == nil || !strings.Contains(err.Error(), "spec.links[0]: a link to the node (peer_pod localhost, or link_options) needs namespace macvlan labelled meshnet.networkop.co.uk/host-links=allowed") {
			t.Fatalf("a macvlan without the namespace's consent: %v\n%s\nwant refused by meshnet-host-links", err, refusal)
		}
		kubectl(t, c, "label", "namespace", ns, v1beta1.HostLinksLabel+"="+v1beta1.HostLinksAllowed)
		kubectl(t, c, "annotate", "namespace", ns, v1beta1.HostInterfacesAnnotation+"="+kubecluster.NodeNIC)
		applyManifest(t, c, ns, macvlanRouter)
		waitRunning(t, c, ns, "r3")
		waitLinkKind(t, c, ns, "r3", v1beta1.LinkKindMacvlan)
		out := kubectl(t, c, "-n", ns, "exec", "r3", "--", "ip", "-4", "addr", "show", "eth2")
		if !strings.Contains(out, "172.17.0.199/16") {
			t.Errorf("r3's eth2 lacks 172.17.0.199/16:\n%s", out)
		}
		anotherPodsVethRefused(t, c, ns, pod(t, c, ns, "r3").Spec.NodeName)
	})
}

// routersAcrossNodes runs twoRouters in namespace ns, r1 and r2 on two
// nodes (the Topologies first, then one pod per node, the other node
// cordoned while each is scheduled), linked by VXLAN and pinging.
func routersAcrossNodes(t testing.TB, c *kubecluster.Cluster, ns string) {
	t.Helper()
	nodes := c.Nodes()
	applyManifest(t, c, ns, strings.SplitN(twoRouters, "- apiVersion: v1\n", 2)[0])
	kubectl(t, c, "cordon", nodes[1].Name)
	applyManifest(t, c, ns, routerPod("r1"))
	waitRunning(t, c, ns, "r1")
	kubectl(t, c, "uncordon", nodes[1].Name)
	kubectl(t, c, "cordon", nodes[0].Name)
	applyManifest(t, c, ns, routerPod("r2"))
	waitRunning(t, c, ns, "r2")
	kubectl(t, c, "uncordon", nodes[0].Name)
	r1, r2 := pod(t, c, ns, "r1"), pod(t, c, ns, "r2")
	if r1.Spec.NodeName == r2.Spec.NodeName {
		t.Fatalf("r1 and r2 both on %s: want two nodes", r1.Spec.NodeName)
	}
	ping(t, c, ns, "r1", "12.12.12.2")
	ping(t, c, ns, "r2", "12.12.12.1")
	waitLinkKind(t, c, ns, "r1", v1beta1.LinkKindVXLAN)
	waitLinkKind(t, c, ns, "r2", v1beta1.LinkKindVXLAN)
}

// captureThroughAPIServer runs kubectl meshnet capture as users of the
// namespace ns (which holds twoRouters on two nodes) with client-certificate
// kubeconfigs: the API server authenticates them and proxies to meshnet's
// aggregated API, which relays the capture from r1's node. An editor's
// capture of a ping is decoded by tshark; a viewer is refused by the API
// server, and a missing interface is named, with nothing captured.
func captureThroughAPIServer(t *testing.T, c *kubecluster.Cluster, ns, editor, viewer string) {
	ctx := context.Background()
	dir := t.TempDir()
	run := func(kubeconfig string, args ...string) (int, string) {
		var stderr strings.Builder
		code := meshnetctl.Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns, "capture"}, args...), io.Discard, &stderr)
		return code, stderr.String()
	}

	t.Run("EditorCapturesAPing", func(t *testing.T) {
		file := filepath.Join(dir, "r1-eth1.pcapng")
		var code int
		var stderr string
		pingDuring(ctx, c, ns, func() { code, stderr = run(editor, "r1", "eth1", "-c", "10", "--duration", "60s", "-w", file) })
		if code != 0 {
			t.Fatalf("kubectl meshnet capture r1 eth1 as an editor: exit %d\n%s", code, stderr)
		}
		out, err := exec.Command("tshark", "-r", file, "-Y", "icmp", "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "icmp.type").CombinedOutput()
		if err != nil {
			t.Fatalf("tshark -r %s: %v\n%s", file, err, out)
		}
		if !strings.Contains(string(out), "12.12.12.1\t12.12.12.2\t8") || !strings.Contains(string(out), "12.12.12.2\t12.12.12.1\t0") {
			t.Errorf("tshark's ICMP of the capture:\n%s\nwant echo requests 12.12.12.1 -> 12.12.12.2 and replies back", out)
		}
		t.Logf("captured through the API server:\n%s%s", out, stderr)
	})
	t.Run("EditorFiltersEchoRequests", func(t *testing.T) {
		// A capture filter, compiled by meshnetd and run by the kernel of
		// r1's node: the echo requests, not the replies.
		file := filepath.Join(dir, "requests.pcapng")
		var code int
		var stderr string
		pingDuring(ctx, c, ns, func() {
			code, stderr = run(editor, "r1", "eth1", "-f", "icmp[icmptype] = icmp-echo", "-c", "4", "--duration", "60s", "-w", file)
		})
		if code != 0 {
			t.Fatalf("kubectl meshnet capture r1 eth1 -f ... as an editor: exit %d\n%s", code, stderr)
		}
		out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "icmp.type").Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", file, err)
		}
		if got, want := strings.TrimSpace(string(out)), strings.TrimSpace(strings.Repeat("12.12.12.1\t12.12.12.2\t8\n", 4)); got != want {
			t.Errorf("tshark reads the filtered capture as:\n%s\nwant 4 echo requests 12.12.12.1 -> 12.12.12.2 and nothing else", got)
		}
	})
	t.Run("EditorCapturesBothEnds", func(t *testing.T) {
		// r1's eth1 on one node and r2's on the other, in one file: the
		// same echo requests leave one end and reach the other.
		file := filepath.Join(dir, "both.pcapng")
		var code int
		var stderr string
		pingDuring(ctx, c, ns, func() {
			code, stderr = run(editor, "r1", "eth1", "--both", "-f", "icmp", "-c", "4", "--duration", "60s", "-w", file)
		})
		if code != 0 {
			t.Fatalf("kubectl meshnet capture r1 eth1 --both as an editor: exit %d\n%s", code, stderr)
		}
		out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "frame.interface_name", "-e", "ip.src", "-e", "icmp.type").Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", file, err)
		}
		count := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			count[l]++
		}
		for _, end := range []string{"r1/eth1", "r2/eth1"} {
			if count[end+"\t12.12.12.1\t8"] < 1 || count[end+"\t12.12.12.2\t0"] < 1 {
				t.Errorf("tshark reads the capture of both ends as:\n%s\nwant echo requests and replies on %s", out, end)
			}
		}
		t.Logf("$ kubectl meshnet capture r1 eth1 --both -f icmp -c 4 -w both.pcapng; tshark -r both.pcapng -T fields -e frame.interface_name -e ip.src -e icmp.type\n%s%s", out, stderr)
	})
	// The API server cuts a request off at its --request-timeout (60s)
	// unless it is long-running, as a proxy subresource is.
	t.Run("OutlivesTheRequestTimeout", func(t *testing.T) {
		file := filepath.Join(dir, "long.pcapng")
		pinging, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			_, _ = c.Kubectl(pinging, "-n", ns, "exec", "r1", "--", "ping", "-c", "70", "-i", "1", "12.12.12.2")
		}()
		code, stderr := run(editor, "r1", "eth1", "--duration", "65s", "-w", file)
		if code != 0 {
			t.Fatalf("a 65s capture: exit %d\n%s", code, stderr)
		}
		out, err := exec.Command("tshark", "-r", file, "-Y", "icmp", "-T", "fields", "-e", "frame.time_relative").Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", file, err)
		}
		times := strings.Fields(string(out))
		if len(times) == 0 {
			t.Fatal("the 65s capture has no ICMP packet")
		}
		if last, err := strconv.ParseFloat(times[len(times)-1], 64); err != nil || last < 61 {
			t.Errorf("the 65s capture's last ICMP packet is at %ss, want past the API server's 60s request timeout", times[len(times)-1])
		}
	})
	t.Run("ViewerReadsCounters", func(t *testing.T) {
		var stdout, stderr strings.Builder
		code := meshnetctl.Main([]string{"--kubeconfig", viewer, "-n", ns, "links", "r1", "--counters"}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if code != 0 || len(lines) != 2 {
			t.Fatalf("links r1 --counters as a viewer: exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
		head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
		col := slices.Index(head, "RX-PACKETS")
		if col < 0 || len(row) != len(head) || row[1] != "eth1" {
			t.Fatalf("links r1 --counters:\n%s\nwant r1's eth1 with an RX-PACKETS column", stdout.String())
		}
		// The pings above crossed eth1: the kernel counted their replies.
		if n, err := strconv.Atoi(row[col]); err != nil || n < 4 {
			t.Errorf("links r1 --counters: RX-PACKETS %q, want at least the 4 echo replies captured above\n%s", row[col], stdout.String())
		}
		t.Logf("$ kubectl meshnet links r1 -n %s --counters\n%s", ns, stdout.String())
	})
	t.Run("ViewerWatchesTheKernel", func(t *testing.T) {
		// kubectl meshnet watch's default source: each node's meshnetd,
		// through the aggregated API. r1 is on one node and r2 on the
		// other, so the relay watches both.
		out := filepath.Join(dir, "watch.out")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(filepath.Join(os.Getenv("MESHNET_NODE_BIN"), "kubectl-meshnet"), "watch", "--kubeconfig", viewer, "-n", ns)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		printed := func() string { data, _ := os.ReadFile(out); return string(data) }
		waitPrinted := func(what string, re *regexp.Regexp) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for !re.MatchString(printed()) {
				if time.Now().After(deadline) {
					t.Fatalf("watch did not print %s within 30s:\n%s", what, printed())
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		// The listing first: every link of both pods as the kernel has it.
		waitPrinted("r1's and r2's eth1", regexp.MustCompile(`(?s)r[12] +eth1 +wired: vxlan, up, carrier yes.*r[12] +eth1 +wired: vxlan, up, carrier yes`))
		for _, state := range []string{"down", "up"} {
			kubectlMeshnet(t, editor, ns, state, "r1", "eth1")
		}
		// Both ends, each from its own node, down and up again.
		for _, pod := range []string{"r1", "r2"} {
			waitPrinted(pod+" going down and up", regexp.MustCompile(`(?s)`+pod+` +eth1 +state up -> down.*`+pod+` +eth1 +state down -> up`))
		}
		// A fault's window: its edges beside the kernel's changes.
		kubectlMeshnet(t, editor, ns, "down", "r1", "eth1", "--for", "3s")
		waitPrinted("the fault's window", regexp.MustCompile(`(?s)r1 +eth1 +held by LinkFault r1-eth1-\S+ \(window 1, until [0-9:]+\).*r1 +eth1 +let go by LinkFault r1-eth1-\S+ \(window 1 ended; completed\)`))
		t.Logf("$ kubectl meshnet watch -n %s (as a viewer)\n%s", ns, printed())
	})
	t.Run("ViewerIsRefused", func(t *testing.T) {
		file := filepath.Join(dir, "viewer.pcapng")
		code, stderr := run(viewer, "r1", "eth1", "-c", "1", "-w", file)
		if code != 1 || !strings.Contains(stderr, "Error from server (Forbidden)") || !strings.Contains(stderr, "pods/proxy") {
			t.Errorf("capture as a viewer: exit %d, %q; want 1 and the API server's Forbidden for pods/proxy", code, stderr)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("a refused capture left %s behind (%v)", file, err)
		}
		t.Logf("as a viewer: %s", stderr)
	})
	t.Run("UnknownInterfaceIsNamed", func(t *testing.T) {
		code, stderr := run(editor, "r1", "eth9", "-c", "1", "-w", filepath.Join(dir, "eth9.pcapng"))
		if code != 1 || !strings.Contains(stderr, "Error from server (NotFound)") || !strings.Contains(stderr, "eth9") {
			t.Errorf("capture of r1 eth9: exit %d, %q; want 1, NotFound naming eth9", code, stderr)
		}
		t.Logf("of eth9: %s", stderr)
	})
}

// pingDuring has r1 ping r2 (12.12.12.2) over and over while capture
// runs.
func pingDuring(ctx context.Context, c *kubecluster.Cluster, ns string, capture func()) {
	pinging, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pinging.Err() == nil {
			_, _ = c.Kubectl(pinging, "-n", ns, "exec", "r1", "--", "ping", "-c", "2", "-W", "1", "12.12.12.2")
		}
	}()
	capture()
	stop()
	<-done
}

// runtimeChangesThroughAPIServer runs kubectl meshnet down and up with
// --runtime as users of ns (twoRouters on two nodes): an editor's cable
// pull reaches both ends' kernels and not the Topology; a viewer is
// refused by the API server, and a kernel without sch_netem is named.
// Routes are set as the docs show, with kubectl replace --raw.
func runtimeChangesThroughAPIServer(t *testing.T, c *kubecluster.Cluster, ns, editor, viewer string) {
	run := func(kubeconfig string, args ...string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := meshnetctl.Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	topo := func() *v1beta1.Topology {
		var tp v1beta1.Topology
		if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "r1"}, &tp); err != nil {
			t.Fatal(err)
		}
		return &tp
	}
	t.Run("ViewerIsRefused", func(t *testing.T) {
		code, _, stderr := run(viewer, "down", "r1", "eth1", "--runtime")
		if code != 1 || !strings.Contains(stderr, "Error from server (Forbidden)") || !strings.Contains(stderr, "pods/proxy") {
			t.Errorf("down --runtime as a viewer: exit %d, %q; want 1 and the API server's Forbidden for pods/proxy", code, stderr)
		}
		t.Logf("$ kubectl meshnet down r1 eth1 --runtime (as a viewer)\n%s", stderr)
		waitOperstate(t, c, ns, "r1", "eth1", "up")
	})
	// The two lives of a runtime change, as the command says them.
	pull := func(t *testing.T, note string) string {
		t.Helper()
		code, stdout, stderr := run(editor, "down", "r1", "eth1", "--runtime")
		t.Logf("$ kubectl meshnet down r1 eth1 --runtime (as an editor)\n%s%s", stdout, stderr)
		if code != 0 || !strings.Contains(stdout, "link r1/eth1 state set to down in the kernel only; "+note) {
			t.Fatalf("down --runtime as an editor: exit %d; want the kernel change said, and %q", code, note)
		}
		if row := strings.Fields(lastLine(stdout)); len(row) < 5 || row[0] != "r1" || row[4] != "down" {
			t.Errorf("down --runtime printed %q, want r1's eth1 read back down", lastLine(stdout))
		}
		return stdout
	}
	t.Run("FlapOfAStateTheTopologySets", func(t *testing.T) {
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json", "-p", `[{"op":"add","path":"/spec/links/0/state","value":"up"}]`)
		waitManaged(t, c, ns, "r1", true)
		gen := topo().Generation
		start := time.Now()
		pull(t, "spec.links[0].state is up, which meshnet-controller puts back at its next pass over the pod (its --resync)")
		// The controller's next pass (its resync, 30s as deploy/ installs
		// it) puts the Topology's up back, at both ends.
		for _, p := range []string{"r1", "r2"} {
			waitOperstateWithin(t, c, ns, p, "eth1", "up", 45*time.Second)
		}
		t.Logf("up again %v after the runtime cable pull", time.Since(start).Round(time.Second))
		if g := topo().Generation; g != gen {
			t.Errorf("r1's generation %d -> %d: a runtime change edited the Topology", gen, g)
		}
	})
	t.Run("PullOfAStateTheTopologyLeaves", func(t *testing.T) {
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json", "-p", `[{"op":"remove","path":"/spec/links/0/state"}]`)
		waitManaged(t, c, ns, "r1", false)
		gen := topo().Generation
		pull(t, "spec.links[0].state is not set, so the kernel keeps it until it is changed again (kubectl meshnet up r1 eth1 --runtime) or the pod restarts")
		// The far end, on the other node, goes with it.
		waitOperstate(t, c, ns, "r2", "eth1", "down")
		if tp := topo(); tp.Generation != gen || tp.Spec.Links[0].State != nil {
			t.Errorf("r1's Topology: generation %d -> %d, spec.links[0].state %v; want it untouched", gen, tp.Generation, tp.Spec.Links[0].State)
		}
		code, stdout, stderr := run(editor, "up", "r1", "eth1", "--runtime")
		t.Logf("$ kubectl meshnet up r1 eth1 --runtime (as an editor)\n%s%s", stdout, stderr)
		if code != 0 {
			t.Fatalf("up --runtime as an editor: exit %d", code)
		}
		for _, p := range []string{"r1", "r2"} {
			waitOperstate(t, c, ns, p, "eth1", "up")
		}
		ping(t, c, ns, "r1", "12.12.12.2")
	})
	t.Run("RoutesWithKubectlReplaceRaw", func(t *testing.T) {
		// As docs/kubectl-meshnet.md shows it: meshnetd's SetRoutes body,
		// PUT by kubectl through the API server as the editor.
		file := filepath.Join(t.TempDir(), "routes.json")
		if err := os.WriteFile(file, []byte(`{"routes":[{"dst":"192.0.2.0/24","gw":"12.12.12.2"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		path := relayapi.ProxyPath(ns, "r1", "routes")
		out, err := c.Kubectl(context.Background(), "--kubeconfig", editor, "replace", "--raw", path, "-f", file)
		if err != nil {
			t.Fatalf("kubectl replace --raw %s as an editor: %v", path, err)
		}
		t.Logf("$ kubectl replace --raw %s -f routes.json\n%s", path, out)
		if got := kubectl(t, c, "-n", ns, "exec", "r1", "--", "ip", "route", "show", "192.0.2.0/24"); !strings.Contains(got, "via 12.12.12.2") {
			t.Errorf("r1's route to 192.0.2.0/24 is %q, want via 12.12.12.2", got)
		}
		if err := os.WriteFile(file, []byte(`{"routes":[]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kubectl(context.Background(), "--kubeconfig", editor, "replace", "--raw", path, "-f", file); err != nil {
			t.Fatalf("kubectl replace --raw %s with no routes: %v", path, err)
		}
		if got := kubectl(t, c, "-n", ns, "exec", "r1", "--", "ip", "route", "show", "192.0.2.0/24"); got != "" {
			t.Errorf("r1 still routes 192.0.2.0/24 after its routes were set to none: %q", got)
		}
	})
	t.Run("KernelWithoutNetemIsNamed", func(t *testing.T) {
		code, _, stderr := run(editor, "netem", "r1", "eth1", "--delay", "50ms", "--runtime")
		if code != 1 || !strings.Contains(stderr, "Error from server (Conflict)") || !strings.Contains(stderr, "sch_netem") {
			t.Errorf("netem --runtime on a kernel without sch_netem: exit %d, %q; want 1, Conflict naming sch_netem", code, stderr)
		}
		t.Logf("$ kubectl meshnet netem r1 eth1 --delay 50ms --runtime\n%s", stderr)
	})
}

// lastLine is s's last line.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

// waitAPIServiceAvailable waits until the API server reports the
// APIService Available: it reaches the relay and reads its discovery.
func waitAPIServiceAvailable(t testing.TB, c *kubecluster.Cluster, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := c.Kubectl(context.Background(), "get", "apiservice", name, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
		if err == nil && strings.HasPrefix(out, "True") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("APIService %s not Available: %s %v", name, out, err)
		}
		time.Sleep(time.Second)
	}
}

// userKubeconfig writes the kubeconfig of a new user (a client certificate)
// bound to ClusterRole role in namespace ns, and returns its path.
func userKubeconfig(t testing.TB, c *kubecluster.Cluster, ns, role string) string {
	t.Helper()
	name := ns + "-" + role
	u, err := c.ControlPlane.Env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = c.ControlPlane.Config.Host
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "create", "rolebinding", name, "--clusterrole", role, "--user", name)
	return path
}

// macvlanRouter is meshnet-cni's macvlan form (tests/macvlan.yml there): a
// link to peer_pod localhost is a macvlan on the node's NIC named peer_intf.
const macvlanRouter = `apiVersion: v1
kind: List
items:
- apiVersion: networkop.co.uk/v1beta1
  kind: Topology
  metadata:
    name: r3
  spec:
    links:
    - uid: 2
      peer_pod: localhost
      local_intf: eth2
      local_ip: 172.17.0.199/16
      peer_intf: eth0
- apiVersion: v1
  kind: Pod
  metadata:
    name: r3
  spec:
    containers:
    - image: alpine
      name: pod
      command: ["/bin/sh", "-c", "sleep 2000000000000"]
`

// twoRouters is a manifest in meshnet-cni's own test form (tests/2node.yml
// there): Topology and Pod objects in one List, pods of image alpine with
// the default pull policy, a sleeping shell as command.
const twoRouters = `apiVersion: v1
kind: List
items:
- apiVersion: networkop.co.uk/v1beta1
  kind: Topology
  metadata:
    name: r1
  spec:
    links:
    - uid: 1
      peer_pod: r2
      local_intf: eth1
      local_ip: 12.12.12.1/24
      peer_intf: eth1
      peer_ip: 12.12.12.2/24
- apiVersion: networkop.co.uk/v1beta1
  kind: Topology
  metadata:
    name: r2
  spec:
    links:
    - uid: 1
      peer_pod: r1
      local_intf: eth1
      local_ip: 12.12.12.2/24
      peer_intf: eth1
      peer_ip: 12.12.12.1/24
- apiVersion: v1
  kind: Pod
  metadata:
    name: r1
  spec:
    containers:
    - image: alpine
      name: pod
      command: ["/bin/sh", "-c", "sleep 2000000000000"]
- apiVersion: v1
  kind: Pod
  metadata:
    name: r2
  spec:
    containers:
    - image: alpine
      name: pod
      command: ["/bin/sh", "-c", "sleep 2000000000000"]
`

// routerPod is the Pod of twoRouters named name, alone.
func routerPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - image: alpine
    name: pod
    command: ["/bin/sh", "-c", "sleep 2000000000000"]
`, name)
}

// waitLinkKind waits until the status of the Topology name (written by
// meshnet-controller from what meshnetd read in the kernel) reports its
// first link up, with carrier, of kind.
func waitLinkKind(t testing.TB, c *kubecluster.Cluster, ns, name string, kind v1beta1.LinkKind) {
	t.Helper()
	var topo v1beta1.Topology
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &topo)
		if err == nil && len(topo.Status.Links) > 0 {
			l := topo.Status.Links[0]
			if l.Kind == kind && l.State == v1beta1.LinkUp && l.Carrier {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology %s/%s: status %+v (error %v), want its first link %s, up, with carrier", ns, name, topo.Status, err, kind)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func kubectl(t testing.TB, c *kubecluster.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyManifest applies a manifest in namespace ns, creating ns.
// kubectlMeshnet runs kubectl meshnet as the user of kubeconfig in ns,
// logs the command and what it printed, and fails the test when it exits
// non-zero; it returns what it printed on stdout.
func kubectlMeshnet(t testing.TB, kubeconfig, ns string, args ...string) string {
	t.Helper()
	// As cmd/kubectl-meshnet does: the client logs nothing a user sees.
	ctrllog.SetLogger(logr.Discard())
	var stdout, stderr strings.Builder
	code := meshnetctl.Main(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), &stdout, &stderr)
	t.Logf("$ kubectl meshnet %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("kubectl meshnet %s: exit %d", strings.Join(args, " "), code)
	}
	return stdout.String()
}

func applyManifest(t testing.TB, c *kubecluster.Cluster, ns, manifest string) {
	t.Helper()
	if err := c.Namespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "apply", "-f", f)
}

func waitRunning(t testing.TB, c *kubecluster.Cluster, ns string, pods ...string) {
	t.Helper()
	args := append([]string{"-n", ns, "wait", "--for=condition=Ready", "--timeout=180s"}, prefixed("pod/", pods)...)
	if _, err := c.Kubectl(context.Background(), args...); err != nil {
		out, _ := c.Kubectl(context.Background(), "-n", ns, "describe", "pods")
		t.Fatalf("%v\n%s", err, out)
	}
}

func ping(t testing.TB, c *kubecluster.Cluster, ns, pod, addr string) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "ping", "-c", "3", "-W", "2", addr)
	if err != nil {
		t.Fatalf("ping %s from %s: %v", addr, pod, err)
	}
	if !strings.Contains(out, " 0% packet loss") {
		t.Fatalf("ping %s from %s:\n%s", addr, pod, out)
	}
}

func pod(t testing.TB, c *kubecluster.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func podsOf(t testing.TB, c *kubecluster.Cluster, ns, selector string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func prefixed(prefix string, s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = prefix + v
	}
	return out
}

// TestNodeLinksThroughPodLifecycle follows links through what happens to
// pods and nodes on a real cluster: a pod scheduled while its node has no
// meshnetd, kubectl delete pod, a StatefulSet's replacement pod, a cable
// pulled with kubectl patch, a rollout of meshnetd under a running ping, and
// a node whose kubelet and containerd restart.
func TestNodeLinksThroughPodLifecycle(t *testing.T) {
	ctx := context.Background()
	c := kubeclustertest.New(t, 2)
	if err := c.Install(ctx, overlay); err != nil {
		t.Fatalf("install meshnet: %v", err)
	}
	nodes := c.Nodes()

	t.Run("PodWaitsForMeshnetd", func(t *testing.T) {
		ns := "early"
		// No meshnetd on any node: its DaemonSet selects no node. The
		// conflist stays (the DaemonSet still exists).
		kubectl(t, c, "-n", "meshnet", "patch", "daemonset", "meshnetd", "--type=merge",
			"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"meshnet.test/none":"true"}}}}}`)
		waitNoPods(t, c, "meshnet", "app.kubernetes.io/name=meshnetd")
		kubectl(t, c, "cordon", nodes[1].Name)
		applyManifest(t, c, ns, twoRouters)
		time.Sleep(5 * time.Second)
		for _, name := range []string{"r1", "r2"} {
			if p := pod(t, c, ns, name); p.Status.Phase == corev1.PodRunning {
				t.Fatalf("%s is Running without meshnetd on its node", name)
			}
		}
		events := kubectl(t, c, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=r1")
		if !strings.Contains(events, "meshnetd") {
			t.Errorf("r1's events do not say that meshnetd is missing:\n%s", events)
		}
		kubectl(t, c, "-n", "meshnet", "patch", "daemonset", "meshnetd", "--type=json",
			"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
		kubectl(t, c, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=120s")
		waitRunning(t, c, ns, "r1", "r2")
		kubectl(t, c, "uncordon", nodes[1].Name)
		ping(t, c, ns, "r1", "12.12.12.2")
	})

	// A VXLAN link between r1 on node-1 and r2 on node-2, for what follows.
	ns := "life"
	applyManifest(t, c, ns, strings.SplitN(twoRouters, "- apiVersion: v1\n", 2)[0])
	schedule(t, c, ns, routerPod("r1"), nodes[0].Name)
	schedule(t, c, ns, routerPod("r2"), nodes[1].Name)
	waitRunning(t, c, ns, "r1", "r2")
	ping(t, c, ns, "r1", "12.12.12.2")

	t.Run("CablePullWithKubectl", func(t *testing.T) {
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json",
			"-p", `[{"op":"add","path":"/spec/links/0/state","value":"down"}]`)
		for _, p := range []string{"r1", "r2"} {
			waitOperstate(t, c, ns, p, "eth1", "down")
		}
		waitStatus(t, c, ns, "r1", func(l v1beta1.LinkStatus) bool { return l.State == v1beta1.LinkDown })
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json",
			"-p", `[{"op":"replace","path":"/spec/links/0/state","value":"up"}]`)
		for _, p := range []string{"r1", "r2"} {
			waitOperstate(t, c, ns, p, "eth1", "up")
		}
		waitStatus(t, c, ns, "r1", func(l v1beta1.LinkStatus) bool { return l.State == v1beta1.LinkUp && l.Carrier })
		ping(t, c, ns, "r1", "12.12.12.2")
	})

	t.Run("CablePullWithGrpcurl", func(t *testing.T) {
		// As the guide has users do it: an operator token, grpcurl at the
		// node of the pod over TLS with meshnet's CA, server reflection.
		// The node network is captured meanwhile: the operator's call, the
		// daemons' calls to each other and the controller's carry tokens,
		// and none may cross it in clear.
		grpcurl := filepath.Join(os.Getenv("MESHNET_NODE_BIN"), "grpcurl")
		token := strings.TrimSpace(kubectl(t, c, "-n", "meshnet", "create", "token", "meshnet-operator", "--audience", "meshnetd"))
		caFile := filepath.Join(t.TempDir(), "meshnet-ca.crt")
		if err := os.WriteFile(caFile, []byte(kubectl(t, c, "-n", "meshnet", "get", "configmap", "meshnet-ca", "-o", `jsonpath={.data.ca\.crt}`)), 0o644); err != nil {
			t.Fatal(err)
		}
		node := pod(t, c, ns, "r1").Status.HostIP
		stopCapture := captureNodeNetwork(t, c)
		// A state the Topology sets wins at the next pass (the Topology is
		// the truth); with none set, a runtime change stays.
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json", "-p", `[{"op":"remove","path":"/spec/links/0/state"}]`)
		waitManaged(t, c, ns, "r1", false)
		set := func(state string) {
			t.Helper()
			out, err := exec.Command(grpcurl, "-cacert", caFile, "-H", "authorization: Bearer "+token,
				"-d", fmt.Sprintf(`{"namespace":%q,"pod":"r1","interface":"eth1","state":%q}`, ns, state),
				node+":51111", "meshnet.v1.LinkService/SetLinkState").CombinedOutput()
			if err != nil {
				t.Fatalf("grpcurl SetLinkState %s: %v\n%s", state, err, out)
			}
		}
		set("LINK_STATE_DOWN")
		for _, p := range []string{"r1", "r2"} {
			waitOperstate(t, c, ns, p, "eth1", "down")
		}
		// The status says so at the latest at the controller's resync (30s).
		waitStatusWithin(t, c, ns, "r1", 45*time.Second, func(l v1beta1.LinkStatus) bool { return l.State == v1beta1.LinkDown })
		set("LINK_STATE_UP")
		for _, p := range []string{"r1", "r2"} {
			waitOperstate(t, c, ns, p, "eth1", "up")
		}
		ping(t, c, ns, "r1", "12.12.12.2")
		// REST with curl, as the docs show it; and the same URL over plain
		// HTTP with a canary token: the user's own mistake, which meshnetd
		// refuses, and which proves that the capture finds a token in clear.
		rest := fmt.Sprintf("%s:51112/v1/namespaces/%s/pods/r1/links", node, ns)
		if out, err := exec.Command("curl", "-sS", "--fail", "--cacert", caFile, "-H", "authorization: Bearer "+token, "https://"+rest).CombinedOutput(); err != nil || !strings.Contains(string(out), "eth1") {
			t.Errorf("curl --cacert https://%s: %v\n%s", rest, err, out)
		}
		const canary = "eyJhbGciOiJjYW5hcnkifQ.canary"
		out, _ := exec.Command("curl", "-sS", "-H", "authorization: Bearer "+canary, "http://"+rest).CombinedOutput()
		if !strings.Contains(string(out), "HTTP request to an HTTPS server") {
			t.Errorf("curl http://%s: %s, want it refused as plain HTTP to an HTTPS server", rest, out)
		}
		checkNoTokenInClear(t, stopCapture(), canary, token, node)
	})

	t.Run("RoutesWithKubectl", func(t *testing.T) {
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=merge",
			"-p", `{"spec":{"routes":[{"dst":"192.0.2.0/24","gw":"12.12.12.2"}]}}`)
		waitRoute(t, c, ns, "r1", "192.0.2.0/24 via 12.12.12.2", true)
		kubectl(t, c, "-n", ns, "patch", "topology", "r1", "--type=json", "-p", `[{"op":"remove","path":"/spec/routes"}]`)
		waitRoute(t, c, ns, "r1", "192.0.2.0/24 via 12.12.12.2", false)
	})

	t.Run("RolloutRestartUnderPing", func(t *testing.T) {
		before := ifindex(t, c, ns, "r1", "eth1") + "/" + ifindex(t, c, ns, "r2", "eth1")
		done := make(chan string, 1)
		go func() {
			out, _ := c.Kubectl(ctx, "-n", ns, "exec", "r1", "--", "ping", "-c", "100", "-i", "0.2", "-W", "1", "12.12.12.2")
			done <- out
		}()
		time.Sleep(2 * time.Second)
		kubectl(t, c, "-n", "meshnet", "rollout", "restart", "daemonset/meshnetd")
		kubectl(t, c, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=120s")
		out := <-done
		sent, received := pingCounts(t, out)
		t.Logf("ping across the rollout: %d sent, %d received", sent, received)
		if sent-received > 5 {
			t.Errorf("ping lost %d of %d packets across the rollout:\n%s", sent-received, sent, out)
		}
		if after := ifindex(t, c, ns, "r1", "eth1") + "/" + ifindex(t, c, ns, "r2", "eth1"); after != before {
			t.Errorf("eth1 was re-wired by the rollout: ifindexes %s before, %s after", before, after)
		}
	})

	t.Run("FaultsUnderPing", func(t *testing.T) { faultsUnderPing(t, c, ns) })

	t.Run("KubeletContainerdAndKubeProxyKilled", func(t *testing.T) {
		// SIGKILL, as a crash or the OOM killer does: the node brings them
		// back, as systemd does on a real node, and nothing of the pods'
		// links changes.
		before := ifindex(t, c, ns, "r2", "eth1")
		n := nodes[1]
		components := []string{"kubelet", "containerd", "kube-proxy"}
		killed := map[string]int{}
		for _, comp := range components {
			pid := n.PID(comp)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %s's %s (pid %d): %v", n.Name, comp, pid, err)
			}
			killed[comp] = pid
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, comp := range components {
			for n.PID(comp) == killed[comp] || n.PID(comp) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s's %s (pid %d) killed, not running again within 30s", n.Name, comp, killed[comp])
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%s's %s killed (pid %d), running again (pid %d)", n.Name, comp, killed[comp], n.PID(comp))
		}
		waitRunning(t, c, ns, "r2")
		kubectl(t, c, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=120s")
		// The restarted kubelet serves exec once it knows its pods again.
		var after string
		deadline = time.Now().Add(60 * time.Second)
		for {
			out, err := c.Kubectl(ctx, "-n", ns, "exec", "r2", "--", "cat", "/sys/class/net/eth1/ifindex")
			if after = strings.TrimSpace(out); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("exec in r2 after the runtime restart: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if after != before {
			t.Errorf("r2's eth1 changed across the node's restarts: ifindex %s before, %s after", before, after)
		}
		ping(t, c, ns, "r2", "12.12.12.1")
	})

	t.Run("DeletePodRemovesBothEnds", func(t *testing.T) {
		kubectl(t, c, "-n", ns, "delete", "pod", "r1", "--grace-period=1", "--wait=true", "--timeout=60s")
		// r1's node-2 peer loses its VXLAN end: meshnetd on node-1 ran DEL
		// through containerd and told node-2's meshnetd.
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := c.Kubectl(ctx, "-n", ns, "exec", "r2", "--", "ip", "link", "show", "eth1")
			if err != nil && strings.Contains(out, "eth1") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("r2's eth1 (the remote VXLAN end of r1's link) still there 30s after r1 was deleted:\n%s", out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("StatefulSetReplacementIsWired", func(t *testing.T) {
		ns := "sts"
		applyManifest(t, c, ns, statefulSets)
		waitRunning(t, c, ns, "r1-0", "r2-0")
		ping(t, c, ns, "r1-0", "12.12.12.2")
		old := pod(t, c, ns, "r1-0").UID
		kubectl(t, c, "-n", ns, "delete", "pod", "r1-0", "--grace-period=1", "--wait=true", "--timeout=60s")
		deadline := time.Now().Add(60 * time.Second)
		for {
			var p corev1.Pod
			err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r1-0"}, &p)
			if err == nil && p.UID != old {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the StatefulSet did not replace r1-0 within 60s")
			}
			time.Sleep(200 * time.Millisecond)
		}
		waitRunning(t, c, ns, "r1-0")
		ping(t, c, ns, "r1-0", "12.12.12.2")
		ping(t, c, ns, "r2-0", "12.12.12.1")
	})

	t.Run("GitOpsOrderPodsFirst", func(t *testing.T) {
		// As Helm and Argo CD apply a lab: the workloads first, their
		// custom resources last. The pods start with no links; each
		// Topology's first pass wires them. At the moment a status says
		// Ready, its link pings.
		ns := "gitops"
		docs := strings.Split(statefulSets, "---\n")
		applyManifest(t, c, ns, strings.Join(docs[2:], "---\n"))
		waitRunning(t, c, ns, "r1-0", "r2-0")
		start := time.Now()
		applyManifest(t, c, ns, strings.Join(docs[:2], "---\n"))
		for _, name := range []string{"r1-0", "r2-0"} {
			eventually(t, 30*time.Second, "Topology "+name+" Ready", func() (bool, string) {
				var topo v1beta1.Topology
				err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &topo)
				ready := meta.FindStatusCondition(topo.Status.Conditions, v1beta1.ConditionReady)
				return err == nil && ready != nil && ready.Status == metav1.ConditionTrue, fmt.Sprintf("%v %+v", err, topo.Status)
			})
		}
		t.Logf("both Topologies Ready %v after they were applied to running pods", time.Since(start).Round(100*time.Millisecond))
		ping(t, c, ns, "r1-0", "12.12.12.2")
		ping(t, c, ns, "r2-0", "12.12.12.1")
	})

	t.Run("WidePodsSurviveMeshnetdKills", func(t *testing.T) { widePodsSurviveKills(t, c, "chaos", 1024, false) })
}

// statefulSets is meshnet-cni's StatefulSet form (tests/2node-sts.yml
// there): Topologies named like the StatefulSets' pods.
const statefulSets = `apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r1-0
spec:
  links:
  - uid: 1
    peer_pod: r2-0
    local_intf: eth1
    local_ip: 12.12.12.1/24
    peer_intf: eth1
    peer_ip: 12.12.12.2/24
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r2-0
spec:
  links:
  - uid: 1
    peer_pod: r1-0
    local_intf: eth1
    local_ip: 12.12.12.2/24
    peer_intf: eth1
    peer_ip: 12.12.12.1/24
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: r1
spec:
  selector:
    matchLabels:
      topo: r1
  replicas: 1
  serviceName: r1
  template:
    metadata:
      labels:
        topo: r1
    spec:
      containers:
      - image: alpine
        name: pod
        command: ["/bin/sh", "-c", "sleep 2000000000000"]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: r2
spec:
  selector:
    matchLabels:
      topo: r2
  replicas: 1
  serviceName: r2
  template:
    metadata:
      labels:
        topo: r2
    spec:
      containers:
      - image: alpine
        name: pod
        command: ["/bin/sh", "-c", "sleep 2000000000000"]
`

// schedule applies a one-pod manifest with every node but node cordoned.
func schedule(t *testing.T, c *kubecluster.Cluster, ns, manifest, node string) {
	t.Helper()
	var cordoned []string
	for _, n := range c.Nodes() {
		if n.Name != node {
			kubectl(t, c, "cordon", n.Name)
			cordoned = append(cordoned, n.Name)
		}
	}
	applyManifest(t, c, ns, manifest)
	deadline := time.Now().Add(30 * time.Second)
	name := strings.TrimSpace(strings.SplitN(strings.SplitN(manifest, "name: ", 2)[1], "\n", 2)[0])
	for pod(t, c, ns, name).Spec.NodeName == "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s not scheduled within 30s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range cordoned {
		kubectl(t, c, "uncordon", n)
	}
}

func waitNoPods(t *testing.T, c *kubecluster.Cluster, ns, selector string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for len(podsOf(t, c, ns, selector)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pods %s still in %s after 90s", selector, ns)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitOperstate waits until intf in the pod has the operstate want, read
// from the kernel inside the container.
// waitManaged waits until the Topology's status says whether the
// controller manages its first link's state (it does while the spec sets
// it, and until a pass after the spec dropped it).
func waitManaged(t *testing.T, c *kubecluster.Cluster, ns, name string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tp v1beta1.Topology
		err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &tp)
		if err == nil && tp.Status.ObservedGeneration == tp.Generation && len(tp.Spec.Links) > 0 &&
			slices.Contains(tp.LinkManagedFields(tp.Spec.Links[0].UID), "state") == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's status: state managed is not %v after 30s (%v)", name, want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitOperstate(t testing.TB, c *kubecluster.Cluster, ns, pod, intf, want string) {
	t.Helper()
	waitOperstateWithin(t, c, ns, pod, intf, want, 30*time.Second)
}

func waitOperstateWithin(t testing.TB, c *kubecluster.Cluster, ns, pod, intf, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, err := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "cat", "/sys/class/net/"+intf+"/operstate")
		got := strings.TrimSpace(out)
		// A VXLAN device that is up says "unknown": it has no carrier of its own.
		if err == nil && (got == want || (want == "down" && got == "lowerlayerdown") || (want == "up" && got == "unknown")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's %s: operstate %q (%v), want %s", pod, intf, got, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitStatus waits until the Topology's first link status satisfies ok.
func waitStatus(t *testing.T, c *kubecluster.Cluster, ns, name string, ok func(v1beta1.LinkStatus) bool) {
	t.Helper()
	waitStatusWithin(t, c, ns, name, 30*time.Second, ok)
}

func waitStatusWithin(t *testing.T, c *kubecluster.Cluster, ns, name string, within time.Duration, ok func(v1beta1.LinkStatus) bool) {
	t.Helper()
	var topo v1beta1.Topology
	deadline := time.Now().Add(within)
	for {
		err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &topo)
		if err == nil && len(topo.Status.Links) > 0 && ok(topo.Status.Links[0]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Topology %s/%s status %+v (%v) not as wanted after %v", ns, name, topo.Status.Links, err, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitRoute waits until the pod's routing table, read inside the
// container, has (or no longer has) a route starting with route.
func waitRoute(t *testing.T, c *kubecluster.Cluster, ns, pod, route string, present bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "ip", "route")
		if err == nil && strings.Contains(out, route) == present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's routes after 30s (want %q present: %v):\n%s%v", pod, route, present, out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ifindex(t *testing.T, c *kubecluster.Cluster, ns, pod, intf string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, c, "-n", ns, "exec", pod, "--", "cat", "/sys/class/net/"+intf+"/ifindex"))
}

// pingCounts reads busybox ping's summary line.
func pingCounts(t *testing.T, out string) (sent, received int) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted, %d packets received", &sent, &received); err == nil {
			return sent, received
		}
	}
	t.Fatalf("no ping summary in:\n%s", out)
	return 0, 0
}

// TestNodeTeardownLeavesNothing runs meshnet and a VXLAN link on two real
// nodes, removes the cluster, and looks for anything left: processes,
// mounts, namespaces, interfaces, cgroups, directories.
func TestNodeTeardownLeavesNothing(t *testing.T) {
	ctx := context.Background()
	existed := map[string]bool{}
	for _, p := range kubecluster.HostPaths() {
		_, err := os.Stat(p)
		existed[p] = err == nil
	}
	dir, err := os.MkdirTemp("", "meshnet-kube-")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubecluster.New(ctx, kubecluster.Options{Dir: dir, Prefix: kubeclustertest.Prefix, Nodes: 2,
		Binaries: kubeclustertest.Binaries(t), MeshnetImage: "meshnet:dev"})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	if err := c.Install(ctx, overlay); err != nil {
		t.Fatalf("install meshnet: %v", err)
	}
	ns := "teardown"
	applyManifest(t, c, ns, strings.SplitN(twoRouters, "- apiVersion: v1\n", 2)[0])
	schedule(t, c, ns, routerPod("r1"), c.Nodes()[0].Name)
	schedule(t, c, ns, routerPod("r2"), c.Nodes()[1].Name)
	waitRunning(t, c, ns, "r1", "r2")
	ping(t, c, ns, "r1", "12.12.12.2")

	start := time.Now()
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("remove the cluster: %v", err)
	}
	t.Logf("cluster removed in %v", time.Since(start).Round(time.Millisecond))
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("remove %s: %v", dir, err)
	}
	for _, l := range kubecluster.Leftovers(dir, kubeclustertest.Prefix) {
		t.Errorf("left behind: %s", l)
	}
	for p, was := range existed {
		if _, err := os.Stat(p); (err == nil) != was {
			t.Errorf("%s: existed before the cluster: %v, exists after: %v", p, was, err == nil)
		}
	}
}

// captureNodeNetwork captures every TCP frame on the node network (all of
// its bridge's ports, in the fabric's namespace) until the returned stop,
// which returns the pcapng file.
func captureNodeNetwork(t *testing.T, c *kubecluster.Cluster) func() string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "node-network.pcapng")
	cmd := exec.Command("nsenter", "--net="+c.FabricNetns(), "--", "dumpcap", "-q", "-i", "any", "-f", "tcp", "-w", file)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatalf("dumpcap on the node network: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(file); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dumpcap wrote nothing in 10s: %s", errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func() string {
		time.Sleep(time.Second) // the last frames
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return file
	}
}

// checkNoTokenInClear reads the capture of the node network. It must have
// carried TLS to meshnetd's gRPC port from the host (grpcurl) and from the
// nodes (daemon to daemon, the controller), and to the HTTP port from the
// host (curl); every byte on meshnetd's ports must be TLS; and its bytes
// hold no token (a JWT's first bytes, or the operator's token). The
// canary, sent in clear over http:// on purpose, must be found by both
// checks: it shows that they can find one.
func checkNoTokenInClear(t *testing.T, file, canary, token, grpcurlNode string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(canary)) {
		t.Errorf("the capture (%d bytes) lacks the canary sent in clear: the search proves nothing", len(data))
	}
	rest := bytes.ReplaceAll(data, []byte(canary), nil)
	for _, secret := range []string{token, token[:40], "eyJhbGciOi", "Bearer ey"} {
		if i := bytes.Index(rest, []byte(secret)); i >= 0 {
			t.Errorf("a token crossed the node network in clear: %q at byte %d of %s", secret, i, file)
		}
	}
	defer func() {
		if t.Failed() { // keep the capture for a look with wireshark
			kept := filepath.Join(os.TempDir(), "meshnet-node-network-"+time.Now().Format("150405")+".pcapng")
			if err := os.Rename(file, kept); err == nil {
				t.Logf("the capture is kept in %s", kept)
			}
		}
	}()
	tshark := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tshark", append([]string{"-r", file}, args...)...).Output()
		if err != nil {
			t.Fatalf("tshark %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// Encrypted records (TLS 1.3 has no other content type on the wire),
	// by sender: grpcurl and curl on the host, the daemons on the nodes.
	appData := func(port string) (fromHost, fromNode int) {
		for _, src := range strings.Fields(tshark("-d", "tcp.port=="+port+",tls", "-Y", "tls.app_data && tcp.dstport == "+port, "-T", "fields", "-e", "ip.src")) {
			if src == kubecluster.HostIP.String() {
				fromHost++
			} else {
				fromNode++
			}
		}
		return fromHost, fromNode
	}
	grpcHost, grpcNode := appData("51111")
	restHost, _ := appData("51112")
	if grpcHost == 0 || grpcNode == 0 || restHost == 0 {
		t.Errorf("TLS application data: to :51111 %d packets from the host (grpcurl) and %d from nodes (the daemons' calls to %s's peer), to :51112 %d from the host (curl); want all three",
			grpcHost, grpcNode, grpcurlNode, restHost)
	}
	// Every segment with data on meshnetd's ports is TLS, save the canary's
	// connection, which shows that the filter finds plain bytes. Copies
	// (-i any sees a frame on two ports) and segments of a record that a
	// later segment completes are not dissected again; connections already
	// open when the capture began (the pools' own) are checked too, since
	// each record has a header of its own.
	canaryStreams := strings.Fields(tshark("-Y", fmt.Sprintf("frame contains %q", canary), "-T", "fields", "-e", "tcp.stream"))
	plain := tshark("-d", "tcp.port==51111,tls", "-d", "tcp.port==51112,tls",
		"-Y", "(tcp.port==51111 || tcp.port==51112) && tcp.len>0 && !tls && !tcp.reassembled_in && !tcp.analysis.retransmission",
		"-T", "fields", "-e", "tcp.stream", "-e", "ip.src", "-e", "ip.dst", "-e", "tcp.dstport", "-e", "tcp.len")
	sawCanary := false
	for _, line := range strings.Split(strings.TrimSpace(plain), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if slices.Contains(canaryStreams, f[0]) {
			sawCanary = true
			continue
		}
		t.Errorf("plain bytes on meshnetd's port, not TLS (stream, from, to, port, bytes): %s", line)
	}
	if !sawCanary {
		t.Errorf("the filter for plain bytes missed the canary's connection (streams %v): it proves nothing", canaryStreams)
	}
	t.Logf("node network capture: %d bytes, no token in clear; TLS application data packets: to :51111 %d from the host and %d from nodes, to :51112 %d from the host",
		len(data), grpcHost, grpcNode, restHost)
}
