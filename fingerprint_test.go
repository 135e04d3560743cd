package idem_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	equal := [][2]string{
		{`{"a":1,"b":[1,2]}`, `{ "b":[1,2], "a":1 }`},
		{`{"x":{"z":true,"y":null}}`, "{\n\t\"x\": {\"y\": null, \"z\": true}\n}"},
		{`"<&>"`, `"\u003c\u0026\u003e"`},
		{`[]`, ` [ ] `},
	}
	for _, p := range equal {
		a, err := idem.CanonicalJSON([]byte(p[0]))
		if err != nil {
			t.Fatalf("CanonicalJSON(%s): %v", p[0], err)
		}
		b, err := idem.CanonicalJSON([]byte(p[1]))
		if err != nil {
			t.Fatalf("CanonicalJSON(%s): %v", p[1], err)
		}
		if string(a) != string(b) {
			t.Errorf("%s → %s but %s → %s", p[0], a, p[1], b)
		}
	}
	different := [][2]string{
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":"1"}`, `{"a":1}`},
	}
	for _, p := range different {
		a, _ := idem.CanonicalJSON([]byte(p[0]))
		b, _ := idem.CanonicalJSON([]byte(p[1]))
		if string(a) == string(b) {
			t.Errorf("%s and %s canonicalise to the same %s", p[0], p[1], a)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1}{"b":2}`, `{"a":1,"a":2}`, `nul`, `[1,]`} {
		if _, err := idem.CanonicalJSON([]byte(bad)); !errors.Is(err, idem.ErrInvalidJSON) {
			t.Errorf("CanonicalJSON(%q) = %v, want ErrInvalidJSON", bad, err)
		}
	}
}

func TestRequestFingerprint(t *testing.T) {
	t.Parallel()
	base := idem.RequestFingerprint("POST", "/charges", "a=1", []byte(`{"amount":100}`))
	for name, other := range map[string]idem.Fingerprint{
		"method": idem.RequestFingerprint("PATCH", "/charges", "a=1", []byte(`{"amount":100}`)),
		"path":   idem.RequestFingerprint("POST", "/charge", "a=1", []byte(`{"amount":100}`)),
		"query":  idem.RequestFingerprint("POST", "/charges", "a=2", []byte(`{"amount":100}`)),
		"body":   idem.RequestFingerprint("POST", "/charges", "a=1", []byte(`{"amount":101}`)),
		"shift":  idem.RequestFingerprint("POST", "/chargesa=1", "", []byte(`{"amount":100}`)),
	} {
		if other == base {
			t.Errorf("changing the %s does not change the fingerprint", name)
		}
	}
	if idem.RequestFingerprint("POST", "/charges", "a=1", []byte(`{"amount":100}`)) != base {
		t.Error("fingerprint not deterministic")
	}
	j1, err := idem.RequestFingerprintJSON("POST", "/c", "", []byte(`{"a":1,"b":[1,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	j2, err := idem.RequestFingerprintJSON("POST", "/c", "", []byte(`{ "b":[1,2], "a":1 }`))
	if err != nil {
		t.Fatal(err)
	}
	if j1 != j2 {
		t.Error("JSON-canonical fingerprints differ for equal JSON")
	}
	if _, err := idem.RequestFingerprintJSON("POST", "/c", "", []byte(`{`)); err == nil {
		t.Error("invalid JSON body fingerprinted without error")
	}
	if e, err := idem.RequestFingerprintJSON("POST", "/c", "", nil); err != nil || e != idem.RequestFingerprint("POST", "/c", "", nil) {
		t.Errorf("empty JSON body: %v", err)
	}
	if idem.FingerprintOf([]byte("ab"), []byte("c")) == idem.FingerprintOf([]byte("a"), []byte("bc")) {
		t.Error("FingerprintOf parts are not length-prefixed")
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2]}`, `[1,"x",null,true,{"k":{}}]`, `"\u00e9"`, `1e3`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := idem.CanonicalJSON(data)
		if err != nil {
			return
		}
		// Canonical form is a fixed point.
		c2, err := idem.CanonicalJSON(c)
		if err != nil {
			t.Fatalf("canonical form %q does not parse: %v", c, err)
		}
		if string(c) != string(c2) {
			t.Fatalf("not idempotent: %q → %q", c, c2)
		}
	})
}

// Pinned values: records written today must match requests made by later
// releases, so the hashing scheme must never change silently.
func TestHashesArePinned(t *testing.T) {
	t.Parallel()
	if got := idem.MustKey("tenant-1", "order-1").Digest().String(); got != pinnedKeyDigest {
		t.Errorf("key digest = %s, pinned %s", got, pinnedKeyDigest)
	}
	if got := idem.RequestFingerprint("POST", "/charges", "a=1", []byte(`{"amount":100}`)).String(); got != pinnedRequestFP {
		t.Errorf("request fingerprint = %s, pinned %s", got, pinnedRequestFP)
	}
	big := bytes.Repeat([]byte("x"), 100_000) // the streaming path
	path := strings.Repeat("/p", 400)
	if got, want := idem.RequestFingerprint("POST", path, "", big), streamedFP(path, big); got != want {
		t.Errorf("streamed fingerprint = %s, want %s", got, want)
	}
}

// streamedFP recomputes RequestFingerprint's definition directly.
func streamedFP(path string, body []byte) idem.Fingerprint {
	h := sha256.New()
	h.Write([]byte("idem/req/v1\x00"))
	for _, p := range [][]byte{[]byte("POST"), []byte(path), nil, body} {
		h.Write(binary.AppendUvarint(nil, uint64(len(p))))
		h.Write(p)
	}
	var f idem.Fingerprint
	h.Sum(f[:0])
	return f
}

func BenchmarkRequestFingerprint(b *testing.B) {
	body := []byte(`{"amount":100,"currency":"eur","customer":"cus_123"}`)
	b.ReportAllocs()
	for b.Loop() {
		idem.RequestFingerprint("POST", "/v1/charges", "expand=customer", body)
	}
}

func BenchmarkNewKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = idem.NewKey("tenant-123456789", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	}
}

const (
	pinnedKeyDigest = "07e64a2e1a41e6dae93a4391827383b1fab0e9cb6268c0c190b4d30c05bf63f3"
	pinnedRequestFP = "f9001ac0a432f9f5ee5306127a8f712756a32fd48fb0d46717b1b733dfefc67b"
)
