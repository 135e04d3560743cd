package tokentest

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/onetime"
)

// Harness tells the suite how to make stores.
type Harness struct {
	// New returns an empty store isolated from every other call. retain is
	// how long the store keeps a token after its expiry (used by stores
	// whose server expires keys natively; others ignore it and are purged
	// by Purge). Required. Cases run in parallel.
	New func(t *testing.T, retain time.Duration) onetime.Store

	// Unreachable returns a store pointed at a server that does not answer.
	// Every operation must fail with an error for which idem.IsUnavailable
	// is true.
	Unreachable func(t *testing.T) onetime.Store

	// NativeExpiry is set by stores whose server deletes expired tokens by
	// itself (Redis TTLs); Purge is then not expected to delete anything.
	NativeExpiry bool

	// Concurrency is how many goroutines race for one token; 0 means 100.
	Concurrency int
}

const (
	longTTL   = time.Hour
	shortTTL  = 250 * time.Millisecond
	waitLimit = 15 * time.Second
)

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("tokentest: Harness.New is required")
	}
	if h.Concurrency == 0 {
		h.Concurrency = 100
	}
	cases := []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"ConsumeOnce", testConsumeOnce},
		{"ConcurrentConsumeOneWins", testConcurrent},
		{"Unknown", testUnknown},
		{"WrongScope", testWrongScope},
		{"Expired", testExpired},
		{"ExtremeTTL", testExtremeTTL},
		{"UsedBeatsExpired", testUsedBeatsExpired},
		{"Restore", testRestore},
		{"RetakeByFence", testRetake},
		{"ConcurrentRetakeAndRestore", testConcurrentRetake},
		{"Retention", testRetention},
		{"CanceledContext", testCanceled},
		{"Unreachable", testUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newDigest() onetime.Digest {
	var d onetime.Digest
	_, _ = rand.Read(d[:])
	return d
}

func insert(t *testing.T, s onetime.Store, ttl time.Duration) (tok, scope onetime.Digest) {
	t.Helper()
	tok, scope = newDigest(), newDigest()
	if err := s.Insert(ctxT(t), tok, scope, ttl); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return tok, scope
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s: got %v, want success", what, got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func testConsumeOnce(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, longTTL)
	wantErr(t, "first Consume", s.Consume(ctx, tok, scope, onetime.NewUse()), nil)
	wantErr(t, "second Consume", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrUsed)
	wantErr(t, "third Consume", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrUsed)
	// Two tokens of one scope are independent.
	tok2 := newDigest()
	if err := s.Insert(ctx, tok2, scope, longTTL); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "other token of the same scope", s.Consume(ctx, tok2, scope, onetime.NewUse()), nil)
}

func testConcurrent(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	for round := 0; round < 3; round++ {
		tok, scope := insert(t, s, longTTL)
		n := h.Concurrency
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.Consume(ctx, tok, scope, onetime.NewUse())
			}()
		}
		close(start)
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, onetime.ErrUsed):
			default:
				t.Fatalf("round %d consumer %d: %v", round, i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d of %d concurrent consumers won, want exactly 1", round, wins, n)
		}
	}
}

func testUnknown(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	wantErr(t, "never issued", s.Consume(ctx, newDigest(), newDigest(), onetime.NewUse()), onetime.ErrUnknown)
	wantErr(t, "restore never issued", s.Restore(ctx, newDigest(), onetime.NewUse()), onetime.ErrNotHeld)
}

