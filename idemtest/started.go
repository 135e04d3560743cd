package idemtest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The MarkStarted cases: the mark is set by the owner only, survives
// takeovers, and is cleared by Release and by a fresh acquisition.

func mustGet(t *testing.T, s idem.Store, key idem.Key) idem.Record {
	t.Helper()
	rec, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%v): %v", key, err)
	}
	return rec
}

func testMarkStarted(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	owner := mustBegin(t, s, req, idem.Acquired).Owner
	if rec := mustGet(t, s, req.Key); rec.Started {
		t.Errorf("fresh claim's record shows Started before MarkStarted")
	}
	if err := s.MarkStarted(ctx, owner); err != nil {
		t.Fatalf("MarkStarted by owner: %v", err)
	}
	// A repeat (say, after a lost answer) succeeds and changes nothing.
	if err := s.MarkStarted(ctx, owner); err != nil {
		t.Fatalf("repeated MarkStarted by owner: %v", err)
	}
	rec := mustGet(t, s, req.Key)
	if !rec.Started || rec.State != idem.StateInProgress || rec.Fence != owner.Fence {
		t.Errorf("record after MarkStarted = %+v, want Started, in progress, fence %d", rec, owner.Fence)
	}
	// Marking does not free, complete or extend anything.
	mustBegin(t, s, req, idem.InFlight)
	if err := s.Complete(ctx, owner, []byte("done")); err != nil {
		t.Fatalf("Complete after MarkStarted: %v", err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "done" {
		t.Errorf("replay = %q", r.Result)
	}
	if rec := mustGet(t, s, req.Key); !rec.Started {
		t.Errorf("completed record lost its Started mark: %+v", rec)
	}
	// The claim is finished: the owner holds nothing to mark any more.
	if err := s.MarkStarted(ctx, owner); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("MarkStarted after Complete = %v, want ErrLeaseLost", err)
	}
}

func testMarkStartedNonOwner(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	orig := mustBegin(t, s, req, idem.Acquired).Owner
	dup := mustBegin(t, s, req, idem.InFlight)
	other := mustBegin(t, s, idem.BeginRequest{Key: newKey(t), Lease: time.Minute}, idem.Acquired).Owner
	other.Key = req.Key
	for name, o := range map[string]idem.Owner{
		"rejected duplicate's zero owner": dup.Owner,
		"forged token":                    {Key: req.Key, Token: idem.NewToken(), Fence: orig.Fence},
		"another key's token":             other,
		"zero token":                      {Key: req.Key, Fence: orig.Fence},
	} {
		if err := s.MarkStarted(ctx, o); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("MarkStarted by %s = %v, want ErrLeaseLost", name, err)
		}
	}
	if rec := mustGet(t, s, req.Key); rec.Started {
		t.Errorf("a non-owner's MarkStarted set the mark: %+v", rec)
	}
	// A stale owner, after a takeover, cannot mark the new owner's claim.
	req2 := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	stale := mustBegin(t, s, req2, idem.Acquired).Owner
	c := eventually(t, s, req2, idem.Acquired)
	if c.Started {
		t.Errorf("takeover of an unmarked claim reports Started")
	}
	if err := s.MarkStarted(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale owner's MarkStarted = %v, want ErrLeaseLost", err)
	}
	if rec := mustGet(t, s, req2.Key); rec.Started || rec.Fence != c.Owner.Fence {
		t.Errorf("stale owner's MarkStarted changed the new claim: %+v", rec)
	}
	// A released claim cannot be marked.
	if err := s.Release(ctx, c.Owner); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkStarted(ctx, c.Owner); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("MarkStarted after Release = %v, want ErrLeaseLost", err)
	}
}

