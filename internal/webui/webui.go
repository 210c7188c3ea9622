// Package webui is tide's web dashboard: static assets embedded in the
// binary (go:embed) and served by the head at /ui/ on its own listener. The
// page is a client of the head's HTTP API, the same handlers the CLI calls:
// it reads /pools, /nodes, /instances, /events, /workers and /history, and
// long-polls /watch for changes. It adds no second path into the store and
// loads nothing from the network beyond the head.
//
// The assets themselves hold no data, so /ui/ is served without a token;
// every API call the page makes carries the token the user typed once
// (kept in sessionStorage, sent as an Authorization header, never in a URL).
//
// The SVG chart renderer (static/chart.js) is shared with tide simulate's
// HTML report, which inlines ChartJS.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// ChartJS is the source of the chart renderer, for pages that inline it
// (tide simulate's HTML report).
//
//go:embed static/chart.js
var ChartJS string

// Prefix is where the dashboard is served.
const Prefix = "/ui/"

// csp allows only the page's own assets and API calls to its own origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the embedded assets under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// Mount returns a handler that serves the dashboard at Prefix (and
// redirects /ui to it) and passes every other request to api.
func Mount(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Prefix, Handler())
	mux.Handle("GET /ui", http.RedirectHandler(Prefix, http.StatusMovedPermanently))
	mux.Handle("/", api)
	return mux
}
