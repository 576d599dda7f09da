package daemon

import "testing"

func TestWithPorts(t *testing.T) {
	for _, c := range []struct {
		list    string
		want    string
		changed bool
	}{
		{"", "51111,51112", true},
		{"8080", "8080,51111,51112", true},
		{"51100-51200", "51100-51200", false},
		{"51111", "51111,51112", true},
		{"51112,51111", "51112,51111", false},
	} {
		got, changed := withPorts(c.list, 51111, 51112)
		if got != c.want || changed != c.changed {
			t.Errorf("withPorts(%q) = %q, %v; want %q, %v", c.list, got, changed, c.want, c.changed)
		}
	}
}