func testStartedSurvivesTakeover(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	first := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.MarkStarted(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The holder dies after marking; the takeover sees the mark.
	second := eventually(t, s, req, idem.Acquired)
	if !second.Takeover || !second.Started {
		t.Fatalf("takeover of a marked claim: Takeover=%v Started=%v, want both", second.Takeover, second.Started)
	}
	if rec := mustGet(t, s, req.Key); !rec.Started || rec.Fence != second.Owner.Fence {
		t.Errorf("record after takeover = %+v, want Started with the new fence", rec)
	}
	// The second holder dies too, without marking: a second takeover still
	// sees the first holder's mark.
	third := eventually(t, s, req, idem.Acquired)
	if !third.Takeover || !third.Started {
		t.Fatalf("second takeover: Takeover=%v Started=%v, want both", third.Takeover, third.Started)
	}
	if third.Owner.Fence <= second.Owner.Fence {
		t.Errorf("fence %d after second takeover, want > %d", third.Owner.Fence, second.Owner.Fence)
	}
	if err := s.Complete(ctx, third.Owner, []byte("unknown")); err != nil {
		t.Fatal(err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "unknown" {
		t.Errorf("replay = %q", r.Result)
	}
}

func testStartedCleared(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	// Cleared by Release: the holder gave up before acting, so the next
	// claim is fresh.
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.MarkStarted(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, o); err != nil {
		t.Fatal(err)
	}
	if rec := mustGet(t, s, req.Key); rec.Started {
		t.Errorf("released record still Started: %+v", rec)
	}
	c := mustBegin(t, s, req, idem.Acquired)
	if c.Started || c.Takeover {
		t.Errorf("claim after Release: Started=%v Takeover=%v, want neither", c.Started, c.Takeover)
	}
	if rec := mustGet(t, s, req.Key); rec.Started {
		t.Errorf("record claimed after Release is Started: %+v", rec)
	}

	// Cleared by a fresh acquisition after the record expired, completed
	// or abandoned in progress.
	for _, complete := range []bool{false, true} {
		req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: shortRetention}
		o := mustBegin(t, s, req, idem.Acquired).Owner
		if err := s.MarkStarted(ctx, o); err != nil {
			t.Fatal(err)
		}
		if complete {
			if err := s.Complete(ctx, o, []byte("old")); err != nil {
				t.Fatal(err)
			}
		}
		// Another fingerprint is refused until the record expires, then
		// acquires it afresh, never as a takeover.
		req.Fingerprint = fp("b")
		c := eventually(t, s, req, idem.Acquired)
		if c.Started || c.Takeover {
			t.Errorf("claim after expiry (completed=%v): Started=%v Takeover=%v, want neither", complete, c.Started, c.Takeover)
		}
		if rec := mustGet(t, s, req.Key); rec.Started {
			t.Errorf("record acquired after expiry is Started: %+v", rec)
		}
	}
}

// testMarkStartedRacesTakeover races an owner's MarkStarted, after its
// lease ran out, against takeovers. Whichever wins, the result must be
// consistent: a MarkStarted that succeeded happened before the takeover, so
// the taker sees Started; if every one got ErrLeaseLost, the taker sees a
// claim nobody marked.
func testMarkStartedRacesTakeover(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	const keys = 24
	const racers = 3
	reqs := make([]idem.BeginRequest, keys)
	owners := make([]idem.Owner, keys)
	for i := range reqs {
		reqs[i] = idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
		owners[i] = mustBegin(t, s, reqs[i], idem.Acquired).Owner
	}
	// A probe claimed after all of them: once it can be taken over, every
	// lease above has run out too (by the store's clock).
	probe := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	mustBegin(t, s, probe, idem.Acquired)
	eventually(t, s, probe, idem.Acquired)

	var wg sync.WaitGroup
	var marked, refused atomic.Int32
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := make(chan struct{})
			var markErr error
			claims := make(chan idem.Claim, racers)
			var inner sync.WaitGroup
			inner.Add(1 + racers)
			var racing sync.WaitGroup
			racing.Add(racers)
			racersDone := make(chan struct{})
			go func() { racing.Wait(); close(racersDone) }()
			go func() {
				defer inner.Done()
				<-start
				// The owner keeps marking (repeats are allowed) until the
				// takeover shuts it out; markErr remembers whether any
				// mark got in first.
				markErr = idem.ErrLeaseLost
				for {
					select {
					case <-racersDone:
						return // the takeover failed (reported below)
					default:
					}
					err := s.MarkStarted(ctx, owners[i])
					if err == nil {
						markErr = nil
						continue
					}
					if !errors.Is(err, idem.ErrLeaseLost) {
						markErr = err
					}
					return
				}
			}()
			for range racers {
				go func() {
					defer inner.Done()
					defer racing.Done()
					<-start
					// The taker asks for a long lease, so that a slow store
					// (one writer at a time) never sees it expire too.
					req := reqs[i]
					req.Lease = time.Minute
					c, err := s.Begin(ctx, req)
					if err != nil {
						t.Errorf("Begin: %v", err)
						return
					}
					claims <- c
				}()
			}
			close(start)
			inner.Wait()
			close(claims)
			var won []idem.Claim
			for c := range claims {
				switch c.Outcome {
				case idem.Acquired:
					won = append(won, c)
				case idem.InFlight:
				default:
					t.Errorf("Begin during takeover race = %v", c.Outcome)
				}
			}
			if len(won) != 1 {
				t.Errorf("key %d: %d takeovers, want exactly 1", i, len(won))
				return
			}
			c := won[0]
			switch {
			case markErr == nil:
				marked.Add(1)
			case errors.Is(markErr, idem.ErrLeaseLost):
				refused.Add(1)
			}
			switch {
			case markErr == nil && !c.Started:
				t.Errorf("key %d: MarkStarted succeeded but the takeover does not see the mark", i)
			case errors.Is(markErr, idem.ErrLeaseLost) && c.Started:
				t.Errorf("key %d: MarkStarted was refused but the takeover sees a mark", i)
			case markErr != nil && !errors.Is(markErr, idem.ErrLeaseLost):
				t.Errorf("key %d: MarkStarted: %v", i, markErr)
			}
			if rec, err := s.Get(ctx, reqs[i].Key); err != nil {
				t.Errorf("Get: %v", err)
			} else if rec.Started != c.Started || rec.Fence != c.Owner.Fence {
				t.Errorf("key %d: record %+v disagrees with the takeover's claim (Started=%v fence %d)", i, rec, c.Started, c.Owner.Fence)
			}
			// The loser of the race is fenced out for good.
			if err := s.MarkStarted(ctx, owners[i]); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("key %d: stale MarkStarted after takeover = %v", i, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d marks before the takeover, %d refused after it", marked.Load(), refused.Load())
}
