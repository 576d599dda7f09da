//go:build kernel

package podlinks_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

// gc runs CNI GC on a node as a runtime does, through libcni with the
// conflist meshnetd installed, keeping the attachments of pods valid. The
// libcni cache is a fresh directory: a runtime that still had the stale
// attachments cached would DEL them itself first, and GC is for the ones
// it lost.
func gc(t testing.TB, n *labnet.Node, valid ...*labnet.Pod) error {
	t.Helper()
	list, err := libcni.ConfListFromFile(filepath.Join(n.ConfDir, cniconf.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if list.CNIVersion != "1.1.0" {
		t.Fatalf("conflist cniVersion %q: libcni sends GC to plugins from 1.1.0 only", list.CNIVersion)
	}
	if got := pluginTypes(list); !slices.Equal(got, []string{"loopback", cniconf.PluginType}) {
		t.Fatalf("conflist plugins %v, want loopback then meshnet", got)
	}
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, p := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: p.ContainerID, IfName: "eth0"})
	}
	c := libcni.NewCNIConfigWithCacheDir([]string{n.BinDir}, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.GCNetworkList(ctx, list, args)
}

func mustGC(t testing.TB, n *labnet.Node, valid ...*labnet.Pod) time.Duration {
	t.Helper()
	start := time.Now()
	if err := gc(t, n, valid...); err != nil {
		t.Fatalf("GC on %s: %v\nnode log:\n%s", n.Name, err, tail(n.Log()))
	}
	return time.Since(start)
}

func pluginTypes(list *libcni.NetworkConfigList) []string {
	var out []string
	for _, p := range list.Plugins {
		out = append(out, p.Network.Type)
	}
	return out
}

// records lists the pod store's files on a node.
func records(t testing.TB, n *labnet.Node) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(n.StateDir, "pods", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		paths[i] = filepath.Base(p)
	}
	return paths
}