func testWrongScope(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, longTTL)
	// A foreign scope neither spends the token nor learns its state.
	for range 3 {
		wantErr(t, "foreign scope", s.Consume(ctx, tok, newDigest(), onetime.NewUse()), onetime.ErrWrongScope)
	}
	wantErr(t, "owner after foreign attempts", s.Consume(ctx, tok, scope, onetime.NewUse()), nil)
	wantErr(t, "foreign scope after use", s.Consume(ctx, tok, newDigest(), onetime.NewUse()), onetime.ErrWrongScope)
	// Not even the spender's own Use crosses scopes.
	u := onetime.NewUse()
	tok2, scope2 := insert(t, s, longTTL)
	wantErr(t, "take", s.Consume(ctx, tok2, scope2, u), nil)
	wantErr(t, "same Use, foreign scope", s.Consume(ctx, tok2, newDigest(), u), onetime.ErrWrongScope)

	expTok, expScope := insert(t, s, shortTTL)
	time.Sleep(3 * shortTTL)
	wantErr(t, "foreign scope of expired", s.Consume(ctx, expTok, newDigest(), onetime.NewUse()), onetime.ErrWrongScope)
	wantErr(t, "owner of expired", s.Consume(ctx, expTok, expScope, onetime.NewUse()), onetime.ErrExpired)
}

func testExpired(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, shortTTL)
	time.Sleep(3 * shortTTL) // at least the TTL has passed on every clock of this machine
	for range 2 {
		wantErr(t, "expired", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrExpired)
	}
}

// testExtremeTTL: a TTL and a retention of up to math.MaxInt64 nanoseconds
// (292 years) mean "far in the future", whatever unit and origin the
// store's clock has: the token is accepted, spent once, and never reported
// expired or purged.
func testExtremeTTL(t *testing.T, h Harness) {
	s := h.New(t, math.MaxInt64)
	ctx := ctxT(t)
	for _, ttl := range []time.Duration{
		math.MaxInt64,
		math.MaxInt64 - 1,
		time.Duration(math.MaxInt64 - time.Now().UnixNano() + int64(time.Hour)), // past the end of Unix nanoseconds
	} {
		tok, scope := insert(t, s, ttl)
		n := h.Concurrency/10 + 2
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { errs <- s.Consume(ctx, tok, scope, onetime.NewUse()) })
		}
		wg.Wait()
		close(errs)
		won := 0
		for err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, onetime.ErrUsed):
				t.Errorf("TTL %v: Consume = %v, want success or ErrUsed", ttl, err)
			}
		}
		if won != 1 {
			t.Errorf("TTL %v: %d of %d concurrent Consumes won, want exactly 1", ttl, won, n)
		}
		fresh, freshScope := insert(t, s, ttl)
		for _, grace := range []time.Duration{0, math.MaxInt64} {
			if n, err := s.Purge(ctx, grace, 100); err != nil || n != 0 {
				t.Errorf("TTL %v: Purge(grace %v) = %d, %v; want nothing purged", ttl, grace, n, err)
			}
		}
		wantErr(t, "spent token after Purge", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrUsed)
		wantErr(t, "fresh token after Purge", s.Consume(ctx, fresh, freshScope, onetime.NewUse()), nil)
	}
}

func testUsedBeatsExpired(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, shortTTL)
	u := onetime.NewUse()
	wantErr(t, "first Consume", s.Consume(ctx, tok, scope, u), nil)
	time.Sleep(3 * shortTTL)
	wantErr(t, "used, then expired", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrUsed)
	// Not even the spender re-takes an expired token: the idempotency
	// record that remembers its result is only promised to outlive the
	// token, so a re-take after expiry could run the work again.
	wantErr(t, "re-take after expiry", s.Consume(ctx, tok, scope, u), onetime.ErrExpired)
	wantErr(t, "higher fence after expiry", s.Consume(ctx, tok, scope, onetime.Use{ID: u.ID, Fence: u.Fence + 1}), onetime.ErrExpired)
	// A restored token keeps its original expiry.
	wantErr(t, "restore after expiry", s.Restore(ctx, tok, u), nil)
	wantErr(t, "consume restored expired token", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrExpired)
}

