// Package topoview is meshnet's topology page: one static HTML page, its
// script and style, embedded in meshnetd and served on its HTTP port under
// /topology/. The page draws a namespace from the same Node Graph frames
// that Grafana reads (GET /v1/namespaces/{ns}/graph, polled), and shows both
// ends of a clicked edge (GET /v1/namespaces/{ns}/graph/edges/{id}); it
// needs no Grafana and no front-end build. It only reads. It polls every
// 500 ms (topology.js, pollMillis): with the data API's 1 s cache of kernel
// readings, a cable pull shows within 1.5 s and a round trip.
package topoview

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed page
var page embed.FS

// Handler serves the page's files; mount it so that it sees paths relative
// to the page ("/", "/topology.js"), as http.StripPrefix("/topology", h).
func Handler() http.Handler {
	sub, err := fs.Sub(page, "page")
	if err != nil {
		panic(err) // the embedded tree has a page directory: a build error
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page loads comes from meshnetd itself; nothing
		// from a data value can run as script.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
