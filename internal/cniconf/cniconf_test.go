package cniconf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestWriteChainsAfterThePrimary(t *testing.T) {
	dir := t.TempDir()
	primary := `{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [{"type": "calico", "mtu": 1440}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-calico.conflist"), []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "99-other.conf"), []byte(`{"name": "other", "type": "bridge"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	path, from, err := Write(dir, map[string]any{"socket": "/run/meshnet/cni.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(from) != "10-calico.conflist" || filepath.Base(path) != FileName {
		t.Fatalf("wrote %s from %s", path, from)
	}
	got := decode(t, path)
	if got["name"] != "k8s-pod-network" || got["cniVersion"] != "1.0.0" {
		t.Errorf("network name/version %v %v, want the primary's", got["name"], got["cniVersion"])
	}
	types := []any{}
	for _, p := range got["plugins"].([]any) {
		types = append(types, p.(map[string]any)["type"])
	}
	if want := []any{"calico", "portmap", "meshnet"}; !reflect.DeepEqual(types, want) {
		t.Errorf("plugins %v, want %v", types, want)
	}
	// Rewriting (a restart) finds the same primary, not its own file.
	if _, from2, err := Write(dir, map[string]any{"socket": "/x"}); err != nil || from2 != from {
		t.Fatalf("second write from %s: %v", from2, err)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("conflist still there after Remove: %v", err)
	}
	if err := Remove(dir); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestChainSinglePluginConf(t *testing.T) {
	out, err := Chain([]byte(`{"cniVersion": "0.4.0", "name": "net", "type": "bridge", "bridge": "cni0"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name    string           `json:"name"`
		Version string           `json:"cniVersion"`
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "net" || got.Version != "0.4.0" || len(got.Plugins) != 2 ||
		got.Plugins[0]["type"] != "bridge" || got.Plugins[0]["bridge"] != "cni0" || got.Plugins[0]["name"] != nil ||
		got.Plugins[1]["type"] != "meshnet" {
		t.Errorf("chain %s", out)
	}
}

func TestChainDropsAnEarlierMeshnet(t *testing.T) {
	out, err := Chain([]byte(`{"name": "n", "plugins": [{"type": "ptp"}, {"type": "meshnet", "socket": "/old"}]}`), map[string]any{"socket": "/new"})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Plugins) != 2 || got.Plugins[1]["socket"] != "/new" {
		t.Errorf("chain %s", out)
	}
}

func TestNoPrimary(t *testing.T) {
	if _, _, err := Write(t.TempDir(), nil); err == nil {
		t.Fatal("Write without a primary config succeeded")
	}
}

func decode(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