func testRestore(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, longTTL)
	a, b := onetime.NewUse(), onetime.NewUse()
	wantErr(t, "take a", s.Consume(ctx, tok, scope, a), nil)
	wantErr(t, "restore by a stranger", s.Restore(ctx, tok, b), onetime.ErrNotHeld)
	wantErr(t, "take b while a holds it", s.Consume(ctx, tok, scope, b), onetime.ErrUsed)
	wantErr(t, "restore a", s.Restore(ctx, tok, a), nil)
	wantErr(t, "restore a twice", s.Restore(ctx, tok, a), onetime.ErrNotHeld)
	wantErr(t, "take b after restore", s.Consume(ctx, tok, scope, b), nil)
	wantErr(t, "restore by a after b took it", s.Restore(ctx, tok, a), onetime.ErrNotHeld)
	wantErr(t, "take a again", s.Consume(ctx, tok, scope, a), onetime.ErrUsed)
}

func testRetake(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, longTTL)
	id := onetime.NewUse().ID
	at := func(f uint64) onetime.Use { return onetime.Use{ID: id, Fence: f} }
	wantErr(t, "take at fence 5", s.Consume(ctx, tok, scope, at(5)), nil)
	wantErr(t, "same use again (lost answer)", s.Consume(ctx, tok, scope, at(5)), nil)
	wantErr(t, "take over at fence 7", s.Consume(ctx, tok, scope, at(7)), nil)
	wantErr(t, "stale owner at fence 6", s.Consume(ctx, tok, scope, at(6)), onetime.ErrUsed)
	wantErr(t, "stale owner restores", s.Restore(ctx, tok, at(5)), onetime.ErrNotHeld)
	wantErr(t, "stranger", s.Consume(ctx, tok, scope, onetime.NewUse()), onetime.ErrUsed)
	wantErr(t, "current owner restores", s.Restore(ctx, tok, at(7)), nil)
	wantErr(t, "stranger after restore", s.Consume(ctx, tok, scope, onetime.NewUse()), nil)
	wantErr(t, "owner after the stranger", s.Consume(ctx, tok, scope, at(9)), onetime.ErrUsed)
	// Fences near the top of uint64 compare correctly.
	tok2, scope2 := insert(t, s, longTTL)
	wantErr(t, "huge fence", s.Consume(ctx, tok2, scope2, at(1<<62+1)), nil)
	wantErr(t, "below huge fence", s.Consume(ctx, tok2, scope2, at(1<<62)), onetime.ErrUsed)
	wantErr(t, "above huge fence", s.Consume(ctx, tok2, scope2, at(1<<63-1)), nil)
}