func linkNames(t testing.TB, p *labnet.Pod) []string {
	t.Helper()
	names, err := labnet.Links(p.Netns)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// collect calls GarbageCollect on the node's socket directly, for what the
// CNI result cannot carry: the pods removed.
func collect(t testing.TB, n *labnet.Node, valid ...*labnet.Pod) *meshnetv1.GarbageCollectResponse {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &meshnetv1.GarbageCollectRequest{Network: "lab", CniVersion: "1.1.0"}
	for _, p := range valid {
		req.ValidAttachments = append(req.ValidAttachments, &meshnetv1.Attachment{ContainerId: p.ContainerID, Ifname: "eth0"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := meshnetv1.NewCNIServiceClient(conn).GarbageCollect(ctx, req)
	if err != nil {
		t.Fatalf("GarbageCollect on %s: %v", n.Name, err)
	}
	return resp
}

// TestKernelGCStale wires r1 and r2 on node a (veth) and r3 on node b
// (VXLAN to r1). GC with every attachment valid changes nothing; GC on node
// b with only r1 and r2 valid removes r3's links, their remote end in r1 on
// node a, and r3's record, and leaves the veth alone; a second GC is a
// no-op.
func TestKernelGCStale(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "ens3")
	b := lab.AddNode("node-b", "enp0s8")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1",
		link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""),
		link(2, "r3", "eth2", "eth1", "10.0.2.1/30", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
	topology(t, lab, "lab", "r3", link(2, "r1", "eth1", "eth2", "10.0.2.2/30", ""))
	r1, r2, r3 := lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2"), lab.AddPod(b, "lab", "r3")
	for _, p := range []*labnet.Pod{r1, r2, r3} {
		cni(t, p, "ADD")
	}
	ping(t, r1, "10.0.1.2")
	ping(t, r1, "10.0.2.2")

	for _, n := range []*labnet.Node{a, b} {
		d := mustGC(t, n, r1, r2, r3)
		t.Logf("GC on %s with every attachment valid: %v", n.Name, d)
	}
	ping(t, r1, "10.0.1.2")
	ping(t, r1, "10.0.2.2")
	if got := records(t, b); !slices.Equal(got, []string{"lab_r3.json"}) {
		t.Fatalf("node-b records %v after GC with every attachment valid, want lab_r3.json", got)
	}

	d := mustGC(t, b, r1, r2)
	t.Logf("GC on node-b of 1 stale pod (1 VXLAN link, remote end on node-a): %v", d)
	if got := linkNames(t, r3); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("r3 has %v after GC, want only lo", got)
	}
	if got := linkNames(t, r1); !slices.Equal(got, []string{"eth1", "lo"}) {
		t.Errorf("r1 has %v after GC of r3, want lo and the veth eth1: the remote VXLAN end eth2 gone", got)
	}
	if got := records(t, b); len(got) != 0 {
		t.Errorf("node-b records %v after GC, want none", got)
	}
	if got := records(t, a); !slices.Equal(got, []string{"lab_r1.json", "lab_r2.json"}) {
		t.Errorf("node-a records %v after GC on node-b, want r1 and r2", got)
	}
	ping(t, r1, "10.0.1.2")
	ping(t, r2, "10.0.1.1")
	if log := b.Log(); !strings.Contains(log, "GC: stale link removed") || !strings.Contains(log, "pod=lab/r3") {
		t.Errorf("node-b log has no GC removal of lab/r3:\n%s", tail(log))
	}
	// r3 is no longer wired: CHECK says so, DEL has nothing left to do.
	ctx := context.Background()
	if _, err := r3.CNI(ctx, "CHECK"); err == nil || !strings.Contains(err.Error(), "never wired") {
		t.Errorf("CHECK of r3 after GC: %v, want an error saying it is not wired", err)
	}
	cni(t, r3, "DEL")

	d = mustGC(t, b, r1, r2)
	t.Logf("second GC on node-b: %v", d)
	if resp := collect(t, b, r1, r2); len(resp.GetPods()) != 0 {
		t.Errorf("GarbageCollect after GC removed %v, want nothing", resp.GetPods())
	}
	if resp := collect(t, a, r1, r2); len(resp.GetPods()) != 0 {
		t.Errorf("GarbageCollect on node-a with r1 and r2 valid removed %v, want nothing", resp.GetPods())
	}
	if got := linkNames(t, r1); !slices.Equal(got, []string{"eth1", "lo"}) {
		t.Errorf("r1 has %v after a second GC, want lo and eth1", got)
	}
	cni(t, r2, "CHECK")
	ping(t, r1, "10.0.1.2")

	// A new sandbox of r3 wires again, its remote end in r1 too: GC left
	// nothing behind in the way.
	cni(t, r3, "ADD")
	ping(t, r3, "10.0.2.1")
	cni(t, r1, "CHECK")
}

// TestKernelGCMany: 20 pods of 4 links each on two nodes; GC on node b
// with only node a's pods valid removes node b's 10 pods, 20 VXLAN links
// with their remote ends on node a and 10 veths, and leaves node a's veths
// up.
func TestKernelGCMany(t *testing.T) {
	lab := labnet.New(t, bins)
	nodes := []*labnet.Node{lab.AddNode("node-a", "eth0"), lab.AddNode("node-b", "eth0")}
	r := newRing(t, lab, "lab", 20, nodes)
	r.all(t, "ADD")
	if err := r.wired(); err != nil {
		t.Fatal(err)
	}
	var onA []*labnet.Pod
	for i, p := range r.pods {
		if i%2 == 0 {
			onA = append(onA, p)
		}
	}
	d := mustGC(t, nodes[1], onA...)
	t.Logf("GC on node-b of 10 stale pods (20 VXLAN links with remote ends on node-a, 10 veths): %v", d)
	for i, p := range r.pods {
		want := 1 // lo
		if i%2 == 0 {
			want = 3 // lo and the two veths to i±2
		}
		if got := linkNames(t, p); len(got) != want {
			t.Errorf("%s has %v after GC, want %d interfaces", p.Name, got, want)
		}
	}
	if got := records(t, nodes[1]); len(got) != 0 {
		t.Errorf("node-b records %v after GC, want none", got)
	}
	if got := records(t, nodes[0]); len(got) != 10 {
		t.Errorf("node-a has %d records after GC on node-b, want 10", len(got))
	}
	for _, l := range r.links {
		if l.a%2 == 0 && l.b%2 == 0 {
			ping(t, r.pods[l.a], prefixIP(l.bIP))
		}
	}
	d = mustGC(t, nodes[1], onA...)
	t.Logf("second GC on node-b (nothing stale): %v", d)
}

// TestKernelGCMalformedInput: GC input without valid attachments, with an
// attachment lacking its container id, of the wrong type, or in a
// cniVersion without GC gets a CNI error and removes nothing; so does GC
// with meshnetd down, with the error ADD gives.
func TestKernelGCMalformedInput(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(a, "lab", "r2")
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")

	plugin := filepath.Join(a.BinDir, cniconf.PluginType)
	conf := func(extra string) []byte {
		return []byte(`{"cniVersion": "1.1.0", "name": "lab", "type": "meshnet", "socket": "` + a.Socket + `"` + extra + `}`)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		conf []byte
		code uint
	}{
		{"no valid attachments", conf(""), types.ErrInvalidNetworkConfig},
		{"null valid attachments", conf(`, "cni.dev/valid-attachments": null`), types.ErrInvalidNetworkConfig},
		{"attachment without container id", conf(`, "cni.dev/valid-attachments": [{"ifname": "eth0"}]`), types.ErrInvalidNetworkConfig},
		{"valid attachments not a list", conf(`, "cni.dev/valid-attachments": "` + r1.ContainerID + `"`), types.ErrDecodingFailure},
		{"bad JSON", conf(`, "cni.dev/valid-attachments": [`), types.ErrDecodingFailure},
		{"cniVersion without GC", []byte(strings.Replace(string(conf(`, "cni.dev/valid-attachments": []`)), "1.1.0", "1.0.0", 1)), types.ErrIncompatibleCNIVersion},
	} {
		err := invoke.ExecPluginWithoutResult(ctx, plugin, c.conf, &invoke.Args{Command: "GC", Path: a.BinDir}, nil)
		var cerr *types.Error
		if !errors.As(err, &cerr) || cerr.Code != c.code {
			t.Errorf("%s: %v (%T), want CNI error code %d", c.name, err, err, c.code)
			continue
		}
		t.Logf("%s: code %d: %s", c.name, cerr.Code, cerr.Msg)
	}
	unchanged := func(when string) {
		t.Helper()
		for _, p := range []*labnet.Pod{r1, r2} {
			if got := linkNames(t, p); !slices.Equal(got, []string{"eth1", "lo"}) {
				t.Errorf("%s has %v %s, want lo and eth1", p.Name, got, when)
			}
		}
		if got := records(t, a); !slices.Equal(got, []string{"lab_r1.json", "lab_r2.json"}) {
			t.Errorf("records %v %s, want r1 and r2", got, when)
		}
	}
	unchanged("after malformed GC input")
	ping(t, r1, "10.0.1.2")

	a.Kill()
	err := gc(t, a)
	var cerr *types.Error
	if !errors.As(err, &cerr) || cerr.Code != types.ErrTryAgainLater || !strings.Contains(cerr.Msg, "meshnetd") {
		t.Fatalf("GC with meshnetd killed: %v, want a try-again-later error naming meshnetd", err)
	}
	t.Logf("GC with meshnetd killed: %v", err)
	a.Start()
	unchanged("after GC with meshnetd down")
	ping(t, r1, "10.0.1.2")
}
