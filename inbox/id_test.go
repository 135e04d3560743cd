package inbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
)

// MessageKey turns every message ID Process accepts into a valid idem key
// of the consumer's own scope: as it is when idem accepts it, hashed
// otherwise; distinct IDs and consumers give distinct keys.
func TestMessageKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("m", 256)
	const hashed = "sha256:" // and 64 hex digits
	for _, c := range []struct {
		consumer, id string
		wantID       string // "" : hashed
	}{
		{"billing", "order-42", "order-42"},
		{"billing", strings.Repeat("m", 255), strings.Repeat("m", 255)},
		{"billing", long, ""},
		{"billing", "order 42", ""},     // a space is not visible ASCII
		{"billing", "bestellung-ä", ""}, // nor is UTF-8
		{"billing", "a\x00b", ""},
	} {
		k, err := inbox.MessageKey(c.consumer, c.id)
		if err != nil {
			t.Fatalf("MessageKey(%q, %q): %v", c.consumer, c.id, err)
		}
		if c.wantID != "" && k.ID() != c.wantID || c.wantID == "" && (!strings.HasPrefix(k.ID(), hashed) || len(k.ID()) != len(hashed)+64) {
			t.Errorf("MessageKey(%q, %q).ID() = %q", c.consumer, c.id, k.ID())
		}
		if k.Scope() != "inbox\x00"+c.consumer {
			t.Errorf("MessageKey(%q, %q).Scope() = %q", c.consumer, c.id, k.Scope())
		}
	}
	seen := map[idem.Digest]string{}
	for _, p := range [][2]string{{"billing", "m-1"}, {"billing", "m-2"}, {"shipping", "m-1"}, {"billing", long}, {"billing", long + "x"}} {
		k, err := inbox.MessageKey(p[0], p[1])
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[k.Digest()]; dup {
			t.Errorf("%q and %q have one key", p, other)
		}
		seen[k.Digest()] = p[0] + "/" + p[1]
	}
	if http := idem.MustKey("billing", "m-1"); http.Digest() == mustMessageKey(t, "billing", "m-1").Digest() {
		t.Error("a message key equals the key an HTTP caller of scope billing sends")
	}
	for _, bad := range [][2]string{{"", "m-1"}, {"billing", ""}, {strings.Repeat("c", 256), "m-1"}} {
		if _, err := inbox.MessageKey(bad[0], bad[1]); !errors.Is(err, inbox.ErrInvalidID) {
			t.Errorf("MessageKey(%q, %q) = %v, want ErrInvalidID", bad[0], bad[1], err)
		}
	}
}

func mustMessageKey(t *testing.T, consumer, id string) idem.Key {
	t.Helper()
	k, err := inbox.MessageKey(consumer, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
