//go:build node

package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnet/meshnet/internal/meshnet-lab/kubecluster"
)

// pingInterval is how often faultsUnderPing's pings go: busybox ping (the
// routers are alpine) prints no times, so a reply's icmp_seq says when it
// was sent.
const pingInterval = 100 * time.Millisecond

// faultsUnderPing holds r1's eth1 (a VXLAN to r2 on the other node) with
// faults made by kubectl meshnet while r1 pings r2 every 100 ms, and counts
// the replies against each fault's schedule: none in a window, all between.
func faultsUnderPing(t *testing.T, c *kubecluster.Cluster, ns string) {
	t.Run("FlapCountedByPing", func(t *testing.T) {
		pinged := pingFor(c, ns, "r1", "12.12.12.2", 16*time.Second)
		time.Sleep(2 * time.Second)
		kubectlMeshnet(t, c.Kubeconfig, ns, "flap", "r1", "eth1", "--down", "2s", "--up", "2s", "--count", "3")
		gaps := lostRuns(t, <-pinged)
		t.Logf("windows lost runs of %v replies, beginning at icmp_seq %v (one every %v)", lengths(gaps), starts(gaps), pingInterval)
		if len(gaps) != 3 {
			t.Fatalf("%d runs of lost replies, want 3 (one per window): %v", len(gaps), gaps)
		}
		for i, g := range gaps {
			if n := g.n(); n < 17 || n > 23 { // 2 s, within 300 ms
				t.Errorf("window %d: %d replies lost (%v), want about 20 (2s)", i+1, n, time.Duration(n)*pingInterval)
			}
			if i > 0 {
				if d := g.from - gaps[i-1].from; d < 37 || d > 43 { // 4 s apart, within 300 ms
					t.Errorf("windows %d and %d began %d pings apart (%v), want about 40 (4s)", i, i+1, d, time.Duration(d)*pingInterval)
				}
			}
		}
	})

	t.Run("DownForOutlivesRolloutRestarts", func(t *testing.T) {
		// Both meshnetds and both controller replicas are replaced inside
		// the window: the fault is in the API server; the link stays down
		// and comes back when the window ends.
		pinged := pingFor(c, ns, "r1", "12.12.12.2", 40*time.Second)
		time.Sleep(2 * time.Second)
		kubectlMeshnet(t, c.Kubeconfig, ns, "down", "r1", "eth1", "--for", "30s")
		kubectl(t, c, "-n", "meshnet", "rollout", "restart", "daemonset/meshnetd", "deployment/meshnet-controller")
		kubectl(t, c, "-n", "meshnet", "rollout", "status", "daemonset/meshnetd", "--timeout=120s")
		kubectl(t, c, "-n", "meshnet", "rollout", "status", "deployment/meshnet-controller", "--timeout=120s")
		gaps := lostRuns(t, <-pinged)
		t.Logf("the window lost a run of %v replies (one every %v)", lengths(gaps), pingInterval)
		if len(gaps) != 1 {
			t.Fatalf("%d runs of lost replies, want 1 (the window): %v", len(gaps), gaps)
		}
		if n := gaps[0].n(); n < 290 || n > 315 { // 30 s, back within 1.5 s
			t.Errorf("%d replies lost (%v), want about 300 (30s) across the restarts", n, time.Duration(n)*pingInterval)
		}
	})
}

// pingFor pings addr from pod for d, one every pingInterval; the channel
// has ping's output when it ends.
func pingFor(c *kubecluster.Cluster, ns, pod, addr string, d time.Duration) <-chan string {
	out := make(chan string, 1)
	go func() {
		s, _ := c.Kubectl(context.Background(), "-n", ns, "exec", pod, "--", "ping", "-n",
			"-i", fmt.Sprint(pingInterval.Seconds()), "-W", "1", "-w", fmt.Sprint(int(d.Seconds())), addr)
		out <- s
	}()
	return out
}

// seqRun is icmp_seqs from..to-1 without a reply.
type seqRun struct{ from, to int }

func (r seqRun) n() int { return r.to - r.from }

// lostRuns reads busybox ping's output: the runs of icmp_seqs that got no
// reply, between the first reply and the last packet sent, that a window
// made.
func lostRuns(t *testing.T, out string) []seqRun {
	t.Helper()
	sent, _ := pingCounts(t, out)
	replied := map[int]bool{}
	first := -1
	for _, line := range strings.Split(out, "\n") {
		i := strings.Index(line, "seq=")
		var seq int
		if i < 0 || !strings.Contains(line, "bytes from") {
			continue
		}
		if _, err := fmt.Sscanf(line[i:], "seq=%d", &seq); err == nil {
			replied[seq] = true
			if first < 0 || seq < first {
				first = seq
			}
		}
	}
	if first < 0 {
		t.Fatalf("no reply at all:\n%s", out)
	}
	var runs []seqRun
	for seq := first; seq < sent; seq++ {
		if replied[seq] {
			continue
		}
		if len(runs) > 0 && runs[len(runs)-1].to == seq {
			runs[len(runs)-1].to++
		} else {
			runs = append(runs, seqRun{seq, seq + 1})
		}
	}
	// A window loses 20 replies or more; a stray loss (the last packet
	// cut by -w before its reply, a busy node) is not one.
	var windows []seqRun
	stray := 0
	for _, r := range runs {
		if r.n() < 5 {
			stray += r.n()
			continue
		}
		windows = append(windows, r)
	}
	if stray > 3 {
		t.Errorf("%d replies lost outside the windows: %v", stray, runs)
	}
	return windows
}

func lengths(rs []seqRun) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.n())
	}
	return out
}

func starts(rs []seqRun) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.from)
	}
	return out
}
