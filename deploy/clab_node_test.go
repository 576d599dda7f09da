//go:build node

package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/kubectl-meshnet/meshnetctl"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
)

// frrLab is a containerlab file as containerlab's FRR examples are written:
// three FRR routers in an OSPF triangle, a host behind router1 and one
// behind router2.
const frrLab = "../examples/frr-ospf/frr-ospf.clab.yml"

// containerlabFRRLab runs frrLab unchanged on the cluster with kubectl
// meshnet clab apply, from the lab registry's FRR and host images: every OSPF adjacency comes up Full
// and host1 reaches host2 through router1 and router2; a cable pull of
// router1-router2 with kubectl meshnet sends the traffic through router3,
// and putting the cable back brings the first path back.
func containerlabFRRLab(t *testing.T, c *kubecluster.Cluster, ns string) {
	ctx := context.Background()
	cli := func(args ...string) {
		t.Helper()
		var stdout, stderr strings.Builder
		code := meshnetctl.Main(append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns}, args...), &stdout, &stderr)
		t.Logf("$ kubectl meshnet %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		if code != 0 {
			t.Fatalf("kubectl meshnet %s: exit %d", strings.Join(args, " "), code)
		}
	}
	if err := c.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cli("clab", "apply", frrLab, "--wait")
	t.Logf("the lab's pods and Topologies Ready %v after the apply", time.Since(start).Round(time.Second))

	for _, r := range []string{"router1", "router2", "router3"} {
		eventually(t, 2*time.Minute, r+"'s two OSPF neighbours Full", func() (bool, string) {
			out, err := c.Kubectl(ctx, "-n", ns, "exec", r, "--", "vtysh", "-c", "show ip ospf neighbor")
			return err == nil && strings.Count(out, "Full/") == 2, out
		})
	}
	t.Logf("every OSPF adjacency Full %v after the apply", time.Since(start).Round(time.Second))
	defer func() {
		if t.Failed() {
			labState(t, c, ns)
		}
	}()
	eventually(t, time.Minute, "host1 reaching host2", func() (bool, string) {
		out, err := c.Kubectl(ctx, "-n", ns, "exec", "host1", "--", "ping", "-c", "1", "-W", "1", "192.168.12.2")
		return err == nil, out
	})
	t.Logf("host1 reaches host2 %v after the apply", time.Since(start).Round(time.Second))
	secondHop := func() string {
		out, _ := c.Kubectl(ctx, "-n", ns, "exec", "host1", "--", "traceroute", "-n", "-q", "1", "-w", "1", "-m", "4", "192.168.12.2")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "2" {
				return f[1]
			}
		}
		return ""
	}
	eventually(t, 30*time.Second, "host1's traffic to host2 through router2's eth1 (192.168.1.2)", func() (bool, string) {
		hop := secondHop()
		return hop == "192.168.1.2", hop
	})

	pulled := time.Now()
	cli("down", "router1", "eth1")
	t.Logf("kubectl meshnet down returned %v after it started: both ends down, as the status says", time.Since(pulled).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "host1 reaching host2 again", func() (bool, string) {
		out, err := c.Kubectl(ctx, "-n", ns, "exec", "host1", "--", "ping", "-c", "1", "-W", "1", "192.168.12.2")
		return err == nil, out
	})
	t.Logf("cable router1-router2 pulled: host1 reaches host2 again %v after the edit started", time.Since(pulled).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "host1's traffic to host2 through router3 (192.168.2.3)", func() (bool, string) {
		hop := secondHop()
		return hop == "192.168.2.3", hop
	})

	cli("up", "router1", "eth1")
	eventually(t, time.Minute, "host1's traffic to host2 back through router2 (192.168.1.2)", func() (bool, string) {
		hop := secondHop()
		return hop == "192.168.1.2", hop
	})
	ping(t, c, ns, "host1", "192.168.12.2")
}

// eventually polls ok until it holds, failing the test with what ok last saw
// when within passes.
func eventually(t testing.TB, within time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, saw := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; last seen:\n%s", what, within, saw)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// labState logs what a failed run needs to be understood: the hosts'
// addresses and routes, the routers' routing tables and forwarding.
func labState(t testing.TB, c *kubecluster.Cluster, ns string) {
	for _, q := range []struct {
		pod string
		cmd []string
	}{
		{"host1", []string{"sh", "-c", "ip -br addr; ip route"}},
		{"host2", []string{"sh", "-c", "ip -br addr; ip route"}},
		{"router1", []string{"sh", "-c", "cat /proc/sys/net/ipv4/ip_forward; ip -br addr; ip route"}},
		{"router1", []string{"vtysh", "-c", "show ip route"}},
		{"router2", []string{"sh", "-c", "cat /proc/sys/net/ipv4/ip_forward; ip -br addr; ip route"}},
		{"router1", []string{"vtysh", "-c", "show ip ospf neighbor"}},
		{"router2", []string{"vtysh", "-c", "show ip ospf neighbor"}},
		{"router1", []string{"sh", "-c", "ip -d link show eth1; ip -s link show eth1; ping -c 2 -W 1 192.168.1.2"}},
		{"router2", []string{"sh", "-c", "ip -d link show eth1; ip -s link show eth1; ping -c 2 -W 1 192.168.1.1"}},
	} {
		out, err := c.Kubectl(context.Background(), append([]string{"-n", ns, "exec", q.pod, "--"}, q.cmd...)...)
		t.Logf("%s$ %s (%v)\n%s", q.pod, strings.Join(q.cmd, " "), err, out)
	}
}
