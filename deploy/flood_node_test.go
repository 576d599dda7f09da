//go:build node

package deploy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster/kubeclustertest"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
	"github.com/meshnet/meshnet/internal/meshnetd/daemon/daemontest"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
)

// nodeFlood is what floodOnOneNode and BenchmarkNodeFlood measure: while
// callers without a valid token send a rate of requests a second to r1's
// node's meshnetd, over TLS as installed (REST and gRPC, a token never seen
// before each time) and 8 of them keep 100 MB bodies going, an editor
// pulls r1's cable and puts it back with kubectl meshnet down and up (the
// Topology edited, the controller converging both ends, the status
// written), again and again.
type nodeFlood struct {
	daemontest.Flood
	changes []time.Duration // of the editor's commands, each until converged
	failed  []string
	peakKiB int           // r1's node's meshnetd's VmHWM after the flood
	cpu     time.Duration // its processor time during the flood
}

func (f *nodeFlood) p(q float64) time.Duration { return daemontest.Percentile(f.changes, q) }

// floodOnOneNode: a flood of callers without a valid token against one
// meshnetd, as installed, neither restarts it nor takes its memory past
// 128 MiB, and an editor's cable pulls through kubectl meshnet during it
// all converge. How fast they converge is BenchmarkNodeFlood's.
func floodOnOneNode(t *testing.T, c *kubecluster.Cluster, ns, editor string) {
	f := floodNode(t, c, ns, editor, 8*time.Second, 1000)
	t.Logf("flood: %d requests sent, %d refused; editor: %d changes, p50 %v, p99 %v; meshnetd VmHWM %d KiB, %.1f CPU-s",
		f.Sent.Load(), f.Refused.Load(), len(f.changes), f.p(0.5), f.p(0.99), f.peakKiB, f.cpu.Seconds())
	if len(f.failed) > 0 {
		t.Errorf("%d of the editor's %d changes failed during the flood:\n%s", len(f.failed), len(f.changes), strings.Join(f.failed, "\n"))
	}
	if f.Refused.Load() == 0 {
		t.Error("no request of the flood was refused: the flood did not reach meshnetd")
	}
	if f.peakKiB > 128<<10 {
		t.Errorf("meshnetd's peak RSS %d KiB during the flood, want at most 128 MiB", f.peakKiB)
	}
}

// BenchmarkNodeFlood floods one meshnetd of a two-node cluster for 30 s at
// 1,000 requests a second plus 8 bodies of 100 MB, and reports the
// editor's kubectl meshnet down/up latencies (until the Topology's status
// says the kernel has it) and meshnetd's peak memory.
func BenchmarkNodeFlood(b *testing.B) {
	ctx := context.Background()
	c := kubeclustertest.New(b, 2)
	if err := c.Install(ctx, overlay); err != nil {
		b.Fatalf("install meshnet: %v", err)
	}
	const ns = "flood"
	routersAcrossNodes(b, c, ns)
	editor := userKubeconfig(b, c, ns, "edit")
	b.ResetTimer()
	for range b.N {
		f := floodNode(b, c, ns, editor, 30*time.Second, 1000)
		b.ReportMetric(float64(f.Sent.Load())/30, "flood-req/s")
		b.ReportMetric(float64(f.p(0.5).Milliseconds()), "p50-ms")
		b.ReportMetric(float64(f.p(0.99).Milliseconds()), "p99-ms")
		b.ReportMetric(float64(f.peakKiB)/1024, "peak-MiB")
		b.ReportMetric(f.cpu.Seconds(), "meshnetd-CPU-s")
		b.ReportMetric(float64(len(f.failed)), "failed")
	}
}

