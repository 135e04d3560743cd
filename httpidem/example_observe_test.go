package httpidem_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
)

// A hook on every decision: an audit line per request, and an alert when
// a key is reused for another request. It sees the hashed key, never the
// raw one.
func Example_observerFunc() {
	store := memstore.New(nil)
	defer store.Close()
	audit := observe.ObserverFunc(func(ctx context.Context, e observe.Event) {
		fmt.Printf("%s %s %s status=%d replayed=%v key-hashed=%v\n",
			e.Decision, e.Method, e.Path, e.Status, e.Replayed, len(e.Key()) == 16)
		if e.Decision == observe.DecisionMismatch {
			fmt.Println("ALERT: key reused with another request")
		}
	})
	mw, err := httpidem.New(store, &httpidem.Config{Observer: audit, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for _, body := range []string{`{"amount":4200}`, `{"amount":4200}`, `{"amount":9900}`} {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk_alice")
		r.Header.Set("Idempotency-Key", `"order-17"`)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// acquired POST /charges status=0 replayed=false key-hashed=true
	// executed POST /charges status=201 replayed=false key-hashed=true
	// replayed POST /charges status=201 replayed=true key-hashed=true
	// mismatch POST /charges status=422 replayed=false key-hashed=true
	// ALERT: key reused with another request
}
