package idem_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
)

// TestGoldenDigests pins the digests that stores keep: the key digest (the
// record's identity in every store) and the request fingerprints (what a
// retry must match). A release that hashed differently would miss every
// record written before it, and retries that span the upgrade would run
// again. See docs/stability.md.
func TestGoldenDigests(t *testing.T) {
	t.Parallel()
	type row struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
	}
	var rows []row
	add := func(name string, s interface{ String() string }) { rows = append(rows, row{name, s.String()}) }

	for _, k := range []struct{ scope, id string }{
		{"", "order-1"},
		{"tenant-42", "order-1001-payment"},
		{"h1:0a1b", "x"},
		{"ab", "c"}, {"a", "bc"}, // length-prefixed: never equal
		{strings.Repeat("s", idem.MaxScopeLen), strings.Repeat("k", idem.MaxKeyLen)},
	} {
		add("key scope="+abbrev(k.scope)+" id="+abbrev(k.id), idem.MustKey(k.scope, k.id).Digest())
	}
	add("FingerprintOf()", idem.FingerprintOf())
	add("FingerprintOf(a, b)", idem.FingerprintOf([]byte("a"), []byte("b")))
	add("FingerprintOf(ab)", idem.FingerprintOf([]byte("ab")))
	add("FingerprintOf(2000 bytes)", idem.FingerprintOf(bytes.Repeat([]byte("z"), 2000))) // the streaming path
	add("RequestFingerprint(POST /charges ?a=1 body)", idem.RequestFingerprint("POST", "/charges", "a=1", []byte(`{"amount":4200}`)))
	add("RequestFingerprint(POST / no body)", idem.RequestFingerprint("POST", "/", "", nil))
	add("RequestFingerprint(PATCH 4000-byte body)", idem.RequestFingerprint("PATCH", "/o/1", "", bytes.Repeat([]byte("b"), 4000)))
	for _, body := range []string{`{"b":1, "a":[1,2,{"y":null,"x":"é"}]}`, `{"a":[1,2,{"x":"\u00e9","y":null}],"b":1}`, ``} {
		fp, err := idem.RequestFingerprintJSON("POST", "/charges", "", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		add("RequestFingerprintJSON(POST /charges "+body+")", fp)
	}
	got, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/digests-v2.json", append(got, '\n'))
}

func abbrev(s string) string {
	if len(s) > 24 {
		return s[:4] + "…×" + itoa(len(s))
	}
	return `"` + s + `"`
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
