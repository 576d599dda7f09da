// Package podstore records, on disk, the pods that this node's CNI ADD calls
// wired and the links they got, and what runtime calls set on them since:
// one record a pod, each part with one writer. Runtime calls address pods by
// namespace and name and find the netns here: a caller never hands meshnetd a
// netns path. The records survive a daemon restart, so what was set can be
// set again, and go with the pod's DEL.
package podstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// Pod is a pod sandbox wired on this node.
type Pod struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	ContainerID string `json:"container_id"`
	Netns       string `json:"netns"`
	// Network is the CNI network configuration's name at ADD, so that GC of
	// one network leaves another's pods alone; empty in records written
	// before it was kept.
	Network string `json:"network,omitempty"`
	// Adding is set from the moment a CNI ADD records the sandbox until
	// that ADD succeeds. A record still adding when no ADD is at work on it
	// is a sandbox whose ADD failed or was cut off (meshnetd killed in the
	// middle): the runtime throws it away and makes another, so nothing is
	// reported of it nor changed in it. Records written before it was kept
	// never have it.
	Adding bool   `json:"adding,omitempty"`
	Links  []Link `json:"links,omitempty"`
	// Bridge is the bridge meshnet makes the pod's link ends ports of (its
	// Topology's spec.bridge, an L2 segment), so that one dropped from the
	// Topology is removed; empty for a pod that is not a segment.
	Bridge string `json:"bridge,omitempty"`
	// Runtime is what runtime calls set on the pod, in the JSON of their
	// owner (podlinks), which the store keeps and does not read, as
	// containerd keeps a plugin's extension in a container's record. Put
	// keeps the record's Runtime whatever p has; only SetRuntime writes it.
	Runtime json.RawMessage `json:"runtime,omitempty"`
}

// Link is one of a pod's links as it was wired.
type Link struct {
	UID       int    `json:"uid"`
	LocalIntf string `json:"local_intf"`
	// Kind is how the link is made; "" while it waits for its peer.
	Kind     v1beta1.LinkKind `json:"kind"`
	PeerPod  string           `json:"peer_pod,omitempty"`
	PeerIntf string           `json:"peer_intf,omitempty"`
	// PeerNodeIP is the VTEP of the peer's node for a cross-node VXLAN link.
	PeerNodeIP string `json:"peer_node_ip,omitempty"`
	VNI        uint32 `json:"vni,omitempty"`
	// UDPPort is a physical peer's VXLAN port; 0 means v1beta1.DefaultVXLANPort
	// (Port).
	UDPPort uint16 `json:"udp_port,omitempty"`
	// SrcPort is the UDP source port this node pinned this VXLAN end's
	// datagrams to (links.VXLAN.SrcPort); 0 for none.
	SrcPort uint16 `json:"src_port,omitempty"`
	// PeerSrcPort is the far end's, as its node told it: the only port the
	// underlay guard admits its datagrams from (0: not known yet, any).
	PeerSrcPort uint16 `json:"peer_src_port,omitempty"`
	// FarEndOwed is set on a VXLAN link whose far end the peer's node has not
	// made when asked (it did not answer, or did not know the peer yet):
	// the pod's next sync asks again, as nothing else would.
	FarEndOwed bool `json:"far_end_owed,omitempty"`
}

// Port is the VXLAN destination port of link l: UDPPort, or
// v1beta1.DefaultVXLANPort when it is 0.
func (l Link) Port() uint16 {
	if l.UDPPort == 0 {
		return v1beta1.DefaultVXLANPort
	}
	return l.UDPPort
}

// Key names a pod.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Key is the pod's key.
func (p Pod) Key() Key { return Key{p.Namespace, p.Name} }

// Store is the set of pods wired on this node, mirrored in a directory with
// one JSON file a pod. It is safe for concurrent use.
type Store struct {
	dir string
	mu  sync.RWMutex
	// pods holds each record once written; a write replaces the entry,
	// so a writer can tell whether the record changed since it read it.
	pods   map[Key]*entry
	notify []func(Key)
}

type entry struct{ Pod }

// Notify has f called with a pod's key after every write of its record
// (Put, SetRuntime), and every Delete that removed it, so that a follower of the store's pods (the link
// watcher) needs no poll. f runs on the writer's goroutine and must not
// block.
func (s *Store) Notify(f func(Key)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notify = append(s.notify, f)
}

func (s *Store) changed(k Key) {
	s.mu.RLock()
	fs := s.notify
	s.mu.RUnlock()
	for _, f := range fs {
		f(k)
	}
}

// Open loads the records in dir, creating it (mode 0700) if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pod store %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read pod store %s: %w", dir, err)
	}
	s := &Store{dir: dir, pods: map[Key]*entry{}}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read pod record %s: %w", e.Name(), err)
		}
		var p Pod
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("decode pod record %s: %w", e.Name(), err)
		}
		s.pods[p.Key()] = &entry{Pod: p}
	}
	return s, nil
}

