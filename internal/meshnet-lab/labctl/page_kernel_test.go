//go:build kernel

package labctl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meshnet/meshnet/internal/topofile"
)

// chromium is Debian's Chromium, which hack/deps.sh installs.
const chromium = "/usr/bin/chromium"

// Edge colours of the page (topology.css), as getComputedStyle reports them.
const (
	pageGreen = "rgb(26, 127, 55)"
	pageRed   = "rgb(207, 34, 46)"
)

// page is the topology page open in headless Chromium.
type page struct {
	t   *testing.T
	ctx context.Context
	// close stops the browser, before what it shows goes away; the test's
	// end calls it too.
	close func()
}

// pageHelpers are functions the test's expressions use: the drawn nodes and
// edges, and an edge's state and colour by id.
const pageHelpers = `
const nodes = () => [...document.querySelectorAll('#graph g.node')];
const edges = () => [...document.querySelectorAll('#graph g.edges > g')];
const edge = id => document.querySelector('#graph g.edges > g[data-id=' + JSON.stringify(id) + ']');
const stroke = id => edge(id) ? getComputedStyle(edge(id).querySelector('path.edge')).stroke : '';
`

// openPage opens url in headless Chromium, started with the flags this
// machine's closed network needs. An uncaught exception or an error in the
// page's console fails the test.
func openPage(t *testing.T, url string) *page {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("headless Chromium: %v (hack/deps.sh installs Debian's chromium package)", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // the tier runs as root
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	var (
		mu       sync.Mutex
		problems []string
		done     = make(chan struct{})
	)
	messages := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	p := &page{t: t, ctx: ctx}
	p.close = sync.OnceFunc(func() {
		cancel()
		cancelAlloc()
		<-done
		for _, p := range problems {
			t.Errorf("the page's console: %s", p)
		}
	})
	t.Cleanup(p.close)
	p.do(chromedp.Navigate(url))
	t.Logf("opened %s in %s", url, chromium)
	return p
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("chromium: %v", err)
	}
}

