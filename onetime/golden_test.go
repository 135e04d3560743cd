package onetime_test

import (
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
)

// TestGoldenDigests pins the token and scope digests, the only form the
// token stores keep: a change would make every issued token unknown after
// an upgrade (docs/stability.md).
func TestGoldenDigests(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, s := range []string{"", "tok_3f9a", "user-42"} {
		got["token "+s] = onetime.TokenDigest(s).String()
		got["scope "+s] = onetime.ScopeDigest(s).String()
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/digests-v1.json", append(data, '\n'))
}
