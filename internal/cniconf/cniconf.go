// Package cniconf installs meshnet into a node's CNI setup: the plugin
// binary into the CNI bin directory, and a conflist that chains meshnet after
// the cluster's primary CNI. The conflist sorts first in the conf directory,
// so the runtime picks it over the primary's own file, and carries the
// primary's network name and plugins unchanged: eth0 stays the primary's.
package cniconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FileName is the conflist meshnet writes. "00-" sorts before the usual
// "10-<primary>.conflist", and the runtime uses the first file.
const FileName = "00-meshnet.conflist"

// PluginType is the CNI type of meshnet's plugin, the binary's name in the
// CNI bin directory.
const PluginType = "meshnet"

// ErrNoPrimary says the conf directory holds no primary CNI configuration
// yet (the primary CNI may install it later).
var ErrNoPrimary = errors.New("no primary CNI configuration")

// InstallPlugin copies the plugin binary src into binDir as PluginType,
// atomically: a runtime never executes a half-written file.
func InstallPlugin(src, binDir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("install plugin: %w", err)
	}
	defer in.Close()
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("install plugin: %w", err)
	}
	dst := filepath.Join(binDir, PluginType)
	tmp, err := os.CreateTemp(binDir, "."+PluginType+"-*")
	if err != nil {
		return "", fmt.Errorf("install plugin: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install plugin %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install plugin %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("install plugin %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install plugin %s: %w", dst, err)
	}
	return dst, nil
}

// Primary finds the primary CNI's configuration in confDir: the first
// .conflist, .conf or .json file in lexical order (the runtime's own rule),
// meshnet's own file excluded.
func Primary(confDir string) (string, error) {
	entries, err := os.ReadDir(confDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w in %s: the directory does not exist", ErrNoPrimary, confDir)
		}
		return "", fmt.Errorf("read CNI conf dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || n == FileName || strings.HasPrefix(n, ".") {
			continue
		}
		switch filepath.Ext(n) {
		case ".conflist", ".conf", ".json":
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("%w in %s", ErrNoPrimary, confDir)
	}
	sort.Strings(names)
	return filepath.Join(confDir, names[0]), nil
}

// Chain returns a conflist that runs the primary's plugins (from a conflist
// or a single-plugin conf) followed by meshnet with the given plugin
// configuration. A meshnet plugin already in the primary's list (an earlier
// install that the primary copied) is dropped, so meshnet runs once.
func Chain(primary []byte, meshnet map[string]any) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(primary, &top); err != nil {
		return nil, fmt.Errorf("parse primary CNI config: %w", err)
	}
	var name, version string
	if err := json.Unmarshal(top["name"], &name); err != nil || name == "" {
		return nil, errors.New("primary CNI config has no network name")
	}
	_ = json.Unmarshal(top["cniVersion"], &version)

	var plugins []map[string]any
	if raw, ok := top["plugins"]; ok {
		if err := json.Unmarshal(raw, &plugins); err != nil {
			return nil, fmt.Errorf("parse plugins of primary CNI config %s: %w", name, err)
		}
	} else {
		// A single-plugin .conf: the whole object is the plugin, less the
		// network-level keys.
		var single map[string]any
		if err := json.Unmarshal(primary, &single); err != nil {
			return nil, fmt.Errorf("parse primary CNI config %s: %w", name, err)
		}
		delete(single, "name")
		delete(single, "cniVersion")
		delete(single, "cniVersions")
		plugins = []map[string]any{single}
	}
	kept := plugins[:0]
	for _, p := range plugins {
		if p["type"] != PluginType {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("primary CNI config %s has no plugin before meshnet", name)
	}
	m := map[string]any{"type": PluginType}
	for k, v := range meshnet {
		m[k] = v
	}
	out := map[string]any{}
	for k, v := range top {
		out[k] = v
	}
	out["plugins"] = append(kept, m)
	if version == "" {
		out["cniVersion"] = "1.0.0"
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode meshnet conflist: %w", err)
	}
	return append(data, '\n'), nil
}

// Write chains meshnet after the primary configuration in confDir and writes
// the result to confDir/FileName atomically. It returns the file written and
// the primary file it chains.
func Write(confDir string, meshnet map[string]any) (path, primary string, err error) {
	primary, err = Primary(confDir)
	if err != nil {
		return "", "", err
	}
	data, err := os.ReadFile(primary)
	if err != nil {
		return "", "", fmt.Errorf("read primary CNI config: %w", err)
	}
	out, err := Chain(data, meshnet)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", primary, err)
	}
	path = filepath.Join(confDir, FileName)
	tmp := filepath.Join(confDir, "."+FileName+".tmp")
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, primary, nil
}

// Remove deletes meshnet's conflist from confDir, so the runtime falls back
// to the primary's own file. A missing file is not an error.
func Remove(confDir string) error {
	if err := os.Remove(filepath.Join(confDir, FileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove meshnet conflist: %w", err)
	}
	return nil
}
