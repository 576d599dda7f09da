package labctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The routers of examples/frr-ospf as vtysh printed them once converged
// (testdata/ospf, read from a running lab): each has two neighbours.
var wantFRROSPF = map[string]int{"router1": 2, "router2": 2, "router3": 2}

func readOSPFViews(t *testing.T) []ospfView {
	t.Helper()
	var views []ospfView
	for _, r := range []string{"router1", "router2", "router3"} {
		f, err := os.Open(filepath.Join("testdata", "ospf", r+".json"))
		if err != nil {
			t.Fatal(err)
		}
		v, err := parseOSPFView(r, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	return views
}

func TestParseOSPFView(t *testing.T) {
	v := readOSPFViews(t)[0]
	if v.id != "10.10.10.1" || len(v.full) != 2 || len(v.p2p) != 2 || v.pending != 0 {
		t.Errorf("router1: id %q, full %v, p2p %v, pending %d; want 10.10.10.1 with 2 neighbours Full over point-to-point links", v.id, v.full, v.p2p, v.pending)
	}
	if len(v.lsas) != 3 {
		t.Fatalf("router1 has %d router-LSAs, want 3", len(v.lsas))
	}
	if got := v.lsas["10.10.10.3"]; got.seq != "80000003" || len(got.p2p) != 2 {
		t.Errorf("router3's LSA in router1's database: %+v, want seq 80000003 with 2 point-to-point links", got)
	}
	if _, err := parseOSPFView("router1", strings.NewReader(`{"neighbors":{}}`)); err == nil || !strings.Contains(err.Error(), "show ip ospf database router json") {
		t.Errorf("one JSON document of two: %v, want an error naming the command whose output is missing", err)
	}
}

func TestOSPFConverged(t *testing.T) {
	if err := ospfConverged(readOSPFViews(t), wantFRROSPF); err != nil {
		t.Errorf("the converged lab: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(views []ospfView)
		want   string
	}{{
		// What the node tier saw: both adjacencies Full at router1, but
		// router3's LSA with the new adjacency not yet in every database,
		// and host1's traffic took router3.
		name: "an adjacency missing from one database's copy of an LSA",
		change: func(v []ospfView) {
			v[1].lsas["10.10.10.3"] = routerLSA{seq: "80000002", p2p: []string{"10.10.10.2"}}
		},
		want: "router2's copy of router3's router-LSA lacks its adjacency to 10.10.10.1",
	}, {
		name: "databases that differ",
		change: func(v []ospfView) {
			l := v[2].lsas["10.10.10.1"]
			l.seq = "80000008"
			v[2].lsas["10.10.10.1"] = l
		},
		want: "router3 holds router1's router-LSA 80000008, router1 holds 80000007",
	}, {
		name:   "an LSA still in flight",
		change: func(v []ospfView) { v[0].full, v[0].pending = v[0].full[:1], 1 },
		want:   "router1 has 1 of 2 OSPF neighbours Full and synchronised",
	}, {
		name:   "a router without its LSA",
		change: func(v []ospfView) { delete(v[2].lsas, "10.10.10.2") },
		want:   "router3 lacks the router-LSA of router2 (10.10.10.2)",
	}, {
		name:   "ospfd without a router ID",
		change: func(v []ospfView) { v[1].id = "" },
		want:   "router2 has no OSPF router ID yet",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			views := readOSPFViews(t)
			tc.change(views)
			err := ospfConverged(views, wantFRROSPF)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
