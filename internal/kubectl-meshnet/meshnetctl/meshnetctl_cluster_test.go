//go:build cluster

package meshnetctl_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/meshnet-lab/controlplane/clustertest"
)

// BenchmarkClusterLinks1000 runs `kubectl meshnet links` as a user does
// (the built binary, a kubeconfig) over a namespace of 200 pods with 5
// links each, their status written as the controller writes it: 1,000
// link ends. It reports the median and the slowest run of b.N, and the CPU
// time of the command, kube-apiserver and etcd per run.
func BenchmarkClusterLinks1000(b *testing.B) {
	env := clustertest.Start(b)
	ctx := context.Background()
	const ns, pods, perPod = "bench", 200, 5
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("r%03d", i%pods) }
	for i := range pods {
		t := &v1beta1.Topology{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}}
		for j := range perPod {
			// A ring of rings: pod i's link j reaches pod i+j+1.
			t.Spec.Links = append(t.Spec.Links, v1beta1.Link{
				UID: i*perPod + j, PeerPod: name(i + j + 1), LocalIntf: fmt.Sprintf("eth%d", j+1), PeerIntf: fmt.Sprintf("eth%d", j+1),
				LocalIP: fmt.Sprintf("10.%d.%d.1/30", i, j),
			})
		}
		if err := env.Client.Create(ctx, t); err != nil {
			b.Fatal(err)
		}
		t.Status = v1beta1.TopologyStatus{Node: "node-1", LinkCount: perPod, ObservedGeneration: t.Generation}
		for _, l := range t.Spec.Links {
			t.Status.Links = append(t.Status.Links, v1beta1.LinkStatus{
				UID: l.UID, LocalIntf: l.LocalIntf, Kind: v1beta1.LinkKindVXLAN, Node: "node-1",
				State: v1beta1.LinkUp, Carrier: true, MTU: 1450,
				Netem: &v1beta1.Netem{Delay: ptr(v1beta1.Duration("10ms"))},
			})
		}
		if err := env.Client.Status().Update(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
	bin := b.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshnet/meshnet/cmd/kubectl-meshnet").CombinedOutput(); err != nil {
		b.Fatalf("go build kubectl-meshnet: %v\n%s", err, out)
	}
	kubeconfig := env.Kubeconfig(b)
	var took []time.Duration
	var client time.Duration // the command's own CPU time, all runs
	cpu0, err := env.ControlPlane.CPU()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		cmd := exec.Command(filepath.Join(bin, "kubectl-meshnet"), "links", "-n", ns, "--kubeconfig", kubeconfig)
		out, err := cmd.Output()
		took = append(took, time.Since(start))
		if cmd.ProcessState != nil {
			client += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		if err != nil {
			b.Fatalf("kubectl meshnet links: %v", err)
		}
		if rows := strings.Count(string(out), "\n") - 1; rows != pods*perPod {
			b.Fatalf("kubectl meshnet links printed %d link ends, want %d", rows, pods*perPod)
		}
	}
	b.StopTimer()
	cpu1, err := env.ControlPlane.CPU()
	if err != nil {
		b.Fatal(err)
	}
	used := cpu1.Sub(cpu0)
	perRun := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(perRun(client), "kubectl-meshnet-cpu-ms/op")
	b.ReportMetric(perRun(used.Sum("kube-apiserver")), "apiserver-cpu-ms/op")
	b.ReportMetric(perRun(used.Sum("etcd")), "etcd-cpu-ms/op")
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(took[len(took)-1])/float64(time.Millisecond), "max-ms")
}

func ptr[T any](v T) *T { return &v }
