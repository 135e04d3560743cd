package idem

import (
	"context"
	"errors"
	"sync"
	"time"
)

type ownerKey struct{}

// OwnerFromContext returns the Owner of the claim the context runs under:
// the work's context of an Attempt carries it (Do, the HTTP middleware and
// the RPC interceptors run the protected work with one).
func OwnerFromContext(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ownerKey{}).(Owner)
	return o, ok
}

// FenceFromContext returns the fencing token of the claim the context runs
// under, or 0 outside of one. Pass it to your own conditional writes
// (… WHERE fence < $1) so that an owner that lost its lease cannot overwrite
// the work of the one that took over.
func FenceFromContext(ctx context.Context) uint64 {
	o, _ := OwnerFromContext(ctx)
	return o.Fence
}

// Heartbeat keeps a claim's lease alive while its owner works. It holds
// idem's one renewal rule, which Do, httpidem's middleware and the RPC
// interceptors all use through Attempt: Attempt.Start starts one, and it
// runs until the owner's Complete, Release or Hold has returned (or End);
// there is no other way to start one. It extends the lease
// every third of its length. When the store says the lease is lost, or
// when no renewal has succeeded for four fifths of a lease (the store is
// unreachable, so another caller may take over once the lease runs out),
// it cancels the work's context with ErrLeaseLost as the cause (while the
// work still runs: once the owner is storing its outcome, that call's
// answer says whether the claim was kept). The fifth it keeps in
// hand absorbs timer lateness on a loaded machine, so that the work stops
// before the store can grant the claim to anyone else.
//
// It has no timer or goroutine of its own: every heartbeat of the process
// is scheduled on one renewal loop (beats), whose single timer is set to
// the earliest renewal due; a due renewal runs in a goroutine of its own.
// Work that finishes within a third of the lease never starts one.
type Heartbeat struct {
	store  Store
	owner  Owner
	lease  time.Duration
	ctx    context.Context // the Extend calls run on it
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	lost    bool
	// finishing: the owner is storing its outcome (Attempt's Complete,
	// Release, Hold). The renewals go on, but a lease found lost is the
	// finishing call's to report: the work's context is not cancelled,
	// since a renewal that races a Complete which just succeeded finds
	// the record no longer in flight.
	finishing bool
	okAt      time.Time // when the call that started or last renewed the lease was sent
	running   sync.WaitGroup

	// Guarded by beats.mu: when the next renewal is due, and the place
	// in beats.q plus one (0: not scheduled).
	due  time.Time
	slot int
}

// start starts h: the renewals run on ctx, and cancel ends the work with
// ErrLeaseLost. The lease is known to last until a whole lease after the
// last call was sent (the store started it no earlier). Timers run on this
// process's monotonic clock; a wall-clock jump does not move them.
func (h *Heartbeat) start(ctx context.Context, cancel context.CancelCauseFunc, s Store, owner Owner, lease time.Duration, sent time.Time) {
	if lease <= 0 {
		lease = DefaultLease
	}
	h.store, h.owner, h.lease, h.ctx, h.cancel, h.okAt = s, owner, lease, ctx, cancel, sent
	now := time.Now()
	h.mu.Lock()
	beats.add(h, now.Add(h.next(now)))
	h.mu.Unlock()
}

// budget is how long after a call was sent the heartbeat still trusts the
// lease that call started or renewed.
func (h *Heartbeat) budget() time.Duration { return h.lease - h.lease/5 }

// next is how long to wait before the next renewal: a third of the lease,
// or less when the lease is trusted for less than that.
func (h *Heartbeat) next(now time.Time) time.Duration {
	return min(h.lease/3, h.okAt.Add(h.budget()).Sub(now))
}

