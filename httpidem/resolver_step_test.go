package httpidem

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/step"
)

// A key held in a step (issue 38): the handler answers a step's
// *step.UnknownError with OutcomeUnknown. The held record names the step
// and the steps before it (never sent to the client); the resolve
// question carries the step, percent-encoded (a name with HTML and
// control characters); an answer for another step ("never happened", then
// a 2xx) is a lying answer and refused (the key stays held); the answer
// for the held step settles it.
// A key held with a cause that names no step sends no step.
func TestResolveHeldStep(t *testing.T) {
	t.Parallel()
	const name = "charge <b>\r\n\x00"
	var mu sync.Mutex
	var steps []string // the Idempotency-Step of each question, "-" when absent
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got := "-"
		if vs := r.Header.Values(ResolveStepHeader); len(vs) == 1 {
			got = vs[0]
		}
		steps = append(steps, got)
		switch {
		case got == "-":
			w.WriteHeader(http.StatusServiceUnavailable) // the plain key: ask again later
			return
		case len(steps) == 1: // "never happened", of another step
			w.Header().Set(ResolveStepHeader, "refund")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"type":%q,"status":404}`, ProblemNeverHappened)
			return
		case len(steps) == 2:
			w.Header().Set(ResolveStepHeader, "refund") // a record of another step
		default:
			w.Header().Set(ResolveStepHeader, got)
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge":"ch_1"}`)
	}))
	defer svc.Close()
	z := newResolveRig(t, svc, &Config{})
	z.h = z.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "plain" {
			OutcomeUnknown(w, errors.New("reset"))
			return
		}
		OutcomeUnknown(w, &step.UnknownError{Step: name, Finished: []string{"reserve"}})
	}))
	w := z.post("Bearer alice", "k", "{}")
	if w.Code != http.StatusBadGateway || w.Header().Get(heldStepHeader) != "" {
		t.Fatalf("first answer %d %v", w.Code, w.Header())
	}
	rec, err := z.s.Get(t.Context(), idem.MustKey(testScopeOf("Bearer alice"), "k"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := DecodeResponse(rec.Result)
	if err != nil || resp.Step.Name != name || !slices.Equal(resp.Step.Finished, []string{"reserve"}) || resp.Header.Get(heldStepHeader) != "" {
		t.Fatalf("held record: %+v, %v", resp, err)
	}
	waitFor(t, "the lying answers refused", func() bool { return z.count(ResolveRefused) == 2 })
	if st := z.state("Bearer alice", "k"); st != idem.StateHeld {
		t.Fatalf("after an answer for another step the key is %v, want held", st)
	}
	if w := z.post("Bearer alice", "k", "{}"); w.Code != http.StatusBadGateway || w.Header().Get(ReplayedHeader) != "true" || len(w.Header().Values(heldStepHeader)) != 0 {
		t.Fatalf("replay of the held step: %d %v", w.Code, w.Header())
	}
	waitFor(t, "the held step resolved", func() bool { return z.count(ResolveResult) == 1 })
	if w := z.post("Bearer alice", "k", "{}"); w.Code != http.StatusCreated || w.Body.String() != `{"charge":"ch_1"}` {
		t.Fatalf("retry after the resolution: %d %q", w.Code, w.Body)
	}
	if w := z.post("Bearer alice", "plain", "{}"); w.Code != http.StatusBadGateway {
		t.Fatalf("plain key: %d", w.Code)
	}
	waitFor(t, "the plain key asked about", func() bool { mu.Lock(); defer mu.Unlock(); return len(steps) == 4 })
	mu.Lock()
	defer mu.Unlock()
	want := url.PathEscape(name)
	if steps[0] != want || steps[1] != want || steps[2] != want || steps[3] != "-" {
		t.Fatalf("questions' %s: %q, want %q three times then none", ResolveStepHeader, steps, want)
	}
}

// A replay of a held step's record never shows the client the stored
// step, and records of earlier releases (the golden one) name no step.
func TestHeldStepRecordReplay(t *testing.T) {
	t.Parallel()
	held := encodeResponse(heldRecord(&storedResponse{Status: 502, Header: http.Header{}, OutcomeUnknown: true}, httptest.NewRequest("POST", "/c", nil), "s",
		idem.HeldStep{Name: "charge"}))
	resp, err := DecodeResponse(held)
	if err != nil || resp.Step.Name != "charge" {
		t.Fatalf("%+v %v", resp, err)
	}
	if b, err := EncodeResponse(201, http.Header{heldStepHeader: {`{"step":"forged"}`}}, nil); err != nil {
		t.Fatal(err)
	} else if r, _ := DecodeResponse(b); r.Step.Name != "" || r.Header.Get(heldStepHeader) != "" {
		t.Fatalf("EncodeResponse kept a forged step: %+v", r)
	}
	if r, err := DecodeResponse(testenv.GoldenHeldResult("held_http")); err != nil || !r.OutcomeUnknown || r.Step.Name != "" || r.Request != "POST /charges" {
		t.Fatalf("the v0.1 held record reads as %+v, %v", r, err)
	}
}
