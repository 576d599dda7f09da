//go:build node

package deploy_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster/kubeclustertest"
	"github.com/meshnet/meshnet/internal/meshnet-lab/proccpu"
)

// fabricSize is BenchmarkNodeFabric's size: routers x nodes. The issue's
// fabric is 256x4; this machine's two cores run 64x3 in minutes.
var fabricSize = flag.String("fabric", "64x3", "BenchmarkNodeFabric's routers x nodes")

// fabricLab is a containerlab file of n routers (busybox, as the lab's
// alpine image runs), each linked to the next four around a ring: 4n links,
// 8 a router, as a leaf-and-spine fabric's routers have a handful each.
func fabricLab(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: fabric\ntopology:\n  defaults:\n    kind: linux\n    image: alpine\n    entrypoint: sleep 2000000000\n  nodes:\n")
	for i := range n {
		fmt.Fprintf(&b, "    r%d: {}\n", i)
	}
	b.WriteString("  links:\n")
	for i := range n {
		for k := 1; k <= 4; k++ {
			j := (i + k) % n
			fmt.Fprintf(&b, "    - endpoints: [\"r%d:e%d\", \"r%d:w%d\"]\n", i, k, j, k)
		}
	}
	return b.String()
}

// BenchmarkNodeFabric runs a fabric of many small routers on several real
// nodes, as labs are wide: kubectl meshnet clab apply --wait of fabricLab,
// until every pod is Running and every Topology Ready, then a ping over a
// sample of links, kubectl meshnet links over the whole namespace, and
// clab delete --wait until every object is gone. It reports each time, and
// each meshnetd's processor time and peak memory (VmHWM) over the round.
func BenchmarkNodeFabric(b *testing.B) {
	var routers, nodes int
	if _, err := fmt.Sscanf(*fabricSize, "%dx%d", &routers, &nodes); err != nil || routers < 5 || nodes < 1 {
		b.Fatalf("-fabric %q: want ROUTERSxNODES, at least 5 routers", *fabricSize)
	}
	ctx := context.Background()
	c := kubeclustertest.New(b, nodes)
	if err := c.Install(ctx, overlay); err != nil {
		b.Fatalf("install meshnet: %v", err)
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "fabric.clab.yml")
	if err := os.WriteFile(file, []byte(fabricLab(routers)), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("routers=%d/links=%d/nodes=%d", routers, 4*routers, nodes), func(b *testing.B) {
		for i := range b.N {
			ns := fmt.Sprintf("fabric-%d", i)
			if err := c.Namespace(ctx, ns); err != nil {
				b.Fatal(err)
			}
			type daemon struct {
				node string
				pid  int
				cpu  time.Duration
			}
			var ds []daemon
			for _, n := range c.Nodes() {
				pid := meshnetdPID(b, n.Name)
				cpu, err := proccpu.Of(pid)
				if err != nil {
					b.Fatal(err)
				}
				resetHWM(b, pid)
				ds = append(ds, daemon{n.Name, pid, cpu})
			}
			load, _ := os.ReadFile("/proc/loadavg")
			start := time.Now()
			kubectlMeshnet(b, c.Kubeconfig, ns, "clab", "apply", file, "--wait", "--timeout", "10m")
			ready := time.Since(start)
			// A sample of links, across nodes and not: r0's four, and
			// those of a router half way round.
			for _, r := range []int{0, routers / 2} {
				for k := 1; k <= 4; k++ {
					pingLink(b, c, ns, r, (r+k)%routers, k)
				}
			}
			listed := time.Now()
			out := kubectlMeshnet(b, c.Kubeconfig, ns, "links")
			list := time.Since(listed)
			if got := strings.Count(out, "\n") - 1; got != 8*routers {
				b.Errorf("kubectl meshnet links listed %d ends, want %d", got, 8*routers)
			}
			deleted := time.Now()
			kubectlMeshnet(b, c.Kubeconfig, ns, "clab", "delete", file, "--timeout", "10m")
			teardown := time.Since(deleted)
			b.Logf("%d routers, %d links on %d nodes (load %s): Ready %v after the apply; links listed in %v; deleted in %v",
				routers, 4*routers, nodes, strings.Join(strings.Fields(string(load))[:3], " "), ready.Round(100*time.Millisecond),
				list.Round(time.Millisecond), teardown.Round(100*time.Millisecond))
			b.ReportMetric(ready.Seconds(), "ready-s")
			b.ReportMetric(list.Seconds(), "links-s")
			b.ReportMetric(teardown.Seconds(), "teardown-s")
			for j, d := range ds {
				cpu, err := proccpu.Of(d.pid)
				if err != nil {
					b.Fatalf("%s's meshnetd (pid %d) is gone: %v", d.node, d.pid, err)
				}
				b.ReportMetric(float64(vmHWM(b, d.pid))/1024, fmt.Sprintf("node%d-peak-MiB", j+1))
				b.ReportMetric((cpu - d.cpu).Seconds(), fmt.Sprintf("node%d-CPU-s", j+1))
			}
			for _, n := range c.Nodes() {
				eventually(b, time.Minute, "no record of the fabric's pods left on "+n.Name, func() (bool, string) {
					left := records(b, n, ns)
					return len(left) == 0, strings.Join(left, "\n")
				})
			}
			b.ReportMetric(0, "ns/op")
		}
	})
}

// pingLink pings over the link between routers a and z of fabricLab (the
// k-th of a, addressed now, 10.<k>.<a>.0/30), from a.
func pingLink(b *testing.B, c interface {
	Kubectl(context.Context, ...string) (string, error)
}, ns string, a, z, k int) {
	b.Helper()
	ctx := context.Background()
	netA, hostA, hostZ := fmt.Sprintf("10.%d.%d", k, a/64), a%64*4+1, a%64*4+2
	cmds := []struct {
		pod, cmd string
	}{
		{fmt.Sprintf("r%d", a), fmt.Sprintf("ip addr add %s.%d/30 dev e%d 2>/dev/null; true", netA, hostA, k)},
		{fmt.Sprintf("r%d", z), fmt.Sprintf("ip addr add %s.%d/30 dev w%d 2>/dev/null; true", netA, hostZ, k)},
	}
	for _, x := range cmds {
		if out, err := c.Kubectl(ctx, "-n", ns, "exec", x.pod, "--", "sh", "-c", x.cmd); err != nil {
			b.Fatalf("%s: %s: %v\n%s", x.pod, x.cmd, err, out)
		}
	}
	if out, err := c.Kubectl(ctx, "-n", ns, "exec", fmt.Sprintf("r%d", a), "--", "ping", "-c", "1", "-W", "2", fmt.Sprintf("%s.%d", netA, hostZ)); err != nil {
		b.Errorf("r%d:e%d to r%d:w%d: %v\n%s", a, k, z, k, err, out)
	}
}
