package restapi

import (
	"net/url"
	"testing"
	"time"

	meshnetv1 "github.com/meshnet/meshnet/api/proto/meshnet/v1"
)

// TestCaptureParams: a capture's query is read into its request, and each
// parameter it cannot take is refused, named.
func TestCaptureParams(t *testing.T) {
	var req meshnetv1.CaptureLinkRequest
	q := url.Values{"max_packets": {"10"}, "duration": {"5s"}, "snap_length": {"96"}, "filter": {"icmp"}}
	if err := CaptureParams(q, &req); err != nil {
		t.Fatal(err)
	}
	if req.GetMaxPackets() != 10 || req.GetDuration().AsDuration() != 5*time.Second || req.GetSnapLength() != 96 || req.GetFilter() != "icmp" {
		t.Errorf("request %v, want 10 packets, 5s, 96 bytes, icmp", &req)
	}
	for q, want := range map[string]string{
		"max_packets=ten":  `max_packets: "ten" is not a whole number of packets`,
		"snap_length=-1":   `snap_length: "-1" is not a whole number of bytes`,
		"duration=5":       `duration: "5" is not a duration like "5s" or "1m"`,
		"count=3&filter=x": "count: unknown query parameter (known: max_packets, duration, snap_length, filter)",
	} {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		if err := CaptureParams(v, &meshnetv1.CaptureLinkRequest{}); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", q, err, want)
		}
	}
	if err := KnownParams(url.Values{"b": nil, "a": nil}); err == nil || err.Error() != "a: unknown query parameter (this request takes none)" {
		t.Errorf("KnownParams with none known: %v", err)
	}
}
