package tiered_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/idemkit/idem"
)

// pausedHold is a durable store whose Hold, once the durable store has
// held the key, waits until proceed is closed: the moment of the race in
// which the owner's Complete runs whole after its Hold won.
type pausedHold struct {
	idem.Store
	heldDurably, proceed chan struct{}
}

func (p *pausedHold) Hold(ctx context.Context, o idem.Owner, result []byte) error {
	err := p.Store.Hold(ctx, o, result)
	close(p.heldDurably)
	<-p.proceed
	return err
}

// TestHoldWinsCompleteNeverReplayed forces the interleaving that made
// HoldRacesComplete flaky: the owner's Hold wins in PostgreSQL, then its
// Complete runs whole (the durable store answers it with success and keeps
// the held record), then a duplicate arrives before Hold has returned.
// Redis must never replay the losing Complete's result for a held key:
// not from the store that granted the claim, and not when the Hold comes
// through another process's Store (an owner passed on).
func TestHoldWinsCompleteNeverReplayed(t *testing.T) {
	for _, holder := range []string{"granting store", "other store"} {
		t.Run(holder, func(t *testing.T) {
			ctx := ctxT(t)
			pg, _, _ := durableOnPostgres(t)
			fast := fastOnShared(t)
			durable := &pausedHold{Store: pg, heldDurably: make(chan struct{}), proceed: make(chan struct{})}
			s := newTiered(t, fast, durable, healthy)
			h := s
			if holder == "other store" {
				h = newTiered(t, fast, durable, healthy)
			}
			held, completed := []byte("held: outcome unknown"), []byte("completed")
			req := idem.BeginRequest{Key: newKey(), Fingerprint: idem.FingerprintOf([]byte("race"))}
			c, err := s.Begin(ctx, req)
			if err != nil || c.Outcome != idem.Acquired {
				t.Fatalf("Begin = %+v, %v; want Acquired", c, err)
			}
			holdErr := make(chan error, 1)
			go func() { holdErr <- h.Hold(ctx, c.Owner, held) }()
			<-durable.heldDurably
			if err := s.Complete(ctx, c.Owner, completed); err != nil {
				t.Fatalf("Complete after the Hold won: %v", err)
			}
			dup, err := s.Begin(ctx, req)
			close(durable.proceed)
			if err := <-holdErr; err != nil {
				t.Fatalf("Hold: %v", err)
			}
			if err != nil {
				t.Fatalf("duplicate Begin: %v", err)
			}
			if rec, err := s.Get(ctx, req.Key); err != nil || rec.State != idem.StateHeld {
				t.Fatalf("durable record = %v, %v; want held", rec.State, err)
			}
			if dup.Outcome == idem.Replay && !bytes.Equal(dup.Result, held) {
				t.Fatalf("duplicate during the race replayed %q of a held record", dup.Result)
			}
			again, err := s.Begin(ctx, req)
			if err != nil || again.Outcome != idem.Replay || !bytes.Equal(again.Result, held) {
				t.Fatalf("duplicate after the race = %v %q, %v; want Replay %q", again.Outcome, again.Result, err, held)
			}
		})
	}
}
