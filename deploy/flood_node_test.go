//go:build node

package deploy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/daemon/daemontest"
	"github.com/meshnet/meshnet/internal/daemonclient"
	"github.com/meshnet/meshnet/internal/kubecluster"
	"github.com/meshnet/meshnet/internal/kubecluster/kubeclustertest"
	"github.com/meshnet/meshnet/internal/meshnetctl"
	"github.com/meshnet/meshnet/internal/proccpu"
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

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(kubectl(t, c, "-n", "meshnet", "get", "configmap", "meshnet-ca", "-o", `jsonpath={.data.ca\.crt}`))) {
		t.Fatal("ConfigMap meshnet/meshnet-ca holds no certificate")
	}
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: node.IP.String()}
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	base := fmt.Sprintf("https://%s:51112/v1/namespaces/%s/pods/r1/links/eth1/state", node.IP, ns)
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
		var stdout, stderr strings.Builder
		if code := meshnetctl.Main([]string{"--kubeconfig", editor, "-n", ns, "up", "r1", "eth1"}, &stdout, &stderr); code != 0 {
			t.Fatalf("kubectl meshnet up r1 eth1 after the flood: exit %d %s", code, stderr.String())
		}
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
