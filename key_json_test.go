package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

func TestKeyFromJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, ptr, id string
	}{
		{`{"request_id":"r-1","amount":5}`, "/request_id", "r-1"},
		{`{"request_id":12}`, "/request_id", "12"},
		{`{"request_id":12.0}`, "/request_id", "12.0"}, // the literal, as sent
		{`{"meta":{"a/b":["x","k~9"]}}`, "/meta/a~1b/1", "k~9"},
		{`"whole"`, "", "whole"},
	} {
		k, err := idem.KeyFromJSON("tenant", []byte(tc.body), tc.ptr)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.body, tc.ptr, err)
		}
		if k.ID() != tc.id || k.Scope() != "tenant" || k != idem.MustKey("tenant", tc.id) {
			t.Fatalf("%s %s: key %q, want %q", tc.body, tc.ptr, k.ID(), tc.id)
		}
	}
	for _, tc := range []struct {
		body, ptr string
		want      error
	}{
		{`{"request_id":`, "/request_id", idem.ErrInvalidJSON},
		{`{"request_id":"a","request_id":"b"}`, "/request_id", idem.ErrInvalidJSON},
		{`{"request_id":"a"} {}`, "/request_id", idem.ErrInvalidJSON},
		{``, "/request_id", idem.ErrInvalidJSON},
		{`{"other":"a"}`, "/request_id", idem.ErrKeyNotFound},
		{`{"request_id":["a"]}`, "/request_id/1", idem.ErrKeyNotFound},
		{`{"request_id":null}`, "/request_id", idem.ErrInvalidKey},
		{`{"request_id":true}`, "/request_id", idem.ErrInvalidKey},
		{`{"request_id":{"id":"a"}}`, "/request_id", idem.ErrInvalidKey},
		{`{"request_id":""}`, "/request_id", idem.ErrInvalidKey},
		{`{"request_id":"has space"}`, "/request_id", idem.ErrInvalidKey},
		{`{"request_id":"` + strings.Repeat("k", idem.MaxKeyLen+1) + `"}`, "/request_id", idem.ErrInvalidKey},
	} {
		_, err := idem.KeyFromJSON("tenant", []byte(tc.body), tc.ptr)
		if !errors.Is(err, tc.want) {
			t.Errorf("%.40s %s: %v, want %v", tc.body, tc.ptr, err, tc.want)
		}
	}
	if _, err := idem.KeyFromJSON("tenant", []byte(`{}`), "request_id"); err == nil || errors.Is(err, idem.ErrKeyNotFound) {
		t.Errorf("a pointer without a leading /: %v", err)
	}
	// No error repeats the value it refused.
	_, err := idem.KeyFromJSON("tenant", []byte(`{"k":"sec ret"}`), "/k")
	if err == nil || strings.Contains(err.Error(), "sec") {
		t.Errorf("error %v repeats the value", err)
	}
}

// TestKeyFromJSONDo: Do with a key from the payload and a fingerprint of
// its fields runs once for concurrent duplicates that differ outside the
// fingerprinted fields, and refuses the same key with another amount.
func TestKeyFromJSONDo(t *testing.T) {
	t.Parallel()
	store := memstore.New(&memstore.Config{SweepInterval: -1})
	defer store.Close()
	var runs atomic.Int64
	call := func(body string) (string, error) {
		key, err := idem.KeyFromJSON("tenant-1", []byte(body), "/request_id")
		if err != nil {
			return "", err
		}
		fp, err := idem.FingerprintJSONPointers([]byte(body), "transfer", "/amount", "/to")
		if err != nil {
			return "", err
		}
		return idem.Do(context.Background(), store, key, &idem.Options{Fingerprint: fp, Wait: true}, func(context.Context) (string, error) {
			runs.Add(1)
			return "tx-1", nil
		})
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			// The trace field differs on every retry; it is not fingerprinted.
			body := `{"request_id":"rq-9","amount":100,"to":"acct_1","trace":"` + strings.Repeat("t", i) + `"}`
			if got, err := call(body); err != nil || got != "tx-1" {
				t.Errorf("got %q, %v", got, err)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d times, want 1", n)
	}
	if _, err := call(`{"request_id":"rq-9","amount":999,"to":"acct_1"}`); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another amount with the same request_id: %v, want ErrMismatch", err)
	}
}

func FuzzKeyFromJSON(f *testing.F) {
	f.Add([]byte(`{"request_id":"r-1"}`), "/request_id")
	f.Add([]byte(`{"a":[1,{"b":"x"}]}`), "/a/1/b")
	f.Add([]byte(`{"a~b":7}`), "/a~0b")
	f.Add([]byte(`[true,null]`), "/0")
	f.Fuzz(func(t *testing.T, body []byte, ptr string) {
		k, err := idem.KeyFromJSON("s", body, ptr)
		k2, err2 := idem.KeyFromJSON("s", body, ptr)
		if k != k2 || (err == nil) != (err2 == nil) {
			t.Fatal("not deterministic")
		}
		if err != nil {
			if k != (idem.Key{}) {
				t.Fatal("a key with an error")
			}
			if !errors.Is(err, idem.ErrInvalidJSON) && !errors.Is(err, idem.ErrKeyNotFound) && !errors.Is(err, idem.ErrInvalidKey) && ptr != "" && ptr[0] == '/' {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if idem.ValidateID(k.ID()) != nil {
			t.Fatalf("invalid id %q accepted", k.ID())
		}
		// The canonical form of the payload names the same key.
		canon, err := idem.CanonicalJSON(body)
		if err != nil {
			t.Fatalf("accepted a payload CanonicalJSON refuses: %v", err)
		}
		if c, err := idem.KeyFromJSON("s", canon, ptr); err != nil || c != k {
			t.Fatalf("canonical payload: %v, %v", c.ID(), err)
		}
	})
}

// TestJSONDepthBounded: a deeply nested body is refused with
// ErrInvalidJSON by every decoder of the package, instead of a recursion
// that takes the process past the stack limit.
func TestJSONDepthBounded(t *testing.T) {
	t.Parallel()
	nest := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	deep := nest(4 << 20)
	if _, err := idem.CanonicalJSON(deep); !errors.Is(err, idem.ErrInvalidJSON) {
		t.Errorf("CanonicalJSON: %v", err)
	}
	if _, err := idem.FingerprintJSONPointers(deep, "", "/0"); !errors.Is(err, idem.ErrInvalidJSON) {
		t.Errorf("FingerprintJSONPointers: %v", err)
	}
	if _, err := idem.KeyFromJSON("", deep, "/0"); !errors.Is(err, idem.ErrInvalidJSON) {
		t.Errorf("KeyFromJSON: %v", err)
	}
	if _, err := idem.CanonicalJSON(nest(10000)); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	if _, err := idem.CanonicalJSON(nest(10000 + 1)); !errors.Is(err, idem.ErrInvalidJSON) {
		t.Errorf("one past the limit: %v", err)
	}
}
