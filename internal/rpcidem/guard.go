// Package rpcidem is the idempotency core shared by the RPC integrations
// (grpcidem for grpc-go, connectidem for Connect): the stored-answer
// encoding, the fingerprint of a proto request, the status-code policy and
// the mapping of the claim engine's steps (idem.Claimer, idem.Attempt) to
// RPC answers. The adapters only translate keys, metadata and errors of
// their framework.
package rpcidem

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// Status codes, numbered as in gRPC and Connect (they agree).
const (
	OK                 = 0
	Canceled           = 1
	Unknown            = 2
	InvalidArgument    = 3
	DeadlineExceeded   = 4
	ResourceExhausted  = 8
	FailedPrecondition = 9
	Aborted            = 10
	Internal           = 13
	Unavailable        = 14
	DataLoss           = 15
)

// DefaultStoreCode stores every answer except those that say the call may
// succeed if retried (Canceled, DeadlineExceeded, ResourceExhausted,
// Aborted, Unavailable) or that the server failed (Unknown, Internal,
// DataLoss): HTTP's rule, where 5xx, 408 and 429 are not stored.
func DefaultStoreCode(code uint32) bool {
	switch code {
	case Canceled, Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Internal, Unavailable, DataLoss:
		return false
	}
	return true
}

// Fingerprint is the full method name and the deterministic proto encoding
// of the request.
func Fingerprint(method string, req proto.Message) (idem.Fingerprint, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return idem.Fingerprint{}, err
	}
	return idem.FingerprintOf([]byte(method), b), nil
}

// Guard runs keyed calls once.
type Guard struct {
	Store              idem.Store
	Lease, Retention   time.Duration
	MaxResponse        int
	InFlightRetryAfter time.Duration
	// StoreTimeout bounds each store call, and finishing past the
	// caller's cancellation (idem.Claimer.StoreTimeout, FinishGrace).
	// Zero: idem.DefaultStoreTimeout.
	StoreTimeout time.Duration
	StoreCode    func(code uint32) bool
	Logger       *slog.Logger
	// Observer, when set, is told of each store call and decision, and
	// of each phase when it is an observe.PhaseObserver (see Observe).
	Observer observe.Observer
	// Protocol is what the Observer's events carry: ProtocolGRPC or
	// ProtocolConnect.
	Protocol observe.Protocol
	claimer  idem.Claimer // the claim engine (NewGuard)
}

// DefaultMaxResponse is the default Guard.MaxResponse.
const DefaultMaxResponse = 4 << 20

// NewGuard fills in g's defaults (MaxResponse 4 MiB, InFlightRetryAfter
// one second, DefaultStoreCode, slog.Default) and validates it.
func NewGuard(g Guard) (*Guard, error) {
	bad := func(field, reason string) error {
		pkg := "rpcidem"
		switch g.Protocol {
		case observe.ProtocolGRPC:
			pkg = "grpcidem"
		case observe.ProtocolConnect:
			pkg = "connectidem"
		}
		return &idem.ConfigError{Package: pkg, Field: field, Reason: reason}
	}
	if g.Store == nil {
		return nil, bad("store", "nil")
	}
	if g.MaxResponse == 0 {
		g.MaxResponse = DefaultMaxResponse
	}
	if g.InFlightRetryAfter == 0 {
		g.InFlightRetryAfter = time.Second
	}
	if g.StoreTimeout == 0 {
		g.StoreTimeout = idem.DefaultStoreTimeout
	}
	if g.StoreCode == nil {
		g.StoreCode = DefaultStoreCode
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	g.claimer = idem.Claimer{Store: g.Store, Observer: observe.ForAttempts(g.Observer, g.Protocol), StoreTimeout: g.StoreTimeout, FinishGrace: g.StoreTimeout}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxResponse", int64(g.MaxResponse)}, {"Lease", int64(g.Lease)}, {"Retention", int64(g.Retention)},
		{"InFlightRetryAfter", int64(g.InFlightRetryAfter)}, {"StoreTimeout", int64(g.StoreTimeout)},
	} {
		if f.v < 0 {
			return nil, bad("Config."+f.name, "must not be negative")
		}
	}
	if _, err := (idem.BeginRequest{Key: idem.MustKey("", "x"), Lease: g.Lease, Retention: g.Retention}).Normalize(); err != nil {
		var ce *idem.ConfigError
		if errors.As(err, &ce) { // BeginRequest.Lease is the interceptor's Config.Lease
			return nil, bad("Config."+strings.TrimPrefix(ce.Field, "BeginRequest."), ce.Reason)
		}
		return nil, err
	}
	return &g, nil
}

// Refusal is an answer the guard gives instead of running the call.
type Refusal struct {
	Code       uint32
	Message    string
	RetryAfter time.Duration // Aborted (in flight): when to retry

	decision observe.Decision // what the Observer is told
}

// Outcome of Run.
type Outcome int

// Outcomes of Run.
const (
	Executed Outcome = iota + 1 // the call ran now; its answer is exec's
	Replayed                    // the stored answer
	Refused                     // see the Refusal
)

