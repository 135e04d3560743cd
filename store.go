package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Store keeps idempotency records. Every method is one atomic step in the
// storage engine (a single statement, a Lua script, one short transaction):
// never a read followed by a write decided in Go.
//
// The semantics every implementation must honour are the table in Begin's
// documentation; idemtest.RunStore checks them against a real server.
type Store interface {
	// Begin claims req.Key or reports what stands in the way, atomically:
	//
	//	stored                         fingerprint  outcome
	//	nothing, expired or released   any          Acquired (new owner)
	//	completed or held              same         Replay (stored result)
	//	in progress, lease valid       same         InFlight (RetryAfter = lease left)
	//	in progress, lease expired     same         Acquired by takeover (fence grows)
	//	completed, held or in progress different    Mismatch
	//
	// A replay is a read and writes nothing. Errors are store failures
	// (IsUnavailable), a cancelled context, or an invalid request.
	Begin(ctx context.Context, req BeginRequest) (Claim, error)

	// Complete stores result and marks the record completed, if owner still
	// holds it; otherwise it returns ErrLeaseLost and changes nothing. An
	// Owner that Begin did not return for this key now (zero, forged, stale,
	// released) never holds it. Complete is idempotent for its owner: a
	// repeated Complete (after a lost answer) succeeds and keeps the first
	// result, so a replay already served never changes.
	Complete(ctx context.Context, owner Owner, result []byte) error

	// Hold is Complete for work whose outcome is unknown: it stores
	// result (the adapter's outcome-unknown answer, which Begin replays
	// like any completed result) and marks the record StateHeld, if owner
	// still holds it; otherwise ErrLeaseLost. The key then never runs
	// again until an operator resolves it (Resolver) or it expires. Like
	// Complete it is idempotent for its owner, and the first finishing
	// call wins: a Hold after the owner's Complete (or a Complete after its
	// Hold) succeeds and changes nothing.
	//
	// Held is the record's state, kept by the store, never inferred from
	// the result's bytes. It is a method of Store rather than an optional
	// interface because a wrapper that embeds Store (tracing, fault
	// injection) would hide an optional method, and the key would silently
	// read as completed: the held keys an operator must settle would be
	// lost from 'idem keys list' and the held-key metrics.
	Hold(ctx context.Context, owner Owner, result []byte) error

	// Release gives the claim up without a result, so that the next Begin
	// acquires it, if owner still holds it; otherwise ErrLeaseLost.
	Release(ctx context.Context, owner Owner) error

	// Extend renews owner's lease to lease from now (store time), if owner
	// still holds it; otherwise ErrLeaseLost.
	Extend(ctx context.Context, owner Owner, lease time.Duration) error

	// MarkStarted records, atomically with the owner check, that owner's
	// protected work is about to have effects outside the store (the
	// request is about to reach the service). It returns ErrLeaseLost if
	// owner no longer holds the claim (taken over, completed, released or
	// never issued); repeated calls by the owner succeed. It is one round
	// trip.
	//
	// The mark survives takeovers: a Begin that takes the claim over
	// reports Claim.Started, and so does every later takeover of the same
	// claim. It is cleared only when the key is acquired afresh (nothing
	// stored, expired, or released; Release clears it). A caller that must
	// never run its work twice checks Claim.Started after a takeover and,
	// when it is set, does not run it: the previous holder may have acted.
	MarkStarted(ctx context.Context, owner Owner) error

	// Get returns the record of key, or ErrNotFound. Expired records that
	// were not purged yet are returned with their ExpiresAt in the past.
	Get(ctx context.Context, key Key) (Record, error)

	// Purge deletes records that expired at least grace ago, at most batch
	// rows per statement, until none is left, and returns how many it
	// deleted. It never deletes a live record, even one re-created under the
	// same key while Purge runs.
	Purge(ctx context.Context, grace time.Duration, batch int) (int64, error)
}

// BeginRequest is the input of Store.Begin.
type BeginRequest struct {
	Key         Key
	Fingerprint Fingerprint
	// Lease is how long the claim stays exclusive without renewal.
	// Zero means DefaultLease.
	Lease time.Duration
	// Retention is how long the record lives after it is acquired; it is
	// the window in which duplicates are recognised. Zero means
	// DefaultRetention.
	//
	// Both may be as long as a Duration holds (math.MaxInt64, 292 years):
	// a store treats an end past its clock's range as the far future, and
	// never lets the sum wrap into the past (idemtest.RunStore checks it).
	Retention time.Duration
}

// Defaults for BeginRequest.
const (
	DefaultLease     = 30 * time.Second
	DefaultRetention = 24 * time.Hour
)

// Normalize validates r and fills in the defaults. Stores call it first.
func (r BeginRequest) Normalize() (BeginRequest, error) {
	if r.Key.IsZero() {
		return r, &KeyError{Reason: "zero Key (build keys with idem.NewKey)"}
	}
	if r.Lease == 0 {
		r.Lease = DefaultLease
	}
	if r.Retention == 0 {
		r.Retention = DefaultRetention
	}
	switch {
	case r.Lease < time.Millisecond:
		return r, &ConfigError{Field: "BeginRequest.Lease", Reason: "must be at least 1ms"}
	case r.Retention < time.Millisecond:
		return r, &ConfigError{Field: "BeginRequest.Retention", Reason: "must be at least 1ms"}
	case r.Retention < r.Lease:
		return r, &ConfigError{Field: "BeginRequest.Retention", Reason: "must be at least the lease"}
	}
	return r, nil
}

