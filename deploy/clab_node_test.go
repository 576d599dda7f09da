//go:build node

package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster/kubeclustertest"
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
	cli := func(args ...string) { t.Helper(); kubectlMeshnet(t, c.Kubeconfig, ns, args...) }
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
	// A pod forwards IPv4 as on a real node (and under containerlab),
	// though nothing in host1's image or the lab file turns it on.
	if out, err := c.Kubectl(ctx, "-n", ns, "exec", "host1", "--", "cat", "/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(out) != "1" {
		t.Errorf("host1's net.ipv4.ip_forward: %q, %v; want 1, as its node has it", out, err)
	}
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
	eventually(t, 30*time.Second, "host1's traffic to host2 through router2's eth1 (192.168.1.2)", func() (bool, string) {
		hop := secondHop(c, ns)
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
		hop := secondHop(c, ns)
		return hop == "192.168.2.3", hop
	})

	cli("up", "router1", "eth1")
	eventually(t, time.Minute, "host1's traffic to host2 back through router2 (192.168.1.2)", func() (bool, string) {
		hop := secondHop(c, ns)
		return hop == "192.168.1.2", hop
	})
	ping(t, c, ns, "host1", "192.168.12.2")
}

// secondHop is the second hop of host1's traceroute to host2 in frrLab:
// the router after router1 that its traffic takes.
func secondHop(c *kubecluster.Cluster, ns string) string {
	out, _ := c.Kubectl(context.Background(), "-n", ns, "exec", "host1", "--", "traceroute", "-n", "-q", "1", "-w", "1", "-m", "4", "192.168.12.2")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "2" {
			return f[1]
		}
	}
	return ""
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

// BenchmarkNodeFRRReroute runs frrLab and pulls the router1-router2 cable
// under a ping from host1 to host2 every 10 ms: it reports the time from
// the start of kubectl meshnet down until the first reply over the other
// path (a reply one hop further: host2's replies come back through router3,
// TTL 61 not 62), the longest time without replies, the replies lost, and
// the time from kubectl meshnet up until host1's traffic takes router2
// again, each the mean of the rounds (-benchtime 3x).
func BenchmarkNodeFRRReroute(b *testing.B) {
	ctx := context.Background()
	c := kubeclustertest.New(b, 2)
	if err := c.Install(ctx, overlay); err != nil {
		b.Fatalf("install meshnet: %v", err)
	}
	const ns = "frr"
	if err := c.Namespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	cli := func(args ...string) { b.Helper(); kubectlMeshnet(b, c.Kubeconfig, ns, args...) }
	cli("clab", "apply", frrLab, "--wait")
	eventually(b, 2*time.Minute, "host1's traffic to host2 through router2", func() (bool, string) {
		hop := secondHop(c, ns)
		return hop == "192.168.1.2", hop
	})
	var rerouted, silence, up time.Duration
	lost, rounds := 0, 0
	for b.Loop() {
		rounds++
		// ping -D prints each reply's time (the pods share this machine's
		// clock); -w ends it.
		pinged := make(chan string, 1)
		go func() {
			out, _ := c.Kubectl(ctx, "-n", ns, "exec", "host1", "--", "ping", "-D", "-n", "-i", "0.01", "-W", "1", "-w", "6", "192.168.12.2")
			pinged <- out
		}()
		time.Sleep(2 * time.Second)
		pulled := time.Now()
		cli("down", "router1", "eth1")
		out := <-pinged
		var (
			first, last   time.Time
			gap           time.Duration
			sent, replied int
		)
		for _, line := range strings.Split(out, "\n") {
			var sec, usec int64
			var ttl int
			if i := strings.Index(line, "ttl="); i >= 0 && strings.HasPrefix(line, "[") {
				fmt.Sscanf(line, "[%d.%d]", &sec, &usec)
				fmt.Sscanf(line[i:], "ttl=%d", &ttl)
				at := time.Unix(sec, usec*1000)
				if !last.IsZero() && at.After(pulled) && at.Sub(last) > gap {
					gap = at.Sub(last)
				}
				last = at
				if first.IsZero() && ttl == 61 && at.After(pulled) {
					first = at
				}
			}
			fmt.Sscanf(line, "%d packets transmitted, %d received", &sent, &replied)
		}
		if first.IsZero() || sent == 0 {
			b.Fatalf("no reply over router3 (ttl 61) after the pull at %v:\n%s", pulled.Format(time.StampMicro), lastLine(out))
		}
		rerouted, silence, lost = rerouted+first.Sub(pulled), silence+gap, lost+sent-replied
		b.Logf("cable pulled: first reply over router3 %v after kubectl meshnet down started; longest silence %v; %d of %d lost",
			first.Sub(pulled).Round(time.Millisecond), gap.Round(time.Millisecond), sent-replied, sent)
		if hop := secondHop(c, ns); hop != "192.168.2.3" {
			b.Fatalf("host1's traffic with the cable pulled goes through %q, want router3 (192.168.2.3)", hop)
		}
		restored := time.Now()
		cli("up", "router1", "eth1")
		eventually(b, time.Minute, "host1's traffic to host2 through router2 again", func() (bool, string) {
			hop := secondHop(c, ns)
			return hop == "192.168.1.2", hop
		})
		up += time.Since(restored)
	}
	n := float64(rounds)
	b.ReportMetric(float64(rerouted.Milliseconds())/n, "pull-to-rerouted-ms")
	b.ReportMetric(float64(silence.Milliseconds())/n, "longest-silence-ms")
	b.ReportMetric(float64(lost)/n, "lost")
	b.ReportMetric(up.Seconds()/n, "up-to-first-path-s")
	b.ReportMetric(0, "ns/op")
}
