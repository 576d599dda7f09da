package labctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ospfView is one router's OSPF state as vtysh prints it in JSON: its
// neighbours and the router-LSAs of its link-state database.
type ospfView struct {
	router string // the pod
	// id is the router's OSPF router ID; "" before ospfd has one.
	id string
	// full lists the neighbours (router IDs) Full with nothing left to
	// exchange: no LSA waiting for an acknowledgement, requested or still
	// to be described.
	full []string
	// p2p lists those of full reached over a point-to-point network
	// (state Full/-, no designated router), which the router's own
	// router-LSA names; over a broadcast network it names the network.
	p2p []string
	// pending counts neighbours that are not Full, or are Full with
	// LSAs still in flight.
	pending int
	// lsas is its database's router-LSAs by advertising router.
	lsas map[string]routerLSA
}

// routerLSA is what a router-LSA says that routing depends on.
type routerLSA struct {
	seq string
	// p2p lists the router IDs of its point-to-point links.
	p2p []string
}

// ospfCommands are the vtysh commands whose output parseOSPFView reads.
var ospfCommands = []string{"show ip ospf neighbor json", "show ip ospf database router json"}

// parseOSPFView reads the two JSON documents that vtysh prints for
// ospfCommands, in their order.
func parseOSPFView(router string, out io.Reader) (ospfView, error) {
	var nbrs struct {
		Neighbors map[string][]struct {
			NbrState   string `json:"nbrState"`
			Retransmit int    `json:"linkStateRetransmissionListCounter"`
			Request    int    `json:"linkStateRequestListCounter"`
			DBSummary  int    `json:"databaseSummaryListCounter"`
		} `json:"neighbors"`
	}
	var db struct {
		RouterID         string `json:"routerId"`
		RouterLinkStates struct {
			Areas map[string][]struct {
				AdvertisingRouter string `json:"advertisingRouter"`
				Seq               string `json:"lsaSeqNumber"`
				RouterLinks       map[string]struct {
					LinkType         string `json:"linkType"`
					NeighborRouterID string `json:"neighborRouterId"`
				} `json:"routerLinks"`
			} `json:"areas"`
		} `json:"routerLinkStates"`
	}
	dec := json.NewDecoder(out)
	if err := dec.Decode(&nbrs); err != nil {
		return ospfView{}, fmt.Errorf("%s: %s: %w", router, ospfCommands[0], err)
	}
	if err := dec.Decode(&db); err != nil {
		return ospfView{}, fmt.Errorf("%s: %s: %w", router, ospfCommands[1], err)
	}
	v := ospfView{router: router, id: db.RouterID, lsas: map[string]routerLSA{}}
	for id, ns := range nbrs.Neighbors {
		for _, n := range ns {
			if strings.HasPrefix(n.NbrState, "Full") && n.Retransmit == 0 && n.Request == 0 && n.DBSummary == 0 {
				v.full = append(v.full, id)
				if n.NbrState == "Full/-" {
					v.p2p = append(v.p2p, id)
				}
			} else {
				v.pending++
			}
		}
	}
	for _, lsas := range db.RouterLinkStates.Areas {
		for _, l := range lsas {
			r := routerLSA{seq: l.Seq}
			for _, link := range l.RouterLinks {
				if strings.Contains(link.LinkType, "point-to-point") {
					r.p2p = append(r.p2p, link.NeighborRouterID)
				}
			}
			v.lsas[l.AdvertisingRouter] = r
		}
	}
	return v, nil
}

// ospfConverged says why the routers' OSPF has not converged, or nil once
// it has: every router has its wantFull neighbours Full with nothing left
// in flight, and every router's database holds the same router-LSAs, each
// listing every point-to-point adjacency of its router. From then on each router's
// next SPF run computes the shortest paths over the whole network. Full
// adjacencies alone are not enough: a router announces a new adjacency
// in its router-LSA only after its LSA throttle, and a path over it exists
// for the others once they have that LSA.
func ospfConverged(views []ospfView, wantFull map[string]int) error {
	var errs []error
	for _, v := range views {
		if v.id == "" {
			errs = append(errs, fmt.Errorf("%s has no OSPF router ID yet", v.router))
			continue
		}
		if len(v.full) < wantFull[v.router] || v.pending > 0 {
			errs = append(errs, fmt.Errorf("%s has %d of %d OSPF neighbours Full and synchronised", v.router, len(v.full), wantFull[v.router]))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	first := views[0]
	for _, v := range views {
		for _, w := range views {
			got, ok := v.lsas[w.id]
			if !ok {
				errs = append(errs, fmt.Errorf("%s lacks the router-LSA of %s (%s)", v.router, w.router, w.id))
				continue
			}
			for _, n := range w.p2p {
				if !slices.Contains(got.p2p, n) {
					errs = append(errs, fmt.Errorf("%s's copy of %s's router-LSA lacks its adjacency to %s", v.router, w.router, n))
				}
			}
			if want := first.lsas[w.id]; got.seq != want.seq {
				errs = append(errs, fmt.Errorf("%s holds %s's router-LSA %s, %s holds %s", v.router, w.router, got.seq, first.router, want.seq))
			}
		}
	}
	return errors.Join(errs...)
}
