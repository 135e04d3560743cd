package onetime

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Store keeps issued tokens. Every method is one atomic step in the storage
// engine (one conditional statement, one Lua script): never a read followed
// by a write decided in Go. Stores keep only digests, never a raw token or
// scope. Times come from the store's clock.
//
// tokentest.Run checks these semantics against a real server; redistoken
// and sqltoken implement them.
type Store interface {
	// Insert records a new token bound to scope, valid for ttl from now by
	// the store's clock.
	Insert(ctx context.Context, token, scope Digest, ttl time.Duration) error

	// Consume spends the token for use, atomically. It succeeds (nil) when
	// the token exists, belongs to scope, has not expired, and either is
	// unused or is already spent by a Use with the same ID and a fence not
	// greater than use.Fence (the same idempotency record, re-taken by its
	// current owner: see Use). Otherwise it changes nothing and returns,
	// checked in this order, ErrUnknown, ErrWrongScope, ErrUsed (spent by
	// another Use, or by this ID at a higher fence) or ErrExpired. Of any number of concurrent calls with different Use IDs,
	// at most one succeeds. A loss may be classified by a read after the
	// atomic step; the decision itself is never a read.
	Consume(ctx context.Context, token, scope Digest, use Use) error

	// Restore makes a spent token unused again if use (ID and fence) still
	// holds it; otherwise it returns ErrNotHeld and changes nothing. The
	// token keeps its original expiry.
	Restore(ctx context.Context, token Digest, use Use) error

	// Purge deletes tokens whose expiry passed at least grace ago, used or
	// not, at most batch per statement until none is left, and returns how
	// many it deleted. Until then an expired or used token is reported as
	// such; afterwards it is ErrUnknown. Stores whose server expires keys
	// by itself may return 0 and do nothing.
	Purge(ctx context.Context, grace time.Duration, batch int) (int64, error)
}

// Digest is the SHA-256 form in which stores keep a token or a scope.
type Digest [32]byte

// String returns the digest in lower-case hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// TokenDigest returns the digest a store keeps for token.
func TokenDigest(token string) Digest { return digest("onetime/token/v1\x00", token) }

// ScopeDigest returns the digest a store keeps for scope.
func ScopeDigest(scope string) Digest { return digest("onetime/scope/v1\x00", scope) }

func digest(tag, s string) Digest {
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write([]byte(s))
	var d Digest
	h.Sum(d[:0])
	return d
}

// Use names who spends a token. A one-off consumer uses NewUse (random ID,
// fence 0): nobody else can ever hold the same Use. The HTTP middleware
// uses UseFor(owner) of the idempotency record the token keys, so that when
// that record is taken over (its holder died after spending the token) or
// released and claimed again, the new owner — same ID, higher fence — takes
// the token over instead of being told it is used, and the old owner's
// Restore is fenced out.
type Use struct {
	ID    [16]byte
	Fence uint64
}

// NewUse returns a Use with a random ID from crypto/rand.
func NewUse() Use {
	var u Use
	_, _ = rand.Read(u.ID[:]) // never fails (Go ≥ 1.24)
	return u
}

// UseFor returns the Use of an idempotency record's owner: its ID derives
// from the record's key digest, its fence is the owner's.
func UseFor(o idem.Owner) Use {
	d := o.Key.Digest()
	sum := sha256.Sum256(append([]byte("onetime/use/v1\x00"), d[:]...))
	var u Use
	copy(u.ID[:], sum[:16])
	u.Fence = o.Fence
	return u
}

// FenceString returns the fence as 20 zero-padded decimal digits, so that
// stores without 64-bit unsigned integers (Lua) compare fences as strings.
func (u Use) FenceString() string { return fmt.Sprintf("%020d", u.Fence) }
