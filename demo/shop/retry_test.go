package shop

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// On a busy machine the disciplined shop's stock lock can run out inside a
// normal request (its TTL is short, so that the storm's pauses outlast it),
// and the shop answers 503 "stock lock lost; retry" with Retry-After: 1.
// The storm's client used to retry a dozen times within about 2.5 s
// regardless, and a few seconds of load turned every retry into the same
// answer: "VIOLATION orders refused" for an order the shop had asked to be
// retried later. The client honours Retry-After, as a real one does: here
// the shop refuses every order for 4 s, and each is placed.
func TestClientHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	refuseUntil := time.Now().Add(4 * time.Second)
	var mu sync.Mutex
	orders := map[string]Order{} // request_id -> order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/form" {
			writeJSON(w, http.StatusOK, map[string]string{"form_token": "tok"})
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/orders" {
			http.NotFound(w, r)
			return
		}
		if time.Now().Before(refuseUntil) {
			problem(w, http.StatusServiceUnavailable, "stock lock lost; retry")
			return
		}
		var req struct {
			RequestID string `json:"request_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		mu.Lock()
		o, ok := orders[req.RequestID]
		if !ok {
			o = Order{ID: fmt.Sprintf("o-%d", len(orders)+1), RequestID: req.RequestID}
			orders[req.RequestID] = o
		}
		mu.Unlock()
		writeJSON(w, http.StatusCreated, o)
	}))
	t.Cleanup(srv.Close)

	cl := &client{base: srv.URL, http: srv.Client()}
	s := &stormState{acks: map[string]map[string]bool{}, orders: map[string]Order{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 4 {
		if _, ok := placeOne(ctx, cl, s, Disciplined, i, mrand.New(mrand.NewPCG(uint64(i), 1))); !ok {
			t.Errorf("order %d refused: %v", i, s.why)
		}
	}
	if n := s.refused.Load(); n > 0 {
		t.Errorf("%d orders refused: %v", n, s.why)
	}
}
