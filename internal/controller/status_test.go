package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshnet/meshnet/api/v1beta1"
)

// TestKeepZeroValuesAppliesFalseCarrier checks that a link without carrier
// is applied as carrier: false, not left out (which would keep meshnetd's
// value from the CNI ADD).
func TestKeepZeroValuesAppliesFalseCarrier(t *testing.T) {
	st := v1beta1.TopologyStatus{Links: []v1beta1.LinkStatus{{UID: 1, LocalIntf: "eth1", State: v1beta1.LinkDown}}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1beta1.Topology{Status: st})
	if err != nil {
		t.Fatal(err)
	}
	keepZeroValues(u, st)
	status := u["status"].(map[string]any)
	l := status["links"].([]any)[0].(map[string]any)
	if c, ok := l["carrier"]; !ok || c != false {
		t.Errorf("carrier = %v (present %v), want false", c, ok)
	}
	if e, ok := l["last_error"]; !ok || e != "" {
		t.Errorf("last_error = %v (present %v), want empty", e, ok)
	}
	if d, ok := status["down_links"]; !ok || d != int64(0) {
		t.Errorf("down_links = %v (present %v), want 0", d, ok)
	}
}
