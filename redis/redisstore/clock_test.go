package redisstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// A Redis clock step cannot be produced with libfaketime here: Debian's
// redis-server is linked with jemalloc, which clashes with libfaketime's
// clock_gettime (wolfcw/libfaketime#130). The tests below produce the
// state a step leaves instead: the stored times and fences seen from a
// clock that moved.

// TestClockStepBack: after the server clock went back an hour, the stored
// fence is ahead of the clock. The key's next fence still grows (stored
// fence + 1), never back to the clock.
func TestClockStepBack(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, first.Owner); err != nil {
		t.Fatal(err)
	}
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro()) // issued before the clock went back
	if err := c.HSet(ctx, s.Key(req.Key), "f", strconv.FormatUint(ahead, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	again, err := s.Begin(ctx, req)
	if err != nil || again.Outcome != idem.Acquired || again.Owner.Fence != ahead+1 {
		t.Fatalf("Begin after the step back = %+v, %v; want fence %d", again, err, ahead+1)
	}
}

// TestClockStepForward: after the server clock jumped past a live lease,
// the lease has run out by that clock: a retry takes the claim over with a
// larger fence and the holder is fenced out (ErrLeaseLost), however long
// it thought it had.
func TestClockStepForward(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Hour, Retention: 2 * time.Hour}
	holder, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	past := strconv.FormatInt(time.Now().Add(-time.Second).UnixMicro(), 10) // the lease end, seen from the new clock
	if err := c.HSet(ctx, s.Key(req.Key), "lu", past).Err(); err != nil {
		t.Fatal(err)
	}
	taken, err := s.Begin(ctx, req)
	if err != nil || taken.Outcome != idem.Acquired || !taken.Takeover || taken.Owner.Fence <= holder.Owner.Fence {
		t.Fatalf("Begin after the jump = %+v, %v; want a takeover with fence > %d", taken, err, holder.Owner.Fence)
	}
	if err := s.Complete(ctx, holder.Owner, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the holder's Complete after the jump = %v, want ErrLeaseLost", err)
	}
	if err := s.Extend(ctx, holder.Owner, time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the holder's Extend after the jump = %v, want ErrLeaseLost", err)
	}
}
