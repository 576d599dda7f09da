package relay

import (
	"net/url"
	"testing"
)

// TestWatchParam reads watch as the API server does, which authorized the
// request as a watch or a list by the same reading.
func TestWatchParam(t *testing.T) {
	for q, want := range map[string]bool{
		"": false, "watch=true": true, "watch=1": true, "watch=True": true, "watch=yes": true,
		"watch=false": false, "watch=FALSE": false, "watch=0": false, "watch=0&watch=true": false, "pod=r1": false,
	} {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := watchParam(v); got != want {
			t.Errorf("watchParam(%q) = %v, want %v", q, got, want)
		}
	}
}
