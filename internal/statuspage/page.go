package statuspage

import (
	_ "embed"
	"net/http"
	"strconv"
)

//go:embed page.html
var page []byte

// Handler serves the page. It sends no caching headers that would keep an
// old page after an upgrade, and a content security policy that allows
// nothing from outside the node.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(page)))
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(page)
	})
}