// testConcurrentRetake races holders of one record (same ID, fences 1..n)
// with strangers and with restores: the token ends held by one Use, and no
// stranger ever wins while a fenced holder holds it.
func testConcurrentRetake(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	ctx := ctxT(t)
	tok, scope := insert(t, s, longTTL)
	id := onetime.NewUse().ID
	n := h.Concurrency / 2
	var wg sync.WaitGroup
	var mu sync.Mutex
	strangerWins := 0
	start := make(chan struct{})
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_ = s.Consume(ctx, tok, scope, onetime.Use{ID: id, Fence: uint64(i + 1)})
		}()
		go func() {
			defer wg.Done()
			<-start
			err := s.Consume(ctx, tok, scope, onetime.NewUse())
			if err == nil {
				mu.Lock()
				strangerWins++
				mu.Unlock()
			} else if !errors.Is(err, onetime.ErrUsed) {
				t.Errorf("stranger: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	// Either one stranger got there first (and no holder since), or a
	// holder did and no stranger ever won.
	if strangerWins > 1 {
		t.Fatalf("%d strangers won one token", strangerWins)
	}
	top := onetime.Use{ID: id, Fence: uint64(n)}
	err := s.Consume(ctx, tok, scope, top)
	switch strangerWins {
	case 0:
		wantErr(t, "highest fence re-takes", err, nil)
		wantErr(t, "restore by highest fence", s.Restore(ctx, tok, top), nil)
	case 1:
		wantErr(t, "holder after a stranger won", err, onetime.ErrUsed)
	}
}

func testRetention(t *testing.T, h Harness) {
	const retain = 100 * time.Millisecond
	s := h.New(t, retain)
	ctx := ctxT(t)
	live, liveScope := insert(t, s, longTTL)
	// A used token: consumed before its short TTL ends. When a loaded
	// machine stalls past the TTL between the Insert and the Consume, the
	// token expired unused: it is waited out below with the others, and a
	// new one is tried.
	var stale [][2]onetime.Digest
	used, usedScope := insert(t, s, shortTTL)
	for attempt := 1; ; attempt++ {
		err := s.Consume(ctx, used, usedScope, onetime.NewUse())
		if !errors.Is(err, onetime.ErrExpired) || attempt == 10 {
			wantErr(t, "consume", err, nil)
			break
		}
		stale = append(stale, [2]onetime.Digest{used, usedScope})
		used, usedScope = insert(t, s, shortTTL)
	}
	unused, unusedScope := insert(t, s, shortTTL)
	time.Sleep(3 * shortTTL) // both short tokens have expired: polling them changes nothing
	deadline := time.Now().Add(waitLimit)
	for {
		if !h.NativeExpiry {
			if _, err := s.Purge(ctx, retain, 2); err != nil {
				t.Fatalf("Purge: %v", err)
			}
		}
		e1 := s.Consume(ctx, used, usedScope, onetime.NewUse())
		e2 := s.Consume(ctx, unused, unusedScope, onetime.NewUse())
		errs := []error{e1, e2}
		for _, d := range stale {
			errs = append(errs, s.Consume(ctx, d[0], d[1], onetime.NewUse()))
		}
		gone := true
		for _, e := range errs {
			gone = gone && errors.Is(e, onetime.ErrUnknown)
		}
		if gone {
			break
		}
		for _, e := range errs {
			if !errors.Is(e, onetime.ErrUsed) && !errors.Is(e, onetime.ErrExpired) && !errors.Is(e, onetime.ErrUnknown) {
				t.Fatalf("while waiting for retention: %v", e)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokens still known %v after expiry: %v, %v", waitLimit, e1, e2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := s.Purge(ctx, 0, 100); err != nil {
		t.Fatalf("final Purge: %v", err)
	} else if n != 0 {
		t.Fatalf("final Purge deleted %d tokens, want 0 (only a live one is left)", n)
	}
	wantErr(t, "live token survives retention", s.Consume(ctx, live, liveScope, onetime.NewUse()), nil)
}

func testCanceled(t *testing.T, h Harness) {
	s := h.New(t, time.Hour)
	tok, scope := insert(t, s, longTTL)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	checks := map[string]error{
		"Insert":  s.Insert(ctx, newDigest(), newDigest(), longTTL),
		"Consume": s.Consume(ctx, tok, scope, onetime.NewUse()),
		"Restore": s.Restore(ctx, tok, onetime.NewUse()),
	}
	_, checks["Purge"] = s.Purge(ctx, 0, 10)
	for op, err := range checks {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", op, err)
		}
	}
	wantErr(t, "token untouched by cancelled calls", s.Consume(ctxT(t), tok, scope, onetime.NewUse()), nil)
}

func testUnreachable(t *testing.T, h Harness) {
	if h.Unreachable == nil {
		t.Skip("store has no I/O")
	}
	s := h.Unreachable(t)
	ctx := ctxT(t)
	checks := map[string]error{
		"Insert":  s.Insert(ctx, newDigest(), newDigest(), longTTL),
		"Consume": s.Consume(ctx, newDigest(), newDigest(), onetime.NewUse()),
		"Restore": s.Restore(ctx, newDigest(), onetime.NewUse()),
	}
	_, checks["Purge"] = s.Purge(ctx, 0, 10)
	for op, err := range checks {
		if h.NativeExpiry && op == "Purge" && err == nil {
			continue
		}
		if !idem.IsUnavailable(err) {
			t.Errorf("%s on an unreachable server: %v, want idem.IsUnavailable", op, err)
		}
		if onetime.IsRejected(err) {
			t.Errorf("%s on an unreachable server is a rejection: %v", op, err)
		}
	}
}
