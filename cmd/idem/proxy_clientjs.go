package main

import (
	"net/http"

	"github.com/idemkit/idem/idemclient/browser"
)

// withClientJS serves the browser helper at path (GET and HEAD), in front
// of the proxy; every other request goes to next. An empty path serves
// nothing.
func withClientJS(next http.Handler, path string) http.Handler {
	if path == "" {
		return next
	}
	js := browser.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			js.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