// Put records p, replacing any earlier record of the same pod but its
// Runtime, which is SetRuntime's.
func (s *Store) Put(p Pod) error {
	if p.Namespace == "" || p.Name == "" || p.Netns == "" {
		return errors.New("pod record needs namespace, name and netns")
	}
	_, err := s.write(p.Key(), func(cur *Pod, found bool) bool {
		rt := cur.Runtime
		if !found {
			rt = nil
		}
		*cur = p
		cur.Runtime = rt
		return true
	})
	return err
}

// SetRuntime makes rt the Runtime of pod k's record, if its sandbox is
// still containerID: a runtime call that read the pod before its DEL, or
// before a new sandbox's ADD, must not write back what it read. It reports
// whether it wrote.
func (s *Store) SetRuntime(k Key, containerID string, rt json.RawMessage) (bool, error) {
	return s.write(k, func(cur *Pod, found bool) bool {
		if !found || cur.ContainerID != containerID {
			return false
		}
		cur.Runtime = rt
		return true
	})
}

// write changes pod k's record (the zero Pod when found is false) with
// change, and writes it when change says so. The record is encoded outside
// the store's lock, which only its file's write and rename hold: a record
// that changed meanwhile is changed again from what it is then.
func (s *Store) write(k Key, change func(cur *Pod, found bool) bool) (bool, error) {
	for {
		s.mu.RLock()
		e, found := s.pods[k]
		s.mu.RUnlock()
		var p Pod
		if found {
			p = e.Pod
		}
		if !change(&p, found) {
			return false, nil
		}
		data, err := json.Marshal(p)
		if err != nil {
			return false, fmt.Errorf("encode pod record %s: %w", k, err)
		}
		s.mu.Lock()
		if cur := s.pods[k]; cur != e {
			s.mu.Unlock()
			continue
		}
		err = s.writeFile(k, data)
		if err == nil {
			s.pods[k] = &entry{Pod: p}
		}
		s.mu.Unlock()
		if err != nil {
			return false, err
		}
		s.changed(k)
		return true, nil
	}
}

func (s *Store) writeFile(k Key, data []byte) error {
	path := s.path(k)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write pod record %s: %w", k, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write pod record %s: %w", k, err)
	}
	return nil
}

// Get returns the record of a pod.
func (s *Store) Get(k Key) (Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.pods[k]
	if !ok {
		return Pod{}, false
	}
	return e.Pod, true
}

// Delete removes a pod's record if it belongs to containerID (any sandbox when
// containerID is empty), so that a late DEL of an old sandbox does not forget
// its replacement. Deleting a missing record is not an error.
func (s *Store) Delete(k Key, containerID string) error {
	removed, err := s.delete(k, containerID)
	if removed {
		s.changed(k)
	}
	return err
}

func (s *Store) delete(k Key, containerID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pods[k]
	if !ok || (containerID != "" && e.ContainerID != containerID) {
		return false, nil
	}
	if err := os.Remove(s.path(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("delete pod record %s: %w", k, err)
	}
	delete(s.pods, k)
	return true, nil
}

// List returns every record, ordered by namespace and name.
func (s *Store) List() []Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pods := make([]Pod, 0, len(s.pods))
	for _, e := range s.pods {
		pods = append(pods, e.Pod)
	}
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i].Key(), pods[j].Key()
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
	return pods
}

// path is the record's file. Namespace and pod names are DNS labels and
// subdomains, which cannot hold "_" or "/".
func (s *Store) path(k Key) string {
	return filepath.Join(s.dir, k.Namespace+"_"+k.Name+".json")
}

// AdoptRuntimes moves into the records the runtime records that meshnetd
// kept in a directory of their own (dir, one file a pod, named as the
// store's) before they became a part of each pod's record, and removes
// them, and dir once empty: a meshnetd upgraded on a running node keeps
// what runtime calls set. A file whose pod is not recorded is removed. It
// returns the pods whose file was moved in and those whose file was removed.
func (s *Store) AdoptRuntimes(dir string) (adopted, dropped []Key, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("list runtime records in %s: %w", dir, err)
	}
	for _, f := range files {
		ns, name, ok := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".json"), "_")
		if !ok {
			continue
		}
		k := Key{Namespace: ns, Name: name}
		data, err := os.ReadFile(f)
		if err != nil {
			return adopted, dropped, fmt.Errorf("read runtime record %s: %w", f, err)
		}
		wrote, err := s.write(k, func(cur *Pod, found bool) bool {
			if !found || !json.Valid(data) {
				return false
			}
			cur.Runtime = data
			return true
		})
		if err != nil {
			return adopted, dropped, err
		}
		if err := os.Remove(f); err != nil {
			return adopted, dropped, fmt.Errorf("remove runtime record %s: %w", f, err)
		}
		if wrote {
			adopted = append(adopted, k)
		} else {
			dropped = append(dropped, k)
		}
	}
	// Removed only when empty: a file of another name stays, with dir.
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		return adopted, dropped, fmt.Errorf("remove %s: %w", dir, err)
	}
	return adopted, dropped, nil
}
