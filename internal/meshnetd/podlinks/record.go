package podlinks

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"google.golang.org/protobuf/encoding/protojson"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
	"github.com/meshnet/meshnet/internal/meshnetd/links"
	"github.com/meshnet/meshnet/internal/meshnetd/podstore"
)

// podRecord is what runtime calls set on a pod that meshnetd must remember
// across its restarts: what the kernel flushed from the links it took down,
// the routes it manages, and the last desired state it converged to. It is
// the Runtime of the pod's record in the pod store, which goes with the
// pod's DEL.
type podRecord struct {
	// ContainerID is the sandbox the record was made in; a new sandbox has
	// fresh links, so Down no longer applies to it.
	ContainerID string `json:"container_id"`
	PodUID      string `json:"pod_uid,omitempty"`
	Generation  int64  `json:"generation,omitempty"`
	// Down holds the interfaces meshnet took down, with the routes and
	// addresses the kernel flushed, to restore on up.
	Down map[string]savedEnd `json:"down,omitempty"`
	// Routes is the meshnet-managed route set (SetRoutes, ApplyPod).
	Routes []route `json:"routes,omitempty"`
	// Distribution is the netem jitter distribution last applied per
	// interface: the kernel does not report it back.
	Distribution map[string]string `json:"distribution,omitempty"`
	// LastError is the last error converging each interface.
	LastError map[string]string `json:"last_error,omitempty"`
	// Applied is the last ApplyPodRequest that converged, with the admin
	// states peers set since (followAdmin), in protojson, for re-applying
	// it after a restart or a new sandbox.
	Applied json.RawMessage `json:"applied,omitempty"`
}

// followAdmin writes admin states set since the last apply (a peer node
// taking its far ends down or up, for the same controller-derived state)
// into Applied, so that re-applying it after a restart sets what was last
// set, not an older state. It reports whether Applied changed.
func (st *podRecord) followAdmin(up map[string]bool) (bool, error) {
	if st.Applied == nil || len(up) == 0 {
		return false, nil
	}
	req := &meshnetv1.ApplyPodRequest{}
	if err := protojson.Unmarshal(st.Applied, req); err != nil {
		return false, fmt.Errorf("decode last apply: %w", err)
	}
	changed := false
	for _, l := range req.GetLinks() {
		u, ok := up[l.GetInterface()]
		if !ok || l.State == nil {
			continue
		}
		state := apiState(u)
		if l.GetState() != state {
			l.State, changed = &state, true
		}
	}
	if !changed {
		return false, nil
	}
	applied, err := protojson.Marshal(req)
	if err != nil {
		return false, fmt.Errorf("encode last apply: %w", err)
	}
	st.Applied = applied
	return true, nil
}

type savedEnd struct {
	Routes []route        `json:"routes,omitempty"`
	Addrs  []netip.Prefix `json:"addrs,omitempty"`
}

type route struct {
	Dst    netip.Prefix `json:"dst"`
	Gw     netip.Addr   `json:"gw,omitzero"`
	Dev    string       `json:"dev,omitempty"`
	Metric int          `json:"metric,omitempty"`
	Table  int          `json:"table,omitempty"`
}

func fromLinksRoute(r links.Route) route {
	return route{Dst: r.Dst, Gw: r.Gw, Dev: r.Dev, Metric: r.Metric, Table: r.Table}
}

func (r route) links() links.Route {
	return links.Route{Dst: r.Dst, Gw: r.Gw, Dev: r.Dev, Metric: r.Metric, Table: r.Table}
}

// sameDst reports whether r and o are the same kernel route key (the kernel
// replaces a route with the same destination, metric and table).
func (r route) sameDst(o route) bool {
	return r.Dst.Masked() == o.Dst.Masked() && r.Metric == o.Metric && normTable(r.Table) == normTable(o.Table)
}

func normTable(t int) int {
	if t == 0 {
		return 254 // RT_TABLE_MAIN
	}
	return t
}

func fromSaved(s links.Saved) savedEnd {
	e := savedEnd{Addrs: s.Addrs}
	for _, r := range s.Routes {
		e.Routes = append(e.Routes, fromLinksRoute(r))
	}
	return e
}

func (e savedEnd) links() links.Saved {
	s := links.Saved{Addrs: e.Addrs}
	for _, r := range e.Routes {
		s.Routes = append(s.Routes, r.links())
	}
	return s
}

// load returns the pod's record for its current sandbox, read from the pod
// store as it is now (the caller holds the pod's lock): what was recorded
// for another sandbox keeps only what outlives a sandbox (routes, the last
// apply), not what belonged to its links.
func (rc *Reconciler) load(p podstore.Pod) (podRecord, error) {
	var st podRecord
	if cur, ok := rc.cfg.Store.Get(p.Key()); ok && len(cur.Runtime) > 0 {
		if err := json.Unmarshal(cur.Runtime, &st); err != nil {
			return podRecord{}, fmt.Errorf("decode record of pod %s: %w", p.Key(), err)
		}
	}
	if st.ContainerID != p.ContainerID {
		st.ContainerID = p.ContainerID
		st.Down = nil
		st.Distribution = nil
		st.LastError = nil
	}
	if st.Down == nil {
		st.Down = map[string]savedEnd{}
	}
	if st.Distribution == nil {
		st.Distribution = map[string]string{}
	}
	if st.LastError == nil {
		st.LastError = map[string]string{}
	}
	return st, nil
}

// saveRecord makes st the runtime part of p's record in the pod store,
// unless p is no longer wired here with that sandbox: a call that read the
// pod before its DEL must not write back what the DEL removed. The caller
// holds the pod's lock.
func (rc *Reconciler) saveRecord(p podstore.Pod, st podRecord) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode record of pod %s: %w", p.Key(), err)
	}
	_, err = rc.cfg.Store.SetRuntime(p.Key(), p.ContainerID, data)
	return err
}