func floodNode(t testing.TB, c *kubecluster.Cluster, ns, editor string, d time.Duration, perSecond int) *nodeFlood {
	t.Helper()
	r1 := pod(t, c, ns, "r1")
	node := c.Node(r1.Spec.NodeName)
	daemon := meshnetdOn(t, c, node.Name)
	pid := meshnetdPID(t, node.Name)
	t.Logf("%s's meshnetd (pid %d) before the flood: VmHWM %d KiB", node.Name, pid, vmHWM(t, pid))

	tlsConfig, web, base := meshnetdHTTPS(t, c, node)
	base += fmt.Sprintf("/v1/namespaces/%s/pods/r1/links/eth1/state", ns)
	conn, err := grpc.NewClient(fmt.Sprintf("%s:51111", node.IP), grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)), daemonclient.MessageSizes())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	f := &nodeFlood{Flood: daemontest.Flood{
		Web: web, URL: base, Links: meshnetv1.NewLinkServiceClient(conn), PerSecond: perSecond,
		Pull: &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: meshnetv1.LinkState_LINK_STATE_DOWN},
	}}
	cpuBefore, err := proccpu.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	// The editor, meanwhile, as a user does it: through the API server.
	time.Sleep(time.Second)
	for i := 0; ctx.Err() == nil; i++ {
		verb := []string{"down", "up"}[i%2]
		var stdout, stderr strings.Builder
		start := time.Now()
		code := meshnetctl.Main([]string{"--kubeconfig", editor, "-n", ns, verb, "r1", "eth1"}, &stdout, &stderr)
		took := time.Since(start)
		if code != 0 {
			f.failed = append(f.failed, fmt.Sprintf("kubectl meshnet %s r1 eth1 after %v: exit %d %s", verb, took, code, stderr.String()))
		}
		f.changes = append(f.changes, took)
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if len(f.changes)%2 == 1 { // the link as it was
		kubectlMeshnet(t, editor, ns, "up", "r1", "eth1")
	}
	if got := meshnetdOn(t, c, node.Name); got.uid != daemon.uid || got.restarts != daemon.restarts {
		t.Fatalf("%s's meshnetd restarted during the flood: pod %s, %d restarts; before %s, %d", node.Name, got.uid, got.restarts, daemon.uid, daemon.restarts)
	}
	if got := meshnetdPID(t, node.Name); got != pid {
		t.Fatalf("%s's meshnetd restarted during the flood: pid %d, before %d", node.Name, got, pid)
	}
	f.peakKiB = vmHWM(t, pid)
	cpuAfter, err := proccpu.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	f.cpu = cpuAfter - cpuBefore
	return f
}

type daemonPod struct {
	uid      string
	restarts int32
}

// meshnetdOn is node's meshnetd pod: its UID and its container's restarts.
func meshnetdOn(t testing.TB, c *kubecluster.Cluster, node string) daemonPod {
	t.Helper()
	for _, p := range podsOf(t, c, "meshnet", "app.kubernetes.io/name=meshnetd") {
		if p.Spec.NodeName == node && len(p.Status.ContainerStatuses) == 1 {
			return daemonPod{uid: string(p.UID), restarts: p.Status.ContainerStatuses[0].RestartCount}
		}
	}
	t.Fatalf("no meshnetd pod on %s", node)
	return daemonPod{}
}

// meshnetdPID finds node's meshnetd among this machine's processes (the
// nodes are namespaces of this machine) by its command line.
func meshnetdPID(t testing.TB, node string) int {
	t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, p := range procs {
		if args, err := p.CmdLine(); err == nil && len(args) > 0 && args[0] == "/meshnetd" && slices.Contains(args, "--node-name="+node) {
			found = append(found, p.PID)
		}
	}
	if len(found) != 1 {
		t.Fatalf("meshnetd processes of %s: %v, want one", node, found)
	}
	return found[0]
}

// vmHWM is the most memory process pid has held, in KiB.
func vmHWM(t testing.TB, pid int) int {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return int(st.VmHWM >> 10)
}

// resetHWM sets pid's peak resident memory (VmHWM) back to its resident
// memory now (clear_refs 5, proc(5)), so that vmHWM reports the peak of
// what follows, not of the process's life.
func resetHWM(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak memory of pid %d: %v", pid, err)
	}
}

// meshnetdHTTPS is a client of node's meshnetd over TLS, trusting meshnet's
// CA as installed, and its HTTP port's base URL.
func meshnetdHTTPS(t testing.TB, c *kubecluster.Cluster, node *kubecluster.Node) (*tls.Config, *http.Client, string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(kubectl(t, c, "-n", "meshnet", "get", "configmap", "meshnet-ca", "-o", `jsonpath={.data.ca\.crt}`))) {
		t.Fatal("ConfigMap meshnet/meshnet-ca holds no certificate")
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: node.IP.String()}
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	return cfg, web, fmt.Sprintf("https://%s:51112", node.IP)
}

