// Package podstore records, on disk, the pods that this node's CNI ADD calls
// wired and the links they got. Runtime calls address pods by namespace and
// name and find the netns here: a caller never hands meshnetd a netns path.
// The records survive a daemon restart, so shaping can be re-applied.
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
	Links   []Link `json:"links,omitempty"`
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
	// UDPPort is a physical peer's VXLAN port; 0 means v1beta1.DefaultVXLANPort.
	UDPPort uint16 `json:"udp_port,omitempty"`
	// FarEndOwed is set on a VXLAN link whose far end the peer's node has not
	// made when asked (it did not answer, or did not know the peer yet):
	// the pod's next sync asks again, as nothing else would.
	FarEndOwed bool `json:"far_end_owed,omitempty"`
}

// Key names a pod.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Key is the pod's key.
func (p Pod) Key() Key { return Key{p.Namespace, p.Name} }

// Store is the set of pods wired on this node, mirrored in a directory with
// one JSON file a pod. It is safe for concurrent use.
type Store struct {
	dir    string
	mu     sync.RWMutex
	pods   map[Key]Pod
	notify []func(Key)
}

// Notify has f called with a pod's key after every Put, and every Delete
// that removed a record, so that a follower of the store's pods (the link
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
	s := &Store{dir: dir, pods: map[Key]Pod{}}
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
		s.pods[p.Key()] = p
	}
	return s, nil
}

// Put records p, replacing any earlier record of the same pod.
func (s *Store) Put(p Pod) error {
	if p.Namespace == "" || p.Name == "" || p.Netns == "" {
		return errors.New("pod record needs namespace, name and netns")
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pod record %s: %w", p.Key(), err)
	}
	defer s.changed(p.Key())
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.path(p.Key())
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write pod record %s: %w", p.Key(), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write pod record %s: %w", p.Key(), err)
	}
	s.pods[p.Key()] = p
	return nil
}

// Get returns the record of a pod.
func (s *Store) Get(k Key) (Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[k]
	return p, ok
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
	p, ok := s.pods[k]
	if !ok || (containerID != "" && p.ContainerID != containerID) {
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
	for _, p := range s.pods {
		pods = append(pods, p)
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
