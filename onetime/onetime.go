package onetime

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// DefaultTTL is how long an issued token stays valid when Config.TTL is zero.
const DefaultTTL = time.Hour

// TokenLen is the length of every issued token: 32 random bytes in
// unpadded base64url.
const TokenLen = 43

// Config tunes Tokens. A nil *Config means the defaults.
type Config struct {
	// TTL is how long an issued token can be consumed. Default DefaultTTL.
	TTL time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.TTL == 0 {
		out.TTL = DefaultTTL
	}
	return out
}

func (c Config) validate() error {
	if c.TTL < time.Millisecond {
		return configError("Config.TTL", "must be at least 1ms")
	}
	return nil
}

// Tokens issues and consumes one-time tokens in a Store. It is safe for
// concurrent use.
type Tokens struct {
	store Store
	cfg   Config
}

// New returns Tokens backed by store. It does no I/O.
func New(store Store, cfg *Config) (*Tokens, error) {
	if store == nil {
		return nil, configError("store", "nil Store")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Tokens{store: store, cfg: c}, nil
}

// TTL returns the configured time to live of issued tokens.
func (t *Tokens) TTL() time.Duration { return t.cfg.TTL }

// Issue returns a new random token bound to scope (a user, a session, a
// form: something the server knows about the caller, never only what the
// client sends). The store keeps only its SHA-256. Put it in the form or
// page; the submit presents it back.
func (t *Tokens) Issue(ctx context.Context, scope string) (string, error) {
	if err := validScope(scope); err != nil {
		return "", err
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails (Go ≥ 1.24)
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := t.store.Insert(ctx, TokenDigest(tok), ScopeDigest(scope), t.cfg.TTL); err != nil {
		return "", fmt.Errorf("onetime: issue: %w", err)
	}
	return tok, nil
}

// Consume spends token for scope, atomically: of any number of concurrent
// calls with the same token, exactly one returns nil. The others, and every
// later call, get ErrUsed; a token of another scope gets ErrWrongScope (and
// stays usable by its owner), an expired one ErrExpired, anything never
// issued (or purged) ErrUnknown. Store failures match idem.ErrUnavailable.
//
// Consume cannot be undone; use Take when the work that follows may fail
// and the user should be able to submit again.
func (t *Tokens) Consume(ctx context.Context, scope, token string) error {
	_, err := t.Take(ctx, scope, token, NewUse())
	return err
}

// Receipt proves that a Take spent a token; Restore gives it back.
type Receipt struct {
	token Digest
	use   Use
}

// NewReceipt rebuilds the receipt of a Take of token by use, for example in
// a process that kept its Use across a restart. Restore still checks, in
// the store, that use holds the token.
func NewReceipt(token string, use Use) Receipt {
	return Receipt{token: TokenDigest(token), use: use}
}

// Use returns the Use that spent the token.
func (r Receipt) Use() Use { return r.use }

// Take spends token for scope on behalf of use, like Consume, and returns a
// Receipt that can restore it if the work fails. Until the token expires, a
// Take by the same Use ID with a fence at least the spender's succeeds again
// (see Use): that is how a later owner of the same idempotency record
// continues a submission whose first owner died or failed.
func (t *Tokens) Take(ctx context.Context, scope, token string, use Use) (Receipt, error) {
	if err := validScope(scope); err != nil {
		return Receipt{}, err
	}
	if !wellFormed(token) {
		return Receipt{}, ErrUnknown
	}
	d := TokenDigest(token)
	if err := t.store.Consume(ctx, d, ScopeDigest(scope), use); err != nil {
		if IsRejected(err) {
			return Receipt{}, err
		}
		return Receipt{}, fmt.Errorf("onetime: consume: %w", err)
	}
	return Receipt{token: d, use: use}, nil
}

// Restore makes the token of r unused again, with its original expiry, so
// that the user can submit again after the work failed. It returns
// ErrNotHeld when r no longer holds the token (restored already, or taken
// over by a later owner of the same idempotency record).
func (t *Tokens) Restore(ctx context.Context, r Receipt) error {
	if r.token == (Digest{}) {
		return ErrNotHeld
	}
	if err := t.store.Restore(ctx, r.token, r.use); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return err
		}
		return fmt.Errorf("onetime: restore: %w", err)
	}
	return nil
}

// Purge deletes tokens that expired at least grace ago (see Store.Purge).
// Run it periodically on SQL stores; Redis expires tokens by itself.
func (t *Tokens) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	return t.store.Purge(ctx, grace, batch)
}

// ScopeError reports an unusable scope.
type ScopeError struct{ Reason string }

func (e *ScopeError) Error() string { return "onetime: invalid scope: " + e.Reason }

func validScope(scope string) error {
	switch {
	case scope == "":
		return &ScopeError{Reason: "empty; bind tokens to a user, session or form"}
	case len(scope) > idem.MaxScopeLen:
		return &ScopeError{Reason: fmt.Sprintf("%d bytes, the limit is %d", len(scope), idem.MaxScopeLen)}
	}
	return nil
}

// wellFormed reports whether token could have been issued by Issue: exactly
// TokenLen characters of the base64url alphabet. Anything else is unknown
// without asking the store.
func wellFormed(token string) bool {
	if len(token) != TokenLen {
		return false
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// configError is the *idem.ConfigError of package onetime.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "onetime", Field: field, Reason: reason}
}
