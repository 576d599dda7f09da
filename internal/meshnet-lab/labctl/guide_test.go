//go:build kernel || node

package labctl_test

import (
	"strings"
	"testing"
)

// pageURL is the topology page's address as the guide prints it.
func pageURL(t *testing.T, guide string) string {
	t.Helper()
	for _, line := range strings.Split(guide, "\n") {
		if i := strings.Index(line, "://"); i >= 0 && strings.HasPrefix(line, "Topology page") {
			i = strings.LastIndex(line[:i], " ") + 1
			return strings.TrimSpace(line[i:])
		}
	}
	t.Fatalf("the guide prints no topology page:\n%s", guide)
	return ""
}