func (h *Heartbeat) tick() {
	h.mu.Lock()
	if h.stopped || h.ctx.Err() != nil { // stopped, or the work's context ended
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	left := h.okAt.Add(h.budget()).Sub(sent)
	if left <= 0 {
		h.giveUp()
		h.mu.Unlock()
		return
	}
	h.running.Add(1)
	h.mu.Unlock()
	defer h.running.Done()

	ectx, cancel := context.WithTimeout(h.ctx, min(h.lease/3, left))
	err := h.store.Extend(ectx, h.owner, h.lease)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	switch {
	case err == nil:
		h.okAt = sent
	case errors.Is(err, ErrLeaseLost):
		h.giveUp()
		return
	}
	// Any other error: keep trying until the lease is no longer trusted.
	now := time.Now()
	d := h.next(now)
	if d <= 0 {
		h.giveUp()
		return
	}
	beats.add(h, now.Add(d))
}

// giveUp ends the work with ErrLeaseLost, unless the owner is finishing;
// h.mu is held.
func (h *Heartbeat) giveUp() {
	h.stopped, h.lost = true, true
	if !h.finishing {
		h.cancel(ErrLeaseLost)
	}
}

// startFinishing records that the owner started storing its outcome: from now
// on the renewals never cancel the work's context (see giveUp).
func (h *Heartbeat) startFinishing() {
	h.mu.Lock()
	h.finishing = true
	h.mu.Unlock()
}

// stop ends the renewals and waits for one in progress to return, without
// ending the work's context. It is safe to call more than once.
func (h *Heartbeat) stop() {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		beats.remove(h)
	}
	h.mu.Unlock()
	h.running.Wait()
}

// Lost reports whether the heartbeat gave the lease up as lost: the work's
// context was cancelled with ErrLeaseLost as its cause.
func (h *Heartbeat) Lost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// beats is the renewal loop of every Heartbeat in the process.
var beats schedule

// schedule runs each scheduled heartbeat's tick when it is due, on one
// runtime timer set to the earliest due time: scheduling and cancelling a
// renewal costs a heap operation under one lock, not a timer per
// heartbeat. Lock order: a Heartbeat's mu, then schedule.mu.
type schedule struct {
	mu    sync.Mutex
	q     []*Heartbeat // a min-heap by due
	timer *time.Timer
	at    time.Time // when timer fires; zero when it is not set
}

// add schedules h's next tick at due; h is not scheduled.
func (s *schedule) add(h *Heartbeat, due time.Time) {
	s.mu.Lock()
	h.due = due
	s.q = append(s.q, h)
	h.slot = len(s.q)
	s.up(len(s.q) - 1)
	if s.at.IsZero() || due.Before(s.at) {
		s.arm(due)
	}
	s.mu.Unlock()
}

// remove unschedules h, if it is scheduled. The timer stays set: when it
// fires with nothing due, it is set again for the earliest, or not at all.
func (s *schedule) remove(h *Heartbeat) {
	s.mu.Lock()
	if i := h.slot - 1; i >= 0 {
		last := len(s.q) - 1
		s.swap(i, last)
		s.q[last] = nil
		s.q = s.q[:last]
		h.slot = 0
		if i < last {
			s.down(i)
			s.up(i)
		}
	}
	s.mu.Unlock()
}

// arm sets the timer to fire at due; s.mu is held.
func (s *schedule) arm(due time.Time) {
	s.at = due
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(due), s.fire)
		return
	}
	s.timer.Reset(time.Until(due))
}

// fire starts the tick of every heartbeat due, each in its own goroutine
// (a slow store delays no other renewal), and sets the timer for the
// next.
func (s *schedule) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = time.Time{}
	now := time.Now()
	for len(s.q) > 0 && !s.q[0].due.After(now) {
		h := s.q[0]
		s.remove0()
		go h.tick()
	}
	if len(s.q) > 0 {
		s.arm(s.q[0].due)
	}
}

func (s *schedule) remove0() {
	h := s.q[0]
	last := len(s.q) - 1
	s.swap(0, last)
	s.q[last] = nil
	s.q = s.q[:last]
	h.slot = 0
	if last > 0 {
		s.down(0)
	}
}

func (s *schedule) swap(i, j int) {
	s.q[i], s.q[j] = s.q[j], s.q[i]
	s.q[i].slot, s.q[j].slot = i+1, j+1
}

func (s *schedule) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.q[i].due.Before(s.q[p].due) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *schedule) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(s.q) {
			return
		}
		m := l
		if r := l + 1; r < len(s.q) && s.q[r].due.Before(s.q[l].due) {
			m = r
		}
		if !s.q[m].due.Before(s.q[i].due) {
			return
		}
		s.swap(i, m)
		i = m
	}
}
