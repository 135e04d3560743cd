package idem_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

func TestFingerprintJSONPointers(t *testing.T) {
	t.Parallel()
	fp := func(body string, ptrs ...string) idem.Fingerprint {
		t.Helper()
		f, err := idem.FingerprintJSONPointers([]byte(body), "POST /charges", ptrs...)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return f
	}
	base := fp(`{"amount":100,"currency":"EUR","sent_at":"09:00"}`, "/amount", "/currency")
	for _, same := range []string{
		`{"sent_at":"09:05","currency":"EUR","amount":100}`, // another timestamp, other order
		` { "amount" : 100 , "currency" : "EUR" } `,
	} {
		if fp(same, "/amount", "/currency") != base {
			t.Errorf("%s: must be the same request", same)
		}
	}
	for _, other := range []string{
		`{"amount":101,"currency":"EUR"}`,
		`{"amount":100}`,                    // absent
		`{"amount":100,"currency":null}`,    // null differs from absent
		`{"amount":100.0,"currency":"EUR"}`, // literal kept: 100.0 is not 100
	} {
		if fp(other, "/amount", "/currency") == base {
			t.Errorf("%s: must be another request", other)
		}
	}
	if fp(`{"a":1,"b":2}`, "/a", "/b") == fp(`{"a":1,"b":2}`, "/b", "/a") {
		t.Error("the pointers' order is part of the fingerprint")
	}
	nested := `{"items":[{"sku":"A/1","qty":2}],"m~n":3}`
	if fp(nested, "/items/0/sku", "/m~0n") == fp(nested, "/items/0/qty", "/m~0n") {
		t.Error("escaped and nested pointers")
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":`, `1 2`} {
		if _, err := idem.FingerprintJSONPointers([]byte(bad), "", "/a"); !errors.Is(err, idem.ErrInvalidJSON) {
			t.Errorf("%s: %v, want ErrInvalidJSON", bad, err)
		}
	}
	if _, err := idem.FingerprintJSONPointers([]byte(`{}`), "", "a"); err == nil {
		t.Error("a pointer without / accepted")
	}
	if _, err := idem.FingerprintJSONPointers([]byte(`{}`), ""); err == nil {
		t.Error("no pointers accepted")
	}
}

func FuzzFingerprintJSONPointers(f *testing.F) {
	f.Add([]byte(`{"amount":100,"items":[1,2]}`), "/items/1")
	f.Fuzz(func(t *testing.T, body []byte, ptr string) {
		a, errA := idem.FingerprintJSONPointers(body, "p", "/"+ptr)
		b, errB := idem.FingerprintJSONPointers(body, "p", "/"+ptr)
		if (errA == nil) != (errB == nil) || a != b {
			t.Fatal("not deterministic")
		}
		if errA != nil {
			return
		}
		canon, err := idem.CanonicalJSON(body)
		if err != nil {
			t.Fatalf("accepted a body CanonicalJSON refuses: %v", err)
		}
		if c, err := idem.FingerprintJSONPointers(canon, "p", "/"+ptr); err != nil || c != a {
			t.Fatal("the canonical form of a body must select the same values")
		}
	})
}