// Run claims key and runs exec once, or replays the stored answer, or
// refuses. exec's Answer is stored when StoreCode accepts its code and the
// claim is released otherwise; a panic in exec releases the claim and goes
// on. An Executed answer is returned only once the store recorded it: if
// that fails the outcome is a Refusal with Unavailable. method (the full
// method or procedure name) is what the Observer's events carry.
func (g *Guard) Run(ctx context.Context, method string, key idem.Key, fp idem.Fingerprint, exec func(ctx context.Context) Answer) (Answer, Outcome, *Refusal) {
	t, err := g.claimer.Begin(ctx, idem.BeginRequest{Key: key, Fingerprint: fp, Lease: g.Lease, Retention: g.Retention})
	if err != nil {
		ref := g.storeFailed(ctx, key, "begin", err)
		g.refused(ctx, method, key, ref, err)
		return Answer{}, Refused, ref
	}
	switch t.Outcome {
	case idem.Replay:
		a, err := Decode(t.Result)
		if errors.Is(err, ErrNotReplayable) {
			ref := &Refusal{Code: FailedPrecondition, Message: "the first answer under this idempotency key was too large to store; it cannot be replayed (use a new key only if you know the first call did not take effect)", decision: observe.DecisionNotReplayable}
			g.refused(ctx, method, key, ref, nil)
			return Answer{}, Refused, ref
		}
		if err != nil {
			g.Logger.ErrorContext(ctx, "idempotency record unreadable", "key", key.String(), "err", err)
			ref := &Refusal{Code: Internal, Message: "stored answer unreadable", decision: observe.DecisionStoreError}
			g.refused(ctx, method, key, ref, err)
			return Answer{}, Refused, ref
		}
		g.Observe(ctx, method, key, observe.DecisionReplayed, a.Code(), nil)
		return a, Replayed, nil
	case idem.InFlight:
		ref := &Refusal{Code: Aborted, Message: "a call with this idempotency key is in progress; retry later",
			RetryAfter: min(t.RetryAfter, g.InFlightRetryAfter), decision: observe.DecisionInFlight}
		g.refused(ctx, method, key, ref, nil)
		return Answer{}, Refused, ref
	case idem.Mismatch:
		ref := &Refusal{Code: FailedPrecondition, Message: "the idempotency key was used for a different request", decision: observe.DecisionMismatch}
		g.refused(ctx, method, key, ref, nil)
		return Answer{}, Refused, ref
	}
	g.Observe(ctx, method, key, observe.DecisionAcquired, 0, nil)

	var at idem.Attempt
	hctx, err := at.Start(ctx, &g.claimer, t)
	if err != nil { // not AtMostOnce: cannot happen; handled all the same
		ref := g.storeFailed(ctx, key, "start", err)
		g.refused(hctx, method, key, ref, err)
		at.End()
		return Answer{}, Refused, ref
	}
	var a Answer
	at.Run(ctx, func() { a = exec(hctx) }, func() (int, error) { return 0, errPanicked }, func(cctx context.Context) {
		// A panic: the retry runs again.
		if err := at.Release(); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
			g.Logger.WarnContext(ctx, "idempotency release failed after a panic; retries wait for the lease to run out", "key", key.String(), "err", err)
		}
		g.Observe(cctx, method, key, observe.DecisionReleased, 0, errPanicked)
	})
	code := a.Code()
	at.WorkDone(int(code), nil)
	cctx := at.Finishing(ctx)
	defer at.End()

	if !g.StoreCode(code) {
		if err := at.Release(); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
			g.Logger.WarnContext(ctx, "idempotency release failed", "key", key.String(), "err", err)
		}
		g.Observe(cctx, method, key, observe.DecisionReleased, code, nil)
		return a, Executed, nil
	}
	if at.Lost() {
		// Another caller may have taken the key over: this answer cannot be
		// the one every retry sees.
		ref := &Refusal{Code: Unavailable, Message: "idempotency lease lost while the call ran; retry with the same key", decision: observe.DecisionStoreError}
		g.refused(cctx, method, key, ref, idem.ErrLeaseLost)
		return Answer{}, Refused, ref
	}
	data, err := Encode(a)
	if err != nil {
		// The call ran: a retry must not run it again. The key ends not
		// replayable.
		if cerr := at.Complete(notReplayable, nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
		ref := &Refusal{Code: Internal, Message: "cannot store the answer: " + err.Error(), decision: observe.DecisionNotReplayable}
		g.refused(cctx, method, key, ref, err)
		return Answer{}, Refused, ref
	}
	if len(data) > g.MaxResponse {
		data = notReplayable
	}
	if err := at.Complete(data, notReplayable); err != nil && !errors.Is(err, idem.ErrNotReplayable) {
		ref := g.storeFailed(ctx, key, "complete", err)
		g.refused(cctx, method, key, ref, err)
		return Answer{}, Refused, ref
	}
	g.Observe(cctx, method, key, observe.DecisionExecuted, code, nil)
	return a, Executed, nil
}

func (g *Guard) storeFailed(ctx context.Context, key idem.Key, op string, err error) *Refusal {
	if cerr := ctx.Err(); cerr != nil {
		code := uint32(Canceled)
		if errors.Is(cerr, context.DeadlineExceeded) {
			code = DeadlineExceeded
		}
		return &Refusal{Code: code, Message: cerr.Error(), decision: observe.DecisionCanceled}
	}
	g.Logger.WarnContext(ctx, "idempotency store failed", "op", op, "key", key.String(), "err", err)
	return &Refusal{Code: Unavailable, Message: "idempotency store unavailable; retry with the same key", decision: observe.DecisionStoreError}
}

// StatusOf returns s, or the OK status for nil.
func StatusOf(s *spb.Status) *spb.Status {
	if s == nil {
		return &spb.Status{}
	}
	return s
}
