package connectidem_test

import (
	"context"
	"encoding/json"
	"testing"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/internal/testenv"
)

// TestGoldenScopes pins the default scope digests (HeaderScope): they are
// part of every record's key digest, so a change would make every caller's
// keys new after an upgrade (docs/stability.md). The stored answers are
// pinned where they are encoded, in internal/rpcidem.
func TestGoldenScopes(t *testing.T) {
	t.Parallel()
	type row struct {
		Headers map[string][]string `json:"headers"`
		Names   []string            `json:"names"`
		Scope   string              `json:"scope"`
	}
	rows := []row{
		{Headers: map[string][]string{"Authorization": {"Bearer sk_alice"}}, Names: []string{"Authorization"}},
		{Headers: map[string][]string{"Authorization": {" BEARER  sk_alice"}}, Names: []string{"Authorization"}},
		{Headers: map[string][]string{"X-Tenant": {"t1"}, "X-User": {"u1", "u2"}}, Names: []string{"X-Tenant", "X-User"}},
		{Headers: map[string][]string{}, Names: []string{"Authorization"}},
	}
	for i, r := range rows {
		req := connect.NewRequest(&testpb.SimpleRequest{})
		for k, vs := range r.Headers {
			req.Header()[k] = vs
		}
		s, err := connectidem.HeaderScope(r.Names...)(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		rows[i].Scope = s
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/scopes-v2.json", append(data, '\n'))
}
