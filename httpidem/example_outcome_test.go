package httpidem_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

// A handler whose call to the card processor timed out after the request
// was sent cannot tell whether the customer was charged. It reports the
// outcome as unknown: by default the key is held, and every retry gets the
// same 504 outcome-unknown answer instead of charging again.
func ExampleOutcomeUnknown() {
	store := memstore.New(nil)
	defer store.Close()
	mw, _ := httpidem.New(store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	calls := 0
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		// ... the processor's answer never came:
		httpidem.OutcomeUnknown(w, fmt.Errorf("charge: %w", httpidem.ErrUpstreamTimeout))
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/charges", nil)
		r.Header.Set("Authorization", "Bearer sk_alice")
		r.Header.Set("Idempotency-Key", `"order-19"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// 504 false
	// 504 true
	// handler calls: 1
}

// Without caller identity a keyed request is refused: anonymous callers do
// not share a keyspace unless Config.SharedAnonymousScope says so.
func ExampleConfig_sharedAnonymousScope() {
	store := memstore.New(nil)
	defer store.Close()
	for _, shared := range []bool{false, true} {
		mw, _ := httpidem.New(store, &httpidem.Config{SharedAnonymousScope: shared, Logger: slog.New(slog.DiscardHandler)})
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
		r := httptest.NewRequest("POST", "/signup", nil)
		r.Header.Set("Idempotency-Key", "anon-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(shared, w.Code)
	}
	// Output:
	// false 400
	// true 201
}
