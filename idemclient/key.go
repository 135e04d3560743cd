package idemclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrInvalidKey is wrapped by the error a request gets when the key given
// through WithKey (or made by Config.NewKeyFunc) cannot be sent: empty,
// longer than 255 bytes, not visible ASCII, or, in the Bare spelling,
// holding a '"', ',', ';' or '\'. Nothing was sent.
var ErrInvalidKey = errors.New("idemclient: invalid idempotency key")

// Spelling is how the key is written in the header.
type Spelling uint8

const (
	// SFString writes the key as an RFC 8941 sf-string, "k", as the IETF
	// draft on the Idempotency-Key header does. The default.
	SFString Spelling = iota
	// Bare writes the key as it is, k, as Stripe's API expects. idem's
	// servers accept both spellings as one key.
	Bare
)

type keyCtx struct{}

// WithKey returns a context whose requests carry key as their
// idempotency key instead of a random one: a business key (an order
// number) that must survive a restart of the process, or a key the caller
// keeps to retry by itself later. A request made with this context is
// keyed whatever its method, and so retried by the rules of keyed
// requests.
//
// The key is written in Config.Spelling; it must be 1 to 255 visible
// ASCII characters.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFromContext returns the key WithKey put in ctx, and whether there is
// one. The request of a response returned by a Transport carries the key
// of its logical request this way: KeyFromContext(resp.Request.Context()),
// or Key(resp).
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// Key returns the idempotency key a response's request was sent with, or
// "" when it was sent without one (an unkeyed GET). It reads the context
// of resp.Request, which a Transport sets.
func Key(resp *http.Response) string {
	if resp == nil || resp.Request == nil {
		return ""
	}
	k, _ := KeyFromContext(resp.Request.Context())
	return k
}

// ReplayedHeader is the response header by which idem's servers (and
// Stripe's) mark a stored answer sent again: "Idempotent-Replayed: true".
const ReplayedHeader = "Idempotent-Replayed"

// Replayed reports whether resp is a replay: the service did not run the
// request again but answered with the stored response of the first one
// (Idempotent-Replayed: true).
func Replayed(resp *http.Response) bool {
	return resp != nil && strings.EqualFold(strings.TrimSpace(resp.Header.Get(ReplayedHeader)), "true")
}

// NewKey returns a new random key: 128 bits from crypto/rand, in 32 hex
// digits. It is what Config.NewKeyFunc does by default.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// newQuotedKey returns a new random key as an sf-string, "…", in one
// allocation.
func newQuotedKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var v [34]byte
	v[0], v[33] = '"', '"'
	hex.Encode(v[1:33], b[:])
	return string(v[:])
}

// checkKey tells whether key can be sent in spelling s.
func checkKey(key string, s Spelling) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > 255 {
		return fmt.Errorf("%w: %d bytes, at most 255", ErrInvalidKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at offset %d; only visible ASCII (0x21-0x7e) is allowed", ErrInvalidKey, c, i)
		}
		if s == Bare && (c == '"' || c == ',' || c == ';' || c == '\\') {
			return fmt.Errorf("%w: %q at offset %d cannot be sent bare; use the SFString spelling", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// spell returns the header value of key.
func spell(key string, s Spelling) string {
	if s == Bare {
		return key
	}
	if !strings.ContainsAny(key, `"\`) {
		return `"` + key + `"`
	}
	var b strings.Builder
	b.Grow(len(key) + 4)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// unspell returns the key a header value names (either spelling); it is
// only used to report a key the caller set in the header by itself.
func unspell(v string) string {
	v = strings.Trim(v, " \t")
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
