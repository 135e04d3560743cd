package idemclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/memstore"
)

// A service behind httpidem charges a card; the first answer is lost on
// the way back. The client retries with the same key and gets the stored
// answer: one charge.
func Example() {
	store := memstore.New(nil)
	defer store.Close()
	mw, _ := httpidem.New(store, &httpidem.Config{SharedAnonymousScope: true})
	var charges atomic.Int64
	service := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", n)
	}))
	var lost atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lost.CompareAndSwap(false, true) {
			service.ServeHTTP(httptest.NewRecorder(), r) // it acts...
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close() // ...and the answer never arrives
			return
		}
		service.ServeHTTP(w, r)
	}))
	defer srv.Close()

	tr, err := idemclient.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Post(srv.URL+"/charges", "text/plain", strings.NewReader("5 EUR"))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "replayed:", idemclient.Replayed(resp))
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201 charge 1 replayed: true
	// charges: 1
}

// A business key, given through the context, survives a restart of the
// client: the same order number is the same operation.
func ExampleWithKey() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "key %s", r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	tr, _ := idemclient.New(&idemclient.Config{Spelling: idemclient.Bare})
	client := &http.Client{Transport: tr}

	ctx := idemclient.WithKey(context.Background(), "order-2026-0042")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body), "|", idemclient.Key(resp))
	// Output: key order-2026-0042 | order-2026-0042
}

// The service may or may not have acted: the error carries the key to look
// the operation up with.
func ExampleOutcomeUnknownError() {
	store := memstore.New(nil)
	defer store.Close()
	mw, _ := httpidem.New(store, &httpidem.Config{SharedAnonymousScope: true})
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpidem.OutcomeUnknown(w, errors.New("the payment provider hung up"))
	})))
	defer srv.Close()
	tr, _ := idemclient.New(nil)
	client := &http.Client{Transport: tr}

	ctx := idemclient.WithKey(context.Background(), "order-17")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
	_, err := client.Do(req)
	var unknown *idemclient.OutcomeUnknownError
	if errors.As(err, &unknown) {
		fmt.Println("look up", unknown.Key, "- status", unknown.Status)
	}
	// Output: look up order-17 - status 502
}

// A shared budget bounds the retries of several clients together.
func ExampleNewBudget() {
	budget, err := idemclient.NewBudget(0.1, 10) // 10% of requests, plus 10
	if err != nil {
		log.Fatal(err)
	}
	payments, _ := idemclient.New(&idemclient.Config{Budget: budget})
	orders, _ := idemclient.New(&idemclient.Config{Budget: budget})
	fmt.Println(payments.Budget() == orders.Budget(), budget.Tokens())
	// Output: true 10
}

// An observer sees each attempt and what follows it.
func ExampleObserverFunc() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	tr, _ := idemclient.New(&idemclient.Config{Observer: idemclient.ObserverFunc(func(ctx context.Context, e idemclient.Event) {
		if e.Kind == idemclient.EventAttempt {
			fmt.Println("attempt", e.Attempt, e.Status, e.Decision, e.Reason)
		}
	})})
	resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "text/plain", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	// Output:
	// attempt 1 503 retry unavailable
	// attempt 2 201 done
}