// Outcome is the decision Begin reached.
type Outcome uint8

// Outcomes of Begin.
const (
	// Acquired: the caller owns the key and must execute, then Complete or
	// Release.
	Acquired Outcome = iota + 1
	// Replay: the operation completed before; Claim.Result holds its result.
	Replay
	// InFlight: another owner holds a live lease on the key.
	InFlight
	// Mismatch: the key was used for a different request.
	Mismatch
)

func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Replay:
		return "replay"
	case InFlight:
		return "in_flight"
	case Mismatch:
		return "mismatch"
	}
	return "invalid"
}

// Claim is the result of Begin.
type Claim struct {
	Outcome Outcome
	// Owner is set when Outcome is Acquired.
	Owner Owner
	// Takeover is true when the claim was acquired from a holder whose
	// lease expired: that holder may have acted before it died.
	Takeover bool
	// Started is true when the claim was acquired by takeover and a
	// previous holder had called MarkStarted: its work may have had
	// effects, so running it again may do them twice.
	Started bool
	// Result is the stored result when Outcome is Replay. It is
	// read-only: a store may answer with bytes it keeps and never changes
	// (memstore does, so a replay copies nothing); copy it to change it.
	Result []byte
	// RetryAfter is, for InFlight, how long the current lease has left by
	// the store's clock.
	RetryAfter time.Duration
}

// Err returns the sentinel error of an outcome that does not let the caller
// proceed: an *InFlightError for InFlight, ErrMismatch for Mismatch, nil
// otherwise.
func (c Claim) Err() error {
	switch c.Outcome {
	case InFlight:
		return &InFlightError{RetryAfter: c.RetryAfter}
	case Mismatch:
		return ErrMismatch
	}
	return nil
}

// Token is an owner's secret: Complete, Release and Extend compare it in the
// same atomic step as their write.
type Token [16]byte

// NewToken returns a random Token from crypto/rand.
func NewToken() Token {
	var t Token
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails (Go ≥1.24)
	return t
}

// String returns the token in hex.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// Fence is a fencing token: a number that only grows for one name (a key
// here, a lock name in package lock), also across takeovers, releases and
// purges. A holder passes it to the storage it writes to, which refuses a
// write whose fence is older than the newest it has seen. Zero means "no
// fence". It is the one fence type of idem: Owner.Fence, Record.Fence,
// Result.Fence and lock.Fence are all Fence.
type Fence = uint64

// Owner is the capability to finish one claim.
type Owner struct {
	Key   Key
	Token Token
	// Fence grows with every acquisition of the same key, also across
	// takeovers, releases and purges. Pass it to your own conditional
	// writes (WHERE fence < $fence) to shut out a holder that lost its lease.
	Fence Fence
}

// State is a record's state.
type State uint8

// Record states.
const (
	StateInProgress State = iota + 1
	StateCompleted
	// StateReleased: the owner gave the claim up; the next Begin acquires
	// it. The record is kept so that the key's fence keeps growing.
	StateReleased
	// StateHeld: completed by Store.Hold, with a result that says the
	// outcome is unknown (the work may have had its effects; see
	// Options.AtMostOnce and httpidem's HoldUnknown). Begin replays it like
	// any completed record until it is resolved (Resolver) or expires. It
	// is a state the store keeps, not read from the result; the held
	// records of earlier releases (completed, with an outcome-unknown
	// result) read as held too: sqlstore's migration 0003 converts them,
	// redisstore recognises them.
	StateHeld
)

func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	case StateReleased:
		return "released"
	case StateHeld:
		return "held"
	}
	return "invalid"
}

// ParseState parses the names returned by State.String.
func ParseState(s string) (State, bool) {
	for _, st := range []State{StateInProgress, StateCompleted, StateReleased, StateHeld} {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// Record is a stored idempotency record, as Store.Get returns it.
type Record struct {
	Digest      Digest
	State       State
	Fingerprint Fingerprint
	Fence       Fence
	Result      []byte
	CreatedAt   time.Time // when the current owner acquired it
	LeaseUntil  time.Time // in progress: when the lease runs out
	ExpiresAt   time.Time // when the record stops counting
	// Started: a holder of the current claim called MarkStarted (kept
	// across takeovers and on completion; cleared by Release and by a
	// fresh acquisition).
	Started bool
}

// NextFence returns the fence for a new acquisition: greater than prev and
// not below the store clock in microseconds. Growing with the clock keeps
// fences increasing across purges and releases, when the previous value is
// gone: a purged record expired at least its retention ago, so the clock has
// moved far past every fence it had.
func NextFence(prev uint64, nowMicros int64) uint64 {
	f := prev + 1
	if nowMicros > 0 && uint64(nowMicros) > f {
		f = uint64(nowMicros)
	}
	return f
}
