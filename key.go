package idem

import (
	"encoding/hex"
	"fmt"
)

// MaxKeyLen is the longest key accepted, in bytes. It matches the HTTP
// Idempotency-Key budget; longer keys are rejected, never truncated.
const MaxKeyLen = 255

// MaxScopeLen is the longest scope accepted, in bytes.
const MaxScopeLen = 1024

// Digest is the SHA-256 of a Key's scope and id (the input is described in
// keydigest.go and docs/stability.md). Stores keep only the digest: no
// client-chosen string becomes a Redis key or a primary key, and no tenant
// identifier is stored in the clear.
type Digest [32]byte

// String returns the digest in lower-case hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// ParseDigest parses the hex form produced by Digest.String.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != 2*len(d) {
		return d, fmt.Errorf("idem: digest must be %d hex digits, got %d", 2*len(d), len(s))
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, fmt.Errorf("idem: digest: %w", err)
	}
	return d, nil
}

// Key names one business action: a client- or business-chosen id within a
// scope the server derived from the caller (tenant, principal, API key hash).
// The same id in two scopes names two unrelated actions.
//
// Build keys with NewKey; the zero Key is invalid and every store rejects it.
type Key struct {
	scope  string
	id     string
	digest Digest
}

// NewKey validates id and scope and returns the Key. The id must be 1 to
// MaxKeyLen visible ASCII characters (0x21–0x7E); the scope may be any bytes up
// to MaxScopeLen, including none.
func NewKey(scope, id string) (Key, error) {
	if err := ValidateID(id); err != nil {
		return Key{}, err
	}
	if len(scope) > MaxScopeLen {
		return Key{}, &KeyError{Reason: fmt.Sprintf("scope is %d bytes, the limit is %d", len(scope), MaxScopeLen)}
	}
	return Key{scope: scope, id: id, digest: digestOf(scope, id)}, nil
}

// MustKey is NewKey for keys known to be valid, such as constants in tests
// and examples. It panics on an invalid key.
func MustKey(scope, id string) Key {
	k, err := NewKey(scope, id)
	if err != nil {
		panic(err)
	}
	return k
}

// ValidateID reports whether id is acceptable as a key: 1 to MaxKeyLen visible
// ASCII characters. The error is a *KeyError and matches ErrInvalidKey.
func ValidateID(id string) error {
	switch {
	case id == "":
		return &KeyError{Reason: "key is empty"}
	case len(id) > MaxKeyLen:
		return &KeyError{Reason: fmt.Sprintf("key is %d bytes, the limit is %d", len(id), MaxKeyLen)}
	}
	if visibleASCII(id) {
		return nil
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return &KeyError{Reason: fmt.Sprintf("key has a byte 0x%02x at offset %d; only visible ASCII (0x21-0x7e) is allowed", c, i)}
		}
	}
	return nil
}

// Scope returns the scope the key was made with.
func (k Key) Scope() string { return k.scope }

// ID returns the client- or business-chosen part of the key.
func (k Key) ID() string { return k.id }

// Digest returns the SHA-256 of scope and id, the only form stores keep.
func (k Key) Digest() Digest { return k.digest }

// IsZero reports whether k is the zero Key (never valid).
func (k Key) IsZero() bool { return k.id == "" }

// String returns a log-safe form: the digest's first 16 hex digits, never the
// raw id or scope.
func (k Key) String() string {
	if k.IsZero() {
		return "idem.Key{}"
	}
	return k.digest.String()[:16]
}

// visibleASCII reports whether every byte of s is visible ASCII
// (0x21–0x7E), eight bytes at a time.
func visibleASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if !visibleWord(word(s, i)) {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// Byte-parallel arithmetic on eight bytes of a string in a uint64.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// word returns s[i:i+8] as a little-endian uint64 (one load).
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// visibleWord reports whether each byte of w is in 0x21–0x7E. A byte b
// below 0x21 borrows into its high bit in w - 0x21·ones while its own high
// bit is clear; one above 0x7E has its high bit set, or gets it in
// w + ones. A borrow or carry crosses into the next byte only out of a byte
// that is already caught, so the test is exact.
func visibleWord(w uint64) bool {
	below := (w - 0x21*ones) &^ w & highs
	above := ((w + ones) | w) & highs
	return below|above == 0
}
