package grpcidem_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/testenv"
)

// TestGoldenScopes pins the default scope digests (MetadataScope): they are
// part of every record's key digest, so a change would make every caller's
// keys new after an upgrade (docs/stability.md). The stored answers are
// pinned where they are encoded, in internal/rpcidem.
func TestGoldenScopes(t *testing.T) {
	t.Parallel()
	type row struct {
		MD    map[string][]string `json:"metadata"`
		Names []string            `json:"names"`
		Scope string              `json:"scope"`
	}
	rows := []row{
		{MD: map[string][]string{"authorization": {"Bearer sk_alice"}}, Names: []string{"authorization"}},
		{MD: map[string][]string{"authorization": {" BEARER  sk_alice"}}, Names: []string{"authorization"}},
		{MD: map[string][]string{"x-tenant": {"t1"}, "x-user": {"u1", "u2"}}, Names: []string{"x-tenant", "x-user"}},
		{MD: map[string][]string{}, Names: []string{"authorization"}},
	}
	for i, r := range rows {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD(r.MD))
		s, err := grpcidem.MetadataScope(r.Names...)(ctx)
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
