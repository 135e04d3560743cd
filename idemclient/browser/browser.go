// Package browser embeds idem.js, the browser half of idempotency: a
// small, dependency-free ES module that gives each form or action a key
// when it is shown, keeps it across double clicks, retries and a reload
// (sessionStorage), retries fetch by the rules of package idemclient, and
// gives the key up once the action has a final answer. Keys and pending
// requests belong to one tab and to the session the page names
// (protect(form, {session})); a request left pending by a reload is sent
// again only on the user's next submit, in the same session.
//
// idem proxy serves it at an opt-in path (idem proxy --client-js
// /_idem/idem.js); a Go service serves it with Handler; any page may also
// copy the file and serve it itself.
//
// # Use
//
//	<form id="pay" method="post" action="/payments">…</form>
//	<script type="module">
//	  import { protect } from "/_idem/idem.js";
//	  const form = document.getElementById("pay");
//	  protect(form, { session: currentUserId });
//	  form.addEventListener("idem:done", (e) => show(e.detail.status, e.detail.body));
//	  form.addEventListener("idem:unknown", (e) => lookUp(e.detail.key));
//	</script>
//
// idemFetch(url, init, {action | key}) is the same retrying fetch for
// scripts without a form. docs/client.md has the rules; the module is
// tested in headless Chromium against a real idem proxy (double clicks, a
// reload in the middle of a request, a connection dropped after the
// service acted: one effect each; a user change in one tab and a tab
// opened with window.open: no shared key).
package browser

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strconv"
)

// Source is idem.js.
//
//go:embed idem.js
var Source []byte

var etag = func() string {
	sum := sha256.Sum256(Source)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// Handler serves idem.js to GET and HEAD requests (any path), as
// text/javascript with an ETag; other methods get 405.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Length", strconv.Itoa(len(Source)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(Source)
	})
}
