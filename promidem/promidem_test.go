package promidem_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/promidem"
)

// sample returns the value of the series of family name whose label has
// value; for a histogram, its sample count.
func sample(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if h := m.GetHistogram(); h != nil {
						return float64(h.GetSampleCount())
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

func labels(t *testing.T, g prometheus.Gatherer, name, label string) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label {
						out = append(out, l.GetValue())
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// newMiddleware is the middleware over memstore with its metrics on reg;
// a nil reg means no observer at all.
func newMiddleware(t testing.TB, reg prometheus.Registerer, h http.Handler) http.Handler {
	t.Helper()
	cfg := &httpidem.Config{Logger: slog.New(slog.DiscardHandler)}
	if reg != nil {
		m, err := promidem.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Observer = m
	}
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	mw, err := httpidem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw.Handler(h)
}

func post(h http.Handler, key string) int {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1}`))
	r.Header.Set("Authorization", "Bearer storm")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// A storm of duplicates: each key's first request holds its claim until
// every duplicate has been answered, so the counts are exact: one
// executed per key, the others in flight; a second wave replays.
func TestStormCounts(t *testing.T) {
	t.Parallel()
	const keys, dups = 8, 10
	reg := prometheus.NewPedanticRegistry()
	answered := map[string]*sync.WaitGroup{}
	for k := range keys {
		wg := new(sync.WaitGroup)
		wg.Add(dups - 1)
		answered["k"+strconv.Itoa(k)] = wg
	}
	h := newMiddleware(t, reg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		wg := answered[r.Header.Get("X-Key")] // read only: written before the storm
		if wg == nil {                        // the keyless request
			w.WriteHeader(http.StatusCreated)
			return
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second): // the counts below then fail
		}
		w.WriteHeader(http.StatusCreated)
	}))
	h = withKeyHeader(h)
	var start, all sync.WaitGroup
	start.Add(1)
	codes := make([]int, keys*dups)
	for i := range codes {
		all.Go(func() {
			start.Wait()
			key := "k" + strconv.Itoa(i%keys)
			codes[i] = post(h, key)
			if codes[i] != http.StatusCreated {
				answered[key].Done()
			}
		})
	}
	start.Done()
	all.Wait()
	for _, k := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
		if c := post(h, "k"+strconv.Itoa(k)); c != http.StatusCreated {
			t.Fatalf("retry of k%d: %d", k, c)
		}
	}
	if n := post(h, ""); n != http.StatusCreated {
		t.Fatalf("keyless: %d", n)
	}
	for outcome, want := range map[string]float64{
		"executed": keys, "in_flight": keys * (dups - 1), "replayed": keys, "keyless": 1,
		"mismatch": 0, "released": 0, "store_error": 0,
	} {
		if got := sample(t, reg, "idem_http_requests_total", "outcome", outcome); got != want {
			t.Errorf("%s = %v, want %v", outcome, got, want)
		}
	}
	if got, want := sample(t, reg, "idem_http_store_duration_seconds", "op", "begin"), float64(keys*dups+keys); got != want {
		t.Errorf("%v Begin latencies, want %v", got, want)
	}
	if got := sample(t, reg, "idem_http_store_duration_seconds", "op", "complete"); got != keys {
		t.Errorf("%v Complete latencies, want %d", got, keys)
	}
}

// withKeyHeader copies the key into X-Key, which the storm's handler reads.
func withKeyHeader(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Key", strings.Trim(r.Header.Get("Idempotency-Key"), `"`))
		h.ServeHTTP(w, r)
	})
}

// The series are the ones idem proxy has always served: every outcome and
// op, at zero from the start.
func TestSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	newMiddleware(t, reg, http.NotFoundHandler())
	want := []string{"canceled", "executed", "fail_open", "in_flight", "keyless", "mismatch", "not_replayable",
		"outcome_unknown", "rejected", "released", "replayed", "skipped", "store_error"}
	if got := labels(t, reg, "idem_http_requests_total", "outcome"); !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	if got := labels(t, reg, "idem_http_store_duration_seconds", "op"); !slices.Equal(got, []string{"begin", "complete", "mark_started", "release"}) {
		t.Errorf("ops %v", got)
	}
}

func TestRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	if _, err := promidem.New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := promidem.New(reg)
	if err == nil || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Fatalf("second registration: %v", err)
	}
	configtest.Want(t, err, "promidem", "reg")
	_, err = promidem.NewInboxObserver(nil)
	configtest.Want(t, err, "promidem", "reg")
	// Wrapped registerers tell two sets apart.
	regw := prometheus.NewPedanticRegistry()
	for _, api := range []string{"a", "b"} {
		if _, err := promidem.New(prometheus.WrapRegistererWith(prometheus.Labels{"api": api}, regw)); err != nil {
			t.Fatal(err)
		}
	}
	// When the histogram cannot be registered, the counter is not left
	// behind.
	reg2 := prometheus.NewPedanticRegistry()
	reg2.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_http_store_duration_seconds", Help: "taken"}))
	if _, err := promidem.New(reg2); err == nil {
		t.Fatal("registered over a different collector")
	}
	if got := labels(t, reg2, "idem_http_requests_total", "outcome"); len(got) != 0 {
		t.Fatalf("the counter was left registered: %v", got)
	}
	// Unregistered metrics are a Collector to register later.
	m, err := promidem.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg3 := prometheus.NewPedanticRegistry()
	reg3.MustRegister(m)
	if got := labels(t, reg3, "idem_http_requests_total", "outcome"); len(got) != 13 {
		t.Fatalf("%d outcome series", len(got))
	}
}
