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

// A retried POST runs once; the retry gets the first response back.
func Example() {
	store := memstore.New(nil) // sqlstore, redisstore or tiered in production
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	charges := 0
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	}))

	for range 2 {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":4200}`))
		r.Header.Set("Authorization", "Bearer sk_alice")
		r.Header.Set("Idempotency-Key", `"order-17"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed="" {"charge":1}
	// 201 replayed="true" {"charge":1}
	// charges: 1
}

// The same key with another body is refused with 422 and a problem
// document whose type clients can switch on.
func Example_mismatch() {
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))

	for _, body := range []string{`{"amount":4200}`, `{"amount":9900}`} {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "order-18")
		r.Header.Set("Authorization", "Bearer customer-7") // the caller: keys are scoped by it
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			var p struct{ Type string }
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				panic(err)
			}
			fmt.Println(w.Code, w.Header().Get("Content-Type"), p.Type == httpidem.ProblemMismatch)
			continue
		}
		fmt.Println(w.Code, w.Body)
	}
	// Output:
	// 200 ok
	// 422 application/problem+json true
}

func ExampleParseKey() {
	for _, v := range []string{`"8e03978e-40d5"`, `8e03978e-40d5`, `"pay\"42\""`, `"a b"`, `""`, `"a";p=1`} {
		id, err := httpidem.ParseKey(v)
		fmt.Printf("%-16s -> %q %v\n", v, id, err)
	}
	// Output:
	// "8e03978e-40d5"  -> "8e03978e-40d5" <nil>
	// 8e03978e-40d5    -> "8e03978e-40d5" <nil>
	// "pay\"42\""      -> "pay\"42\"" <nil>
	// "a b"            -> "" idem: invalid key: key has a byte 0x20 at offset 1; only visible ASCII (0x21-0x7e) is allowed
	// ""               -> "" idem: invalid key: key is empty
	// "a";p=1          -> "" idem: invalid key: unexpected ';' after the sf-string at offset 3 (parameters and lists are not accepted)
}
