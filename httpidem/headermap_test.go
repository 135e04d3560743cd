package httpidem

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem"
)

// TestHandlerHeadersInWriterMap: the handler writes its headers straight
// into the ResponseWriter's map when that map is empty. They reach the
// client only with the handler's own answer: a 503 because the result
// could not be stored, and an outcome-unknown answer, carry none of them;
// a header set by an outer middleware before the handler (a non-empty
// map) is kept out of the stored response, and so out of replays.
func TestHandlerHeadersInWriterMap(t *testing.T) {
	t.Parallel()
	handler := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Handler", "1")
		w.Header().Set("Connection", "close") // hop-by-hop: never stored, never sent by the recorder
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
	}
	t.Run("stored", func(t *testing.T) {
		e := newEnv(t, nil, handler)
		w := e.do("POST", "/x", "k1", "{}")
		if w.Code != http.StatusCreated || w.Header().Get("X-Handler") != "1" || w.Header().Get("Connection") != "" {
			t.Fatalf("first: %d %v", w.Code, w.Header())
		}
		w = e.do("POST", "/x", "k1", "{}")
		if w.Code != http.StatusCreated || w.Header().Get("X-Handler") != "1" || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("replay: %d %v", w.Code, w.Header())
		}
	})
	t.Run("not stored", func(t *testing.T) {
		e := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, complete: errDown} }, nil, handler)
		w := e.do("POST", "/x", "k1", "{}")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("X-Handler") != "" {
			t.Fatalf("store down at Complete: %d %v", w.Code, w.Header())
		}
	})
	t.Run("outcome unknown", func(t *testing.T) {
		e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Handler", "1")
			OutcomeUnknown(w, errDown)
		})
		w := e.do("POST", "/x", "k1", "{}")
		if w.Header().Get("X-Handler") != "" || w.Code < 500 {
			t.Fatalf("outcome unknown: %d %v", w.Code, w.Header())
		}
	})
	t.Run("outer header", func(t *testing.T) {
		e := newEnv(t, nil, handler)
		outer := func(id string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			w.Header().Set("X-Request-Id", id) // an outer middleware's
			e.h.ServeHTTP(w, req("POST", "/x", "k1", "{}"))
			return w
		}
		outer("a")
		w := outer("b")
		if got := w.Header().Get("X-Request-Id"); got != "b" || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("replay carries X-Request-Id %q (want this request's b): %v", got, w.Header())
		}
	})
}
