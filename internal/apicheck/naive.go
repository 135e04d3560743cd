package apicheck

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Naive is a deliberately non-idempotent API, for trying the checker and
// for its tests: POST (or PATCH) /charges (or /charges/anything) creates a
// charge every time
// (?sleep=DURATION makes it slow, ?fail=1 answers 500 without an effect),
// sets a session cookie, and GET /stats counts the charges. It knows
// nothing of keys.
type Naive struct{ charges atomic.Int64 }

// ServeHTTP implements http.Handler.
func (n *Naive) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"charges":%d}`, n.charges.Load())
		return
	}
	if r.URL.Path != "/charges" && !strings.HasPrefix(r.URL.Path, "/charges/") {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
		time.Sleep(d)
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("fail") != "" {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"upstream failed at %d"}`, time.Now().UnixNano())
		return
	}
	id := n.charges.Add(1)
	http.SetCookie(w, &http.Cookie{Name: "session", Value: fmt.Sprint("s", id)})
	w.Header().Set("Location", fmt.Sprintf("/charges/ch_%d", id))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"ch_%d","request":%q}`, id, body)
}
