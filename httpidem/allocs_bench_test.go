package httpidem

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/memstore"
)

// Allocation ceilings of the hot path, over the bare handler's in the same
// run (a new httptest request and recorder per request, as a server gives
// a handler; memstore). BenchmarkAllocsPinned fails when a count goes
// over, never on a time, so CI runs it with -benchtime 1x. Lower them
// when the code gets cheaper; raising one needs a reason in the commit.
//
// The store-call deadlines (Config.StoreTimeout) cost no timer on an
// in-process store (memstore: see idem.Claimer.StoreTimeout), and the memory
// budget's charge allocates nothing while nobody waits for room: a first
// request is bare + 10, a replay bare + 0. The tenth is the handler's
// context carrying the request's fingerprint (RequestFingerprint, which a
// service keeps so that its resolver answers can be tied to the request). A network store's calls keep
// their deadlines (a context.WithTimeout each), which this benchmark does
// not measure.
const (
	maxFirstAllocsOverBare  = 10
	maxReplayAllocsOverBare = 0
)

func BenchmarkAllocsPinned(b *testing.B) {
	const body = `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
	s := memstore.New(nil)
	defer s.Close()
	m, err := New(s, &Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	bare := benchHandler()
	mw := m.Handler(benchHandler())
	serve := func(h http.Handler, key string) {
		r := httptest.NewRequest(http.MethodPost, "http://svc/charges", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer sk_test_1")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d", w.Code)
		}
	}
	serve(mw, "pinned-replay") // stored: every later request with it replays
	round := 0
	for b.Loop() {
		// AllocsPerRun runs its func once more than asked (a warm-up).
		keys := make([]string, 201)
		for i := range keys {
			keys[i] = "pinned-" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
		}
		round++
		next := 0
		bareN := testing.AllocsPerRun(200, func() { serve(bare, "pinned-replay") })
		first := testing.AllocsPerRun(200, func() { serve(mw, keys[next]); next++ })
		replay := testing.AllocsPerRun(200, func() { serve(mw, "pinned-replay") })
		b.ReportMetric(bareN, "bare-allocs/req")
		b.ReportMetric(first, "first-allocs/req")
		b.ReportMetric(replay, "replay-allocs/req")
		if first > bareN+maxFirstAllocsOverBare {
			b.Errorf("a first request makes %v allocations, bare %v: over the ceiling of bare + %d", first, bareN, maxFirstAllocsOverBare)
		}
		if replay > bareN+maxReplayAllocsOverBare {
			b.Errorf("a replay makes %v allocations, bare %v: over the ceiling of bare + %d", replay, bareN, maxReplayAllocsOverBare)
		}
	}
}
