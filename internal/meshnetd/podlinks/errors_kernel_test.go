//go:build kernel

package podlinks_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/meshnet/meshnet/api/v1beta1"
	"github.com/meshnet/meshnet/internal/cniconf"
	"github.com/meshnet/meshnet/internal/meshnet-lab/lab/labnet"
)

func onlyLo(t testing.TB, p *labnet.Pod) {
	t.Helper()
	if names, err := labnet.Links(p.Netns); err != nil || len(names) != 1 {
		t.Fatalf("pod %s has %v (%v), want only lo", p.Name, names, err)
	}
}

// TestKernelDaemonDown: with meshnetd crashed, or stopped while the runtime
// still has meshnet's conflist, ADD fails saying meshnetd is not there, and
// the pod gets nothing. A clean stop removes the conflist.
func TestKernelDaemonDown(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	b := lab.AddNode("node-b", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "r2", "eth1", "eth1", "10.0.1.1/30", ""))
	topology(t, lab, "lab", "r2", link(1, "r1", "eth1", "eth1", "10.0.1.2/30", ""))
	r1, r2 := lab.AddPod(a, "lab", "r1"), lab.AddPod(b, "lab", "r2")
	list, err := libcni.ConfListFromFile(filepath.Join(a.ConfDir, cniconf.FileName))
	if err != nil {
		t.Fatal(err)
	}

	if err := a.CNIStatus(context.Background(), list); err != nil {
		t.Fatalf("STATUS with meshnetd running: %v", err)
	}
	a.Kill()
	var cerr *types.Error
	if err := a.CNIStatus(context.Background(), list); !errors.As(err, &cerr) || cerr.Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with meshnetd killed: %v, want CNI code %d", err, types.ErrPluginNotAvailable)
	}
	_, err = r1.CNI(context.Background(), "ADD")
	if !errors.As(err, &cerr) || cerr.Code != types.ErrTryAgainLater || !strings.Contains(cerr.Msg, "meshnetd") {
		t.Fatalf("ADD with meshnetd killed: %v, want a try-again-later error naming meshnetd", err)
	}
	t.Logf("ADD with meshnetd killed: %v", err)
	onlyLo(t, r1)

	a.Start()
	cni(t, r1, "ADD")
	cni(t, r2, "ADD")
	ping(t, r1, "10.0.1.2")
	cni(t, r1, "DEL")

	a.Stop()
	if _, err := os.Stat(filepath.Join(a.ConfDir, cniconf.FileName)); !os.IsNotExist(err) {
		t.Errorf("meshnet's conflist after a clean stop: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(a.ConfDir, "10-lab.conflist")); err != nil {
		t.Errorf("the primary's conflist after a clean stop: %v", err)
	}
	_, err = r1.CNIWith(context.Background(), "ADD", list, r1.Netns)
	if !errors.As(err, &cerr) || !strings.Contains(cerr.Msg, "meshnetd is not running on this node") {
		t.Fatalf("ADD with meshnetd stopped: %v, want an error saying meshnetd is not running", err)
	}
	t.Logf("ADD with meshnetd stopped: %v", err)
	onlyLo(t, r1)
}

// TestKernelMalformedInput: bad JSON, no CNI_NETNS, a netns outside the
// netns directories and an unknown cniVersion each get a CNI error, and
// nothing changes: no interface, no pod record, no status.
func TestKernelMalformedInput(t *testing.T) {
	lab := labnet.New(t, bins)
	a := lab.AddNode("node-a", "eth0")
	lab.Namespace("lab")
	topology(t, lab, "lab", "r1", link(1, "localhost", "mgmt0", a.NIC, "10.250.0.100/24", ""))
	r1 := lab.AddPod(a, "lab", "r1")
	plugin := filepath.Join(a.BinDir, cniconf.PluginType)
	good := `{"cniVersion": "1.1.0", "name": "lab", "type": "meshnet", "socket": "` + a.Socket + `"}`
	outside := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name, conf, netns string
		code              uint
	}{
		{"bad JSON", `{"cniVersion": "1.1.0", "name": `, r1.Netns, types.ErrDecodingFailure},
		{"missing CNI_NETNS", good, "", types.ErrInvalidEnvironmentVariables},
		{"netns outside the netns directories", good, outside, types.ErrInvalidNetNS},
		{"netns path with ..", good, "/var/run/netns/../../tmp/x", types.ErrInvalidNetNS},
		{"unknown cniVersion", strings.Replace(good, "1.1.0", "9.9.9", 1), r1.Netns, types.ErrIncompatibleCNIVersion},
	} {
		args := &invoke.Args{
			Command: "ADD", ContainerID: r1.ContainerID, NetNS: c.netns, IfName: "eth0",
			PluginArgs: [][2]string{{"K8S_POD_NAMESPACE", "lab"}, {"K8S_POD_NAME", "r1"}}, Path: a.BinDir,
		}
		_, err := invoke.ExecPluginWithResult(ctx, plugin, []byte(c.conf), args, nil)
		var cerr *types.Error
		if !errors.As(err, &cerr) || cerr.Code != c.code {
			t.Errorf("%s: %v (%T), want CNI error code %d", c.name, err, err, c.code)
			continue
		}
		t.Logf("%s: code %d: %s", c.name, cerr.Code, cerr.Msg)
	}
	onlyLo(t, r1)
	if names, _ := labnet.Links(a.Netns); len(names) != 2 {
		t.Errorf("node has %v, want lo and its NIC", names)
	}
	if recs, _ := filepath.Glob(filepath.Join(a.StateDir, "pods", "*.json")); len(recs) != 0 {
		t.Errorf("pod records %v after malformed calls, want none", recs)
	}
	topo := &v1beta1.Topology{}
	if err := lab.Client.Get(ctx, keyOf("lab", "r1"), topo); err != nil {
		t.Fatal(err)
	}
	if topo.Status.NetNS != "" || len(topo.Status.Links) != 0 {
		t.Errorf("status %+v after malformed calls, want untouched", topo.Status)
	}
	// The same pod then wires fine.
	cni(t, r1, "ADD")
	if names, _ := labnet.Links(r1.Netns); len(names) != 2 {
		t.Errorf("r1 has %v after a good ADD, want lo and mgmt0", names)
	}
}

func keyOf(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}
