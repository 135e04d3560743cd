package idem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, scope, id string
		ok              bool
	}{
		{"uuid", "t1", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"one char", "", "a", true},
		{"all visible ASCII", "", "!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~", true},
		{"255 bytes", "", strings.Repeat("k", 255), true},
		{"empty", "", "", false},
		{"256 bytes", "", strings.Repeat("k", 256), false},
		{"space", "", "a b", false},
		{"tab", "", "a\tb", false},
		{"newline", "", "a\nb", false},
		{"DEL", "", "a\x7f", false},
		{"NUL", "", "a\x00", false},
		{"non-ASCII", "", "clé", false},
		{"scope too long", strings.Repeat("s", idem.MaxScopeLen+1), "k", false},
		{"binary scope is fine", "\x00\xff tenant", "k", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := idem.NewKey(tt.scope, tt.id)
			if tt.ok {
				if err != nil {
					t.Fatalf("NewKey: %v", err)
				}
				if k.ID() != tt.id || k.Scope() != tt.scope || k.IsZero() {
					t.Fatalf("key = %#v", k)
				}
				return
			}
			if !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("NewKey = %v, want ErrInvalidKey", err)
			}
			var ke *idem.KeyError
			if !errors.As(err, &ke) || ke.Reason == "" {
				t.Fatalf("error %v is not a *KeyError with a reason", err)
			}
		})
	}
}

func TestKeyDigestSeparatesScopeAndID(t *testing.T) {
	t.Parallel()
	a := idem.MustKey("ab", "c")
	b := idem.MustKey("a", "bc")
	c := idem.MustKey("", "abc")
	if a.Digest() == b.Digest() || a.Digest() == c.Digest() || b.Digest() == c.Digest() {
		t.Fatal("digests collide across scope/id boundaries")
	}
	if idem.MustKey("ab", "c").Digest() != a.Digest() {
		t.Fatal("digest is not deterministic")
	}
	if strings.Contains(a.String(), "ab") || len(a.String()) != 16 {
		t.Fatalf("String() = %q: must be a short digest, never the raw key", a.String())
	}
	d, err := idem.ParseDigest(a.Digest().String())
	if err != nil || d != a.Digest() {
		t.Fatalf("ParseDigest round trip: %v", err)
	}
	if _, err := idem.ParseDigest("xyz"); err == nil {
		t.Fatal("ParseDigest accepted garbage")
	}
}

func FuzzNewKey(f *testing.F) {
	for _, s := range []string{"", "a", "key-1", "a b", "\x7f", strings.Repeat("x", 300)} {
		f.Add("scope", s)
	}
	f.Fuzz(func(t *testing.T, scope, id string) {
		k, err := idem.NewKey(scope, id)
		valid := len(id) >= 1 && len(id) <= idem.MaxKeyLen && len(scope) <= idem.MaxScopeLen
		for i := 0; i < len(id); i++ {
			if id[i] < 0x21 || id[i] > 0x7e {
				valid = false
			}
		}
		if valid != (err == nil) {
			t.Fatalf("NewKey(%q, %q) error = %v, want valid=%v", scope, id, err, valid)
		}
		if err == nil && (k.ID() != id || k.Scope() != scope) {
			t.Fatalf("key does not keep its parts")
		}
	})
}

// TestValidateIDEveryByte: every byte value at every offset of a 17-byte
// id (two eight-byte words and a tail) is accepted exactly when it is
// visible ASCII.
func TestValidateIDEveryByte(t *testing.T) {
	t.Parallel()
	for p := range 17 {
		for b := range 256 {
			id := []byte(strings.Repeat("k", 17))
			id[p] = byte(b)
			err := idem.ValidateID(string(id))
			if want := b >= 0x21 && b <= 0x7e; (err == nil) != want {
				t.Fatalf("ValidateID with byte 0x%02x at offset %d: %v; want valid=%v", b, p, err, want)
			}
		}
	}
}