// hostileCallsChangeNothing calls r1's node's meshnetd directly, over TLS
// as installed, as callers it must refuse: without a token, with a token
// for the API server, with a token of another namespace's editor, and
// with bodies too large or too slow. Each is refused, saying why, and r1's
// link is as it was.
func hostileCallsChangeNothing(t *testing.T, c *kubecluster.Cluster, ns string) {
	ctx := context.Background()
	node := c.Node(pod(t, c, ns, "r1").Spec.NodeName)
	tlsConfig, web, base := meshnetdHTTPS(t, c, node)
	if err := c.Namespace(ctx, "stranger"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, "stranger"} {
		kubectl(t, c, "-n", n, "create", "serviceaccount", "operator")
		kubectl(t, c, "-n", n, "create", "rolebinding", "operator", "--clusterrole", "edit", "--serviceaccount", n+":operator")
	}
	token := func(n string, args ...string) string {
		return strings.TrimSpace(kubectl(t, c, append([]string{"-n", n, "create", "token", "operator"}, args...)...))
	}
	operator, forAPIServer, stranger := token(ns, "--audience", "meshnetd"), token(ns), token("stranger", "--audience", "meshnetd")
	linksURL := fmt.Sprintf("%s/v1/namespaces/%s/pods/r1/links", base, ns)
	state := linksURL + "/eth1/state"
	call := func(method, url, token string, body io.Reader, length int64) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := web.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	pull := `{"state":"LINK_STATE_DOWN"}`

	// A body that never arrives, started first: it takes meshnetd's 30 s.
	slow := make(chan string, 1)
	go func() {
		r, w := io.Pipe()
		defer w.Close()
		go w.Write([]byte(`{"state":`))
		start := time.Now()
		code, body := call("PUT", state, operator, r, int64(len(pull)))
		slow <- fmt.Sprintf("%d after %v: %.200s", code, time.Since(start).Round(time.Second), body)
	}()

	if code, body := call("GET", linksURL, operator, nil, 0); code != http.StatusOK {
		t.Fatalf("GET %s as the namespace's operator: %d %.300s, want 200", linksURL, code, body)
	}
	for _, tc := range []struct {
		what, method, token string
		body                string
		want                int
		says                string
	}{
		{"a read without a token", "GET", "", "", http.StatusUnauthorized, "authorization: Bearer"},
		{"a read with the operator's token for the API server", "GET", forAPIServer, "", http.StatusUnauthorized, "audience meshnetd"},
		{"a read with another namespace's editor's token", "GET", stranger, "", http.StatusForbidden, "stranger"},
		{"a cable pull with another namespace's editor's token", "PUT", stranger, pull, http.StatusForbidden, "stranger"},
		{"a cable pull with the operator's token for the API server", "PUT", forAPIServer, pull, http.StatusUnauthorized, "audience meshnetd"},
	} {
		url := linksURL
		var body io.Reader
		if tc.method == "PUT" {
			url, body = state, strings.NewReader(tc.body)
		}
		code, out := call(tc.method, url, tc.token, body, int64(len(tc.body)))
		t.Logf("%s: %d %.300s", tc.what, code, out)
		if code != tc.want || !strings.Contains(out, tc.says) {
			t.Errorf("%s: %d %.300s, want %d saying %q", tc.what, code, out, tc.want, tc.says)
		}
	}
	// Bodies past the largest legal request, announced and chunked.
	big := int64(meshnetv1.MaxRESTBodyBytes + 1)
	if code, out := call("PUT", state, operator, daemontest.Spaces(big), big); code != http.StatusBadRequest || !strings.Contains(out, "at most") {
		t.Errorf("an announced body of %d bytes: %d %.300s, want 400 naming the limit", big, code, out)
	}
	if code, out := call("PUT", state, operator, daemontest.Spaces(big), -1); code < 400 || code >= 500 {
		t.Errorf("a chunked body of %d bytes: %d %.300s, want refused as the caller's mistake (4xx)", big, code, out)
	}
	got := <-slow
	t.Logf("a body that never arrives: %s", got)
	if !strings.HasPrefix(got, "400 ") || !strings.Contains(got, "not received within 30s") {
		t.Errorf("a body that never arrives: %s, want 400 saying it was not received within meshnetd's 30s", got)
	}
	// Root on a node holds its meshnetd's token, which may ask other nodes
	// for far ends: towards the peer pod's node only.
	daemonToken := strings.TrimSpace(kubectl(t, c, "-n", "meshnet", "create", "token", "meshnetd", "--audience", "meshnetd"))
	conn, err := grpc.NewClient(fmt.Sprintf("%s:51111", node.IP), grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r2 := pod(t, c, ns, "r2")
	_, err = meshnetv1.NewPeerServiceClient(conn).CreateRemoteEnd(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+daemonToken),
		&meshnetv1.CreateRemoteEndRequest{
			End:   &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: ns, Name: "r1"}, Interface: "eth1", Uid: 1},
			Peer:  &meshnetv1.LinkEnd{Pod: &meshnetv1.PodRef{Namespace: ns, Name: "r2"}, Interface: "eth1", Uid: 1},
			Vxlan: &meshnetv1.Vxlan{Vni: links.VNI(ns, "r1", "r2", 1), LocalVtep: r2.Status.HostIP, RemoteVtep: "192.0.2.99"},
		})
	t.Logf("a far end of r1's link towards 192.0.2.99, with meshnetd's token: %v", err)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "vxlan.remote_vtep: 192.0.2.99 is not the address of node") {
		t.Errorf("a far end towards an address of the caller's choosing: %v, want InvalidArgument naming vxlan.remote_vtep", err)
	}
	// Nothing changed: r1's cable is in, at both ends, and carries pings.
	for _, p := range []string{"r1", "r2"} {
		waitOperstate(t, c, ns, p, "eth1", "up")
	}
	ping(t, c, ns, "r1", "12.12.12.2")
}

