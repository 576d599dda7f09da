package links

import (
	"strings"
	"testing"
)

func TestVXLANMTU(t *testing.T) {
	for _, tc := range []struct {
		name              string
		requested, parent int
		ipv6              bool
		want              int
		errContains       string
	}{
		{name: "default v4", parent: 1500, want: 1450},
		{name: "default v6", parent: 1500, ipv6: true, want: 1430},
		{name: "jumbo default", parent: 9000, want: 8950},
		{name: "fits", requested: 1400, parent: 1500, want: 1400},
		{name: "exactly fits", requested: 1450, parent: 1500, want: 1450},
		{name: "too big v4", requested: 1451, parent: 1500, errContains: "exceeds parent mtu 1500 minus vxlan overhead 50 (max 1450)"},
		{name: "too big v6", requested: 1431, parent: 1500, ipv6: true, errContains: "max 1430"},
		{name: "too small", requested: 60, parent: 1500, errContains: "below the minimum"},
		{name: "tiny parent", parent: 100, errContains: "below the minimum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VXLANMTU(tc.requested, tc.parent, tc.ipv6)
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("VXLANMTU(%d, %d, %v) = %d, %v; want error containing %q", tc.requested, tc.parent, tc.ipv6, got, err, tc.errContains)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("VXLANMTU(%d, %d, %v) = %d, %v; want %d", tc.requested, tc.parent, tc.ipv6, got, err, tc.want)
			}
		})
	}
}
