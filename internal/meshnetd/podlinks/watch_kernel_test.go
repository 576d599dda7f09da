//go:build kernel

package podlinks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links/netnstest"
	"github.com/meshnet/meshnet/internal/meshnetd/podlinks/podlinkstest"
)

// nextEvent reads the next event of a watch, failing after 5s.
func nextEvent(t *testing.T, events <-chan *meshnetv1.WatchLinksResponse, errs <-chan error) *meshnetv1.WatchLinksResponse {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case err := <-errs:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
	}
	return nil
}

// TestKernelWatchLinks watches a pod over gRPC and a namespace over REST:
// the listing first, then a link taken down through the API, brought up by
// `ip link set` inside the pod, and an address added there, each delivered
// once, in order, with rising revisions; a bad request names its field.
func TestKernelWatchLinks(t *testing.T) {
	lab, r1, _ := twoPods(t)
	st := podlinkstest.Start(t, podlinkstest.Options{Pods: lab.Store})
	c := st.Client(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	events, errs := watchLinks(t, ctx, c, &meshnetv1.WatchLinksRequest{Namespace: ns, Pod: "r1"})
	// The listing is the pod as it is, then SYNCED, also when the watch
	// starts before the watcher's first read of the pod.
	if ev := nextEvent(t, events, errs); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_ADDED ||
		ev.GetLink().GetInterface() != "eth1" || ev.GetPod().GetName() != "r1" || ev.GetLink().GetAdminState() != up {
		t.Fatalf("listing: %v, want ADDED r1 eth1 up", ev)
	}
	if ev := nextEvent(t, events, errs); ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_SYNCED {
		t.Fatalf("after the listing: %v, want SYNCED", ev)
	}

	// REST, through the gateway, for the namespace: one JSON object a line.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+st.HTTPAddr+"/v1/namespaces/"+ns+"/links:watch", nil)
	httpResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer httpResp.Body.Close()
	lines := bufio.NewScanner(httpResp.Body)
	restTypes := map[string]int{}
	for lines.Scan() {
		var line struct {
			Result struct {
				Type string `json:"type"`
			} `json:"result"`
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
			t.Fatalf("REST watch line %q: %v", lines.Text(), err)
		}
		restTypes[line.Result.Type]++
		if line.Result.Type == "LINK_EVENT_TYPE_SYNCED" {
			break
		}
	}
	if restTypes["LINK_EVENT_TYPE_ADDED"] != 2 {
		t.Fatalf("REST listing of namespace %s: %v, want 2 ADDED (r1 and r2) then SYNCED", ns, restTypes)
	}

	var last uint64
	expect := func(what string, ok func(*meshnetv1.LinkStatus) bool) {
		t.Helper()
		for {
			ev := nextEvent(t, events, errs)
			if ev.GetRevision() <= last {
				t.Fatalf("%s: revision %d after %d", what, ev.GetRevision(), last)
			}
			last = ev.GetRevision()
			if ev.GetType() == meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED && ok(ev.GetLink()) {
				return
			}
			if ev.GetType() != meshnetv1.LinkEventType_LINK_EVENT_TYPE_MODIFIED {
				t.Fatalf("%s: unexpected %v", what, ev)
			}
		}
	}
	if _, err := c.SetLinkState(ctx, &meshnetv1.SetLinkStateRequest{Namespace: ns, Pod: "r1", Interface: "eth1", State: down}); err != nil {
		t.Fatal(err)
	}
	expect("down through the API", func(l *meshnetv1.LinkStatus) bool { return l.GetAdminState() == down && !l.GetCarrier() })
	if out, err := netnstest.Run(r1.Path(), "ip", "link", "set", "eth1", "up"); err != nil {
		t.Fatalf("ip link set eth1 up: %v: %s", err, out)
	}
	expect("up inside the pod", func(l *meshnetv1.LinkStatus) bool { return l.GetAdminState() == up && l.GetCarrier() })
	if out, err := netnstest.Run(r1.Path(), "ip", "addr", "add", "10.7.0.1/24", "dev", "eth1"); err != nil {
		t.Fatalf("ip addr add: %v: %s", err, out)
	}
	expect("address added inside the pod", func(l *meshnetv1.LinkStatus) bool {
		for _, a := range l.GetAddresses() {
			if a == "10.7.0.1/24" {
				return true
			}
		}
		return false
	})

	bad, err := c.WatchLinks(ctx, &meshnetv1.WatchLinksRequest{Pod: "r1"})
	if err == nil {
		_, err = bad.Recv()
	}
	mustCode(t, "watch of a pod without namespace", err, codes.InvalidArgument)
}
