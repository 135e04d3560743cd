package idem

import (
	"context"
	"errors"
	"fmt"
)

// Resolver is the operator's side of a store: it finds a record by its
// digest (the form 'idem keys list' and the logs show, since raw keys are
// never stored) and settles a held key. It is not part of Store, which
// stays small: memstore, sqlstore, redisstore and tiered implement it, and
// Resolve and Lookup find it by a type assertion.
type Resolver interface {
	// Lookup returns the record stored under d, or ErrNotFound. Like Get,
	// it reports held records as StateHeld.
	Lookup(ctx context.Context, d Digest) (Record, error)

	// Resolve settles the held record under r.Digest, if it is still the
	// one with fence r.Fence, held and not expired, in one atomic step
	// (a conditional UPDATE, a script): with r.Release the record is
	// released, so the next Begin acquires the key and runs the work;
	// otherwise r.Result becomes the key's result, replayed to every
	// retry. Anything else stored under the digest (another fence, a
	// completed or in-progress record, an expired one) is left as it is
	// and Resolve returns ErrNotHeld; no record at all: ErrNotFound.
	//
	// Resolve is safe to send again after a lost answer: when the record
	// already is what r asks for at the same fence (released, or completed
	// with exactly r.Result), it succeeds and changes nothing.
	Resolve(ctx context.Context, r Resolution) error
}

// Resolution is the input of Resolver.Resolve.
type Resolution struct {
	Digest Digest
	// Fence is the fence of the held record the operator looked at
	// (Record.Fence): a record re-acquired since has another and is left
	// alone.
	Fence uint64
	// Release releases the key instead of storing a result.
	Release bool
	// Result is the key's result, when Release is false: what Do or the
	// HTTP middleware would have stored (the JSON encoding of Do's value;
	// for an HTTP key, httpidem.EncodeResponse). It must not be one of
	// Do's outcome-unknown results (IsOutcomeUnknownResult), which would
	// settle nothing (redisstore also refuses httpidem's outcome-unknown
	// answer).
	Result []byte
}

// ErrNotHeld is returned by Resolve when the record under the digest is
// not the held record the resolution names: it was resolved, released,
// re-acquired or expired meanwhile, or was never held.
var ErrNotHeld = errors.New("idem: record is not held (or no longer the one looked at)")

// ErrNoResolver is returned by Resolve and Lookup for a store that does not
// implement Resolver.
var ErrNoResolver = errors.New("idem: store cannot look up or resolve records (no Resolver)")

// heldExact is Do's outcome-unknown result (Options.AtMostOnce): the
// bytes a held key of Do replays, which Do recognises. Whether a record is
// held is its state (StateHeld, stored by Store.Hold), not these bytes.
const heldExact = "\x00idem/1 outcome-unknown"

// Validate reports a resolution that no store accepts.
func (r Resolution) Validate() error {
	switch {
	case r.Fence == 0:
		return &ConfigError{Field: "Resolution.Fence", Reason: "required: the fence of the held record (Record.Fence)"}
	case r.Release && r.Result != nil:
		return &ConfigError{Field: "Resolution.Result", Reason: "a release stores no result"}
	case !r.Release && IsOutcomeUnknownResult(r.Result):
		return &ConfigError{Field: "Resolution.Result", Reason: "is Do's outcome-unknown result; resolve with the real result, or release"}
	}
	return nil
}

// Resolve settles a held key of s (see Resolver.Resolve): the Go form of
// 'idem keys resolve'. It returns ErrNoResolver when s does not implement
// Resolver.
//
// A typical use reads the record first, decides (the service's own
// records say whether the operation happened), then resolves at the fence
// it read:
//
//	rec, err := idem.Lookup(ctx, store, digest)
//	…
//	err = idem.Resolve(ctx, store, idem.Resolution{Digest: digest, Fence: rec.Fence, Result: receipt})
func Resolve(ctx context.Context, s Store, r Resolution) error {
	rs, ok := s.(Resolver)
	if !ok {
		return fmt.Errorf("%w: %T", ErrNoResolver, s)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	return rs.Resolve(ctx, r)
}

// Lookup returns the record of s stored under d (see Resolver.Lookup), or
// ErrNoResolver when s does not implement Resolver.
func Lookup(ctx context.Context, s Store, d Digest) (Record, error) {
	rs, ok := s.(Resolver)
	if !ok {
		return Record{}, fmt.Errorf("%w: %T", ErrNoResolver, s)
	}
	return rs.Lookup(ctx, d)
}
