package httpidem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/heldmark"
)

// Held is a state the stores keep, but records that earlier releases held
// are recognised by the held prefix (heldmark), and a resolution must not
// be an outcome-unknown answer: the encoder must write the prefix for
// outcome-unknown responses, and only for them.
func TestHeldPrefix(t *testing.T) {
	t.Parallel()
	for _, r := range []storedResponse{
		{Status: 502, OutcomeUnknown: true},
		{Status: 504, Header: http.Header{"A": {"b"}}, Body: []byte("x"), OutcomeUnknown: true},
	} {
		if b := encodeResponse(&r); !heldmark.Legacy(b) {
			t.Fatalf("outcome-unknown record %q is not recognised as held", b)
		}
	}
	for _, r := range []storedResponse{
		{Status: 200, Body: []byte("ih\x01\x02")},
		{Status: 502, Header: http.Header{"X": {"\x02"}}},
		{Status: 201, NotReplayable: true},
	} {
		if b := encodeResponse(&r); heldmark.Legacy(b) {
			t.Fatalf("record %+v is taken for a held one", r)
		}
	}
}

func TestHeldRecordDescribesRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		OutcomeUnknown(w, errors.New("reset"))
	})
	first := e.do("POST", "/charges?card=secret", "u", "a")
	again := e.do("POST", "/charges?card=secret", "u", "a")
	for _, resp := range []http.Header{first.Header(), again.Header()} {
		for k := range resp {
			if strings.HasPrefix(k, "Idem-Held") {
				t.Fatalf("client got %s", k)
			}
		}
	}
	if again.Body.String() != first.Body.String() {
		t.Fatal("replay differs")
	}
	rec, err := e.record("", "u")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idem.StateHeld {
		t.Fatalf("record state %v, want held", rec.State)
	}
	sr, err := DecodeResponse(rec.Result)
	if err != nil {
		t.Fatal(err)
	}
	if sr.Request != "POST /charges" || sr.ScopeDigest != ScopeDigest(testScope) || !sr.OutcomeUnknown || sr.Header.Get(heldRequestHeader) != "" {
		t.Fatalf("decoded held record %+v", sr)
	}
}

func TestEncodeResponseResolves(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		OutcomeUnknown(w, errors.New("reset"))
	})
	e.do("POST", "/orders", "u", "a")
	rec, err := e.record("", "u")
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeResponse(201, http.Header{"content-type": {"application/json"}, "Connection": {"close"}}, []byte(`{"id":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := idem.Resolve(context.Background(), e.store, idem.Resolution{Digest: rec.Digest, Fence: rec.Fence, Result: b}); err != nil {
		t.Fatal(err)
	}
	got := e.do("POST", "/orders", "u", "a")
	if got.Code != 201 || got.Header().Get("Content-Type") != "application/json" || got.Header().Get("Connection") != "" ||
		got.Header().Get(ReplayedHeader) != "true" || !bytes.Equal(got.Body.Bytes(), []byte(`{"id":7}`)) {
		t.Fatalf("replay after resolve: %d %v %q", got.Code, got.Header(), got.Body)
	}
	e.wantCalls(1)
	for _, bad := range []struct {
		status int
		h      http.Header
		body   string
	}{{99, nil, ""}, {204, nil, "x"}, {200, http.Header{"Bad Name": {"v"}}, ""}, {200, http.Header{"A": {"v\r\nB: c"}}, ""}} {
		if _, err := EncodeResponse(bad.status, bad.h, []byte(bad.body)); err == nil {
			t.Errorf("EncodeResponse(%d, %v, %q) accepted", bad.status, bad.h, bad.body)
		}
	}
}