// anotherPodsVethRefused: a macvlan on another pod's host-side veth (the
// primary CNI's, on node) is refused by meshnetd at CNI ADD even where the
// admin's consent names the interface: the pod waits, its event saying
// why, and the veth is untouched.
func anotherPodsVethRefused(t *testing.T, c *kubecluster.Cluster, ns, node string) {
	ctx := context.Background()
	n := c.Node(node)
	out, err := exec.Command("nsenter", "--net="+n.Netns, "--", "ip", "-o", "link", "show", "type", "veth").Output()
	if err != nil {
		t.Fatalf("veths on %s: %v", node, err)
	}
	var veth string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "veth") {
			veth = strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			break
		}
	}
	if veth == "" {
		t.Fatalf("no pod's host-side veth on %s:\n%s", node, out)
	}
	kubectl(t, c, "annotate", "--overwrite", "namespace", ns, v1beta1.HostInterfacesAnnotation+"="+kubecluster.NodeNIC+","+veth)
	topo := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r4"}, Spec: v1beta1.TopologySpec{Links: []v1beta1.Link{
		{UID: 3, PeerPod: v1beta1.PeerHost, LocalIntf: "eth2", PeerIntf: veth, LocalIP: "172.17.0.198/16"}}}}
	// Admission sees the new annotation a moment after it is written.
	deadline := time.Now().Add(30 * time.Second)
	for err := c.Client.Create(ctx, topo); err != nil; err = c.Client.Create(ctx, topo) {
		if time.Now().After(deadline) {
			t.Fatalf("a macvlan on %s, which the namespace's consent names: %v", veth, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r4"}, Spec: corev1.PodSpec{
		NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "pod", Image: "alpine", Command: []string{"/bin/sh", "-c", "sleep 2000000000000"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("parent %s is a veth (a pod's end or a cable to another namespace), not a NIC of the node", veth)
	for deadline = time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		events := kubectl(t, c, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=r4", "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
		if strings.Contains(events, want) {
			t.Logf("r4's events:\n%.1500s", events)
			if strings.Contains(events, "code = Internal") {
				t.Errorf("the refusal is reported as Internal, not as the Topology's to mend:\n%s", events)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r4's events do not say %q within 60s:\n%s", want, events)
		}
	}
	if p := pod(t, c, ns, "r4"); p.Status.Phase == corev1.PodRunning {
		t.Errorf("r4 is Running with a macvlan on another pod's veth")
	}
	kubectl(t, c, "-n", ns, "delete", "pod", "r4", "--wait=true", "--timeout=60s")
	kubectl(t, c, "-n", ns, "delete", "topology", "r4")
	if out, err := exec.Command("nsenter", "--net="+n.Netns, "--", "ip", "-o", "link", "show", "dev", veth).CombinedOutput(); err != nil || strings.Contains(string(out), "macvlan") {
		t.Errorf("%s after the refusal: %v %s", veth, err, out)
	}
}
