package httpidem_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

// post sends a POST through h as caller "Bearer sk_alice" and prints the
// answer.
func post(h http.Handler, key, body string, header ...string) {
	r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk_alice")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
}

// counter is a handler that answers how often it ran.
func counter() http.Handler {
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
}

// SkipFunc lets chosen requests of a protected method through untouched:
// here a dry run, which must run every time and never be stored.
func Example_skipFunc() {
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{
		Logger:   slog.New(slog.DiscardHandler),
		SkipFunc: func(r *http.Request) bool { return r.URL.Query().Has("dry_run") || r.Header.Get("X-Dry-Run") == "1" },
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(counter())
	post(h, "order-1", `{}`, "X-Dry-Run", "1")
	post(h, "order-1", `{}`, "X-Dry-Run", "1")
	post(h, "order-1", `{}`)
	post(h, "order-1", `{}`)
	// Output:
	// 201 replayed="" run 1
	// 201 replayed="" run 2
	// 201 replayed="" run 3
	// 201 replayed="true" run 3
}

// RefusalFunc writes the middleware's own answers in the API's error
// format. Retry-After and Cache-Control: no-store are set before it runs.
func Example_refusalFunc() {
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{
		Logger:     slog.New(slog.DiscardHandler),
		RequireKey: true,
		RefusalFunc: func(w http.ResponseWriter, r *http.Request, p httpidem.Problem) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(p.Status)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": p.Name(), "message": p.Title}})
		},
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	post(h, "", `{"amount":1}`)
	post(h, "order-2", `{"amount":1}`)
	post(h, "order-2", `{"amount":2}`)
	// Output:
	// 400 replayed="" {"error":{"code":"missing-key","message":"Idempotency-Key header required"}}
	// 200 replayed="" ok
	// 422 replayed="" {"error":{"code":"key-reused","message":"Idempotency-Key reused with a different request"}}
}

// FingerprintPointers: a retry that changes only fields outside the
// pointers (a timestamp) gets the first response; one that changes the
// amount is refused.
func Example_fingerprintPointers() {
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{
		Logger:              slog.New(slog.DiscardHandler),
		FingerprintPointers: []string{"/amount", "/currency"},
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(counter())
	post(h, "order-3", `{"amount":100,"currency":"EUR","sent_at":"09:00:01"}`)
	post(h, "order-3", `{"currency":"EUR","amount":100,"sent_at":"09:00:09"}`)
	post(h, "order-3", `{"amount":900,"currency":"EUR","sent_at":"09:00:12"}`)
	// Output:
	// 201 replayed="" run 1
	// 201 replayed="true" run 1
	// 422 replayed="" {"type":"https://github.com/idemkit/idem/blob/main/httpidem/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"this key was used for a request with another method, path, query or body"}
}

// KeyPointer: clients that send the key in the payload (request_id) are
// protected as if they had sent the header with that value, which names
// the same record. A request with neither is refused (RequireKey; without
// it, such a request passes through unprotected). The fingerprint
// here covers the amount only, so that a retry that moves the key from
// the body to the header is the same request.
func Example_keyPointer() {
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{
		Logger:              slog.New(slog.DiscardHandler),
		KeyPointer:          "/request_id",
		FingerprintPointers: []string{"/amount"},
		RequireKey:          true,
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(counter())
	post(h, "", `{"request_id":"rq-4","amount":100}`)
	post(h, "", `{"request_id":"rq-4","amount":100}`)
	post(h, "rq-4", `{"amount":100}`)
	post(h, "", `{"amount":100}`)
	// Output:
	// 201 replayed="" run 1
	// 201 replayed="true" run 1
	// 201 replayed="true" run 1
	// 400 replayed="" {"type":"https://github.com/idemkit/idem/blob/main/httpidem/problems.md#missing-key","title":"Idempotency-Key header required","status":400,"detail":"send an Idempotency-Key header, or the key at /request_id in the JSON body"}
}
