package heldmark

import (
	"testing"

	"github.com/idemkit/idem"
)

func TestLegacy(t *testing.T) {
	for _, c := range []struct {
		result string
		want   bool
	}{
		{Exact, true},
		{HTTPPrefix, true},
		{HTTPPrefix + "\x00\xc8rest", true},
		{"", false},
		{Exact + " ", false},
		{Exact[:len(Exact)-1], false},
		{"ih\x01", false},
		{"ih\x01\x00", false}, // a plain stored response (no flags)
		{"ih\x01\x03", false}, // outcome unknown and something else
		{`{"ok":true}`, false},
	} {
		if got := Legacy([]byte(c.result)); got != c.want {
			t.Errorf("Legacy(%q) = %v, want %v", c.result, got, c.want)
		}
	}
}

// Exact is what Do stores for a held key, today as before.
func TestExactIsDos(t *testing.T) {
	if got := string(idem.OutcomeUnknownResult()); got != Exact {
		t.Fatalf("Do's outcome-unknown result = %q, want %q", got, Exact)
	}
}
