package httpidem

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// goldenResponses are the stored responses pinned by
// testdata/golden/responses-v1.json: every flag, headers with several
// values, a nil-valued and a lower-case name (replays never canonicalise
// what the handler wrote), an empty and a binary body.
func goldenResponses() map[string]*storedResponse {
	return map[string]*storedResponse{
		"created":    sampleResponse(),
		"no content": {Status: 204, Header: http.Header{}},
		"binary body": {Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}},
			Body: []byte{0, 1, 2, 0xfe, 0xff, '\r', '\n'}},
		"not replayable": {Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, NotReplayable: true},
		"outcome unknown": {Status: 502, Header: http.Header{"Content-Type": {"application/problem+json"}},
			Body: []byte(`{"type":"about:blank","status":502}`), OutcomeUnknown: true},
	}
}

// TestGoldenResponses pins the stored-response encoding both ways: today's
// encoder writes the committed bytes, and today's decoder reads them back
// as the same response. See docs/stability.md.
func TestGoldenResponses(t *testing.T) {
	t.Parallel()
	cases := goldenResponses()
	got := map[string]string{}
	for name, r := range cases {
		got[name] = hex.EncodeToString(encodeResponse(r))
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := testenv.Golden(t, "testdata/golden/responses-v1.json", append(data, '\n'))
	var want map[string]string
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	for name, h := range want {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := decodeResponse(b)
		if err != nil {
			t.Errorf("%s: the committed record no longer decodes: %v", name, err)
			continue
		}
		r, ok := cases[name]
		if !ok {
			t.Errorf("%s: a committed record has no case in goldenResponses", name)
			continue
		}
		if dec.Status != r.Status || string(dec.Body) != string(r.Body) || dec.NotReplayable != r.NotReplayable ||
			dec.OutcomeUnknown != r.OutcomeUnknown || len(dec.Header) != len(r.Header) {
			t.Errorf("%s: decoded to %+v, want %+v", name, dec, r)
		}
		for k, vs := range r.Header {
			if g, ok := dec.Header[k]; !ok || !reflect.DeepEqual(append([]string{}, g...), append([]string{}, vs...)) {
				t.Errorf("%s: header %q: %q, want %q", name, k, g, vs)
			}
		}
	}
}

// TestGoldenScopes pins the default scope digests (HeaderScope): they are
// part of every record's key digest, so a change would make every caller's
// keys new after an upgrade.
func TestGoldenScopes(t *testing.T) {
	t.Parallel()
	type row struct {
		Headers map[string][]string `json:"headers"`
		Names   []string            `json:"names"`
		Scope   string              `json:"scope"`
	}
	rows := []row{
		{Headers: map[string][]string{"Authorization": {"Bearer sk_alice"}}, Names: []string{"Authorization"}},
		{Headers: map[string][]string{"Authorization": {"  bearer \t sk_alice "}}, Names: []string{"Authorization"}}, // the same caller
		{Headers: map[string][]string{"Authorization": {"Bearer SK_ALICE"}}, Names: []string{"Authorization"}},       // another
		{Headers: map[string][]string{"X-Tenant": {"t1"}, "X-User": {"u1", "u2"}}, Names: []string{"X-Tenant", "X-User"}},
		{Headers: map[string][]string{"X-User": {"u1"}}, Names: []string{"X-Tenant", "X-User"}},
		{Headers: map[string][]string{}, Names: []string{"Authorization"}}, // anonymous: the empty scope
	}
	for i, r := range rows {
		req, _ := http.NewRequest("POST", "/", nil)
		for k, vs := range r.Headers {
			req.Header[k] = vs
		}
		s, err := HeaderScope(r.Names...)(req)
		if err != nil {
			t.Fatal(err)
		}
		rows[i].Scope = s
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/scopes-v1.json", append(data, '\n'))
}