// eval evaluates a JavaScript expression (pageHelpers in scope) into out.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T]("(() => {"+pageHelpers+"return ("+expr+");})()"))
	if err != nil {
		p.t.Fatalf("chromium: evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a boolean expression until it holds, and returns how long
// that took; it fails the test, with the page's status line, after timeout.
func (p *page) waitFor(what, expr string, timeout time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	for !eval[bool](p, expr) {
		if time.Since(start) > timeout {
			status := eval[string](p, `document.getElementById('status').textContent`)
			p.screenshot("timeout.png")
			p.t.Fatalf("page: %s: not within %v (status line: %q)", what, timeout, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// clickEdge clicks the middle of a link's line, as a user would.
func (p *page) clickEdge(id string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#graph g.edges > g[data-id=%q] path.edge-hit`, id))))
}

// screenshot saves the page as a test artefact (go test -artifacts keeps
// it: hack/test.sh puts it under the tier's results) and logs its path.
func (p *page) screenshot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("chromium: screenshot: %v", err)
	}
	path := filepath.Join(p.t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// guideCommand is the guide's command line that contains every one of
// words, run as printed.
func guideCommand(t *testing.T, guide string, words ...string) {
	t.Helper()
	for _, line := range strings.Split(guide, "\n") {
		if !strings.HasPrefix(line, "  ") || !containsAll(line, words) {
			continue
		}
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "  #")
		if out, err := exec.Command("bash", "-o", "pipefail", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return
	}
	t.Fatalf("the guide has no command with %q:\n%s", words, guide)
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// edgeID is the data API's id of a link between two pods: the pod with the
// smaller name is its source.
func edgeID(l topofile.Link) string {
	a, b := l.Endpoints[0], l.Endpoints[1]
	if b.Name < a.Name {
		a, b = b, a
	}
	return a.Name + ":" + a.Intf + "--" + b.Name + ":" + b.Intf
}

// TestKernelTopologyPageInChromium opens the topology page the guide of an
// examples/ring-10 lab prints, in headless Chromium: ten pods and ten links
// with their names, every link green; the guide's grpcurl cable pull turns
// that link red within 2 s and its cable back in green again; a click on the
// link shows both of its ends as their kernels have them.
func TestKernelTopologyPageInChromium(t *testing.T) {
	const ring = "examples/ring-10/topology.yml"
	data, err := os.ReadFile(repoFile(t, ring))
	if err != nil {
		t.Fatal(err)
	}
	f, err := topofile.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var wantNodes, wantEdges []string
	for _, l := range f.Links {
		wantEdges = append(wantEdges, edgeID(l))
		for _, e := range l.Endpoints {
			if !slices.Contains(wantNodes, e.Name) {
				wantNodes = append(wantNodes, e.Name)
			}
		}
	}
	slices.Sort(wantNodes)
	slices.Sort(wantEdges)

	_, guide := labUp(t, buildLab(t), ring)
	p := openPage(t, pageURL(t, guide))
	p.waitFor("10 pods and 10 links drawn, every pod and link green",
		`nodes().length === 10 && edges().length === 10 &&
		 nodes().every(n => n.classList.contains('color-green')) &&
		 edges().every(e => e.dataset.state === 'up')`, 30*time.Second)
	type drawing struct {
		Nodes  []string `json:"nodes"`
		Titles []string `json:"titles"`
		Edges  []string `json:"edges"`
	}
	got := eval[drawing](p, `({nodes: nodes().map(n => n.dataset.id).sort(), titles: nodes().map(n => n.querySelector('.title').textContent).sort(),
		edges: edges().map(e => e.dataset.id).sort()})`)
	if !slices.Equal(got.Nodes, wantNodes) || !slices.Equal(got.Titles, wantNodes) || !slices.Equal(got.Edges, wantEdges) {
		t.Errorf("page draws nodes %v (titles %v) and edges %v, want %v and %v", got.Nodes, got.Titles, got.Edges, wantNodes, wantEdges)
	}

	// The guide's own cable pull, its first link between pods; first its
	// ping, whose traffic shows as the link's rate.
	l := f.Links[0]
	id := edgeID(l)
	guideCommand(t, guide, "ping -c 3")
	p.waitFor("the pinged link's rate on its edge", fmt.Sprintf(
		`/[0-9.]+ (bit|kbit|Mbit)\/s/.test(document.querySelector('#graph g.labels g[data-id=' + JSON.stringify(%q) + '] text.edge-label').textContent)`, id), 5*time.Second)
	isColour := func(colour, state string) string {
		return fmt.Sprintf(`stroke(%q) === %q && edge(%q).dataset.state === %q`, id, colour, id, state)
	}
	if stroke := eval[string](p, fmt.Sprintf(`stroke(%q)`, id)); stroke != pageGreen {
		t.Errorf("link %s is drawn %s while up, want green (%s)", id, stroke, pageGreen)
	}
	guideCommand(t, guide, "grpcurl", "LINK_STATE_DOWN")
	red := p.waitFor("the pulled link red", isColour(pageRed, "down"), 5*time.Second)
	t.Logf("link %s red %v after grpcurl's SetLinkState DOWN returned", id, red.Round(time.Millisecond))
	if red > 2*time.Second {
		t.Errorf("link %s turned red %v after the cable pull, want within 2s", id, red)
	}

	// Both ends of the pulled link, from their kernels.
	p.clickEdge(id)
	a, b := l.Endpoints[0], l.Endpoints[1]
	p.waitFor("both ends of the clicked link", fmt.Sprintf(
		`!document.getElementById('detail').hidden && [%q, %q, %q, %q, 'down'].every(s => document.getElementById('detail-ends').textContent.includes(s))`,
		a.IP, b.IP, a.Intf, b.Intf), 5*time.Second)
	rows := eval[[][]string](p, `[...document.querySelectorAll('#detail-ends tr')].map(r => [...r.children].map(c => c.textContent))`)
	t.Logf("detail of %s:\n%s", id, table(rows))
	p.screenshot("ring-10-link-down.png")

	guideCommand(t, guide, "grpcurl", "LINK_STATE_UP")
	green := p.waitFor("the link green again", isColour(pageGreen, "up"), 5*time.Second)
	t.Logf("link %s green %v after SetLinkState UP returned", id, green.Round(time.Millisecond))
	if green > 2*time.Second {
		t.Errorf("link %s turned green %v after the cable went back in, want within 2s", id, green)
	}
	p.screenshot("ring-10.png")
}

func table(rows [][]string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, " | "))
		b.WriteByte('\n')
	}
	return b.String()
}
