package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clock"
)

// Config tunes a Store. A nil *Config means the defaults.
type Config struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two. Default 64.
	Shards int
	// MaxEntries bounds the number of records the whole store holds, live
	// or expired-but-unswept. When it holds MaxEntries, a Begin of a new key
	// first sweeps the expired records of every shard; only if the live
	// ones alone reach the bound does it fail with ErrFull (which matches
	// idem.ErrUnavailable): live records are never evicted, because an
	// evicted claim is a duplicate waiting to happen. Default 1,000,000.
	MaxEntries int
	// SweepInterval is how often the background sweeper deletes expired
	// records. Default one minute; negative disables the sweeper (Purge
	// and full shards still sweep).
	SweepInterval time.Duration
	// MaxResult bounds a stored result in bytes; Complete with a larger one
	// fails with idem.ErrResultTooLarge. Default 64 MiB.
	MaxResult int
}

// ErrFull is returned by Begin when the store holds MaxEntries records that
// have not expired. It matches idem.ErrUnavailable, so HTTP callers answer
// 503 with Retry-After instead of executing without protection.
var ErrFull = fmt.Errorf("%w: memstore: full (MaxEntries live records)", idem.ErrUnavailable)

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Shards <= 0 {
		out.Shards = 64
	}
	n := 1
	for n < out.Shards {
		n <<= 1
	}
	out.Shards = n
	if out.MaxEntries <= 0 {
		out.MaxEntries = 1_000_000
	}
	if out.SweepInterval == 0 {
		out.SweepInterval = time.Minute
	}
	if out.MaxResult <= 0 {
		out.MaxResult = 64 << 20
	}
	return out
}

// Store is an in-process idem.Store. Its zero value is not usable; call New.
type Store struct {
	cfg    Config
	shards []shard

	// count is the number of records in all shards. A new record reserves
	// its place with a compare-and-swap below MaxEntries before it is
	// stored, so the bound holds under any concurrency.
	count atomic.Int64
	// nextExpiry is a lower bound of every stored record's expiry (unix
	// nanoseconds), or 0 when unknown: while the clock is below it nothing
	// can be swept, and a full store answers ErrFull without a sweep.
	// inserts counts new records, so that a sweep that raced an insert
	// does not publish a bound that misses it.
	nextExpiry atomic.Int64
	inserts    atomic.Uint64

	// base is the origin of the records' times (see entry).
	base time.Time

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// InProcess tells idem's claim engine (idem.Claimer) that s keeps its
// records in this process and never waits: every call takes one shard's
// lock for a map operation and returns (a full store's sweep of expired
// records included); none waits on anything else. So the Claimer of
// httpidem, idem proxy and the RPC interceptors gives its calls no
// deadline, which would cost a timer each.
func (s *Store) InProcess() bool { return true }

type shard struct {
	mu sync.Mutex
	// records holds the records by value, and neither their keys nor
	// their values hold a pointer: the garbage collector never walks
	// them, however many the store keeps. Results live in results.
	records map[idem.Digest]entry
	results arena
	// steps holds the recovery points by record (step.go); nil until
	// the first one.
	steps map[idem.Digest]map[string]stepPoint
	_     [40]byte // keep neighbouring shards' locks off one cache line
}

// entry is one record. Times are nanoseconds on the store's monotonic
// clock (Store.now): a wall-clock jump moves no lease and no expiry. A
// lease or retention past the end of that clock (a duration near
// math.MaxInt64) saturates at the far future (clock.Add), never wraps.
type entry struct {
	fingerprint idem.Fingerprint
	token       idem.Token
	fence       uint64
	created     int64
	leaseUntil  int64 // 0: none
	expires     int64
	result      resultRef
	state       idem.State
	started     bool // MarkStarted by a holder of the current claim
}

// New returns an empty Store and starts its sweeper. Call Close to stop the
// sweeper.
func New(cfg *Config) *Store {
	c := cfg.withDefaults()
	s := &Store{
		cfg:    c,
		shards: make([]shard, c.Shards),
		base:   time.Now(),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].records = make(map[idem.Digest]entry)
	}
	if c.SweepInterval > 0 {
		go s.sweeper(c.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

// Close stops the sweeper. It is safe to call more than once; the Store
// keeps working without the sweeper.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *Store) sweeper(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for i := range s.shards {
				s.sweepShard(i, s.now(), 0)
			}
		}
	}
}

func (s *Store) shard(d idem.Digest) *shard {
	return &s.shards[binary.LittleEndian.Uint64(d[:8])&uint64(len(s.shards)-1)]
}

// now is the store's clock: nanoseconds since base, monotonic.
func (s *Store) now() int64 { return int64(time.Since(s.base)) }

// time returns the time.Time of a store time t (0 for none).
func (s *Store) time(t int64) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return s.base.Add(time.Duration(t))
}

// sweepShard deletes up to limit (0: all) records of shard i that expired
// at or before cutoff, and returns how many it deleted and the earliest
// expiry of the records it kept (0 if none).
func (s *Store) sweepShard(i int, cutoff int64, limit int) (n int, earliest int64) {
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for d, e := range sh.records {
		if limit > 0 && n == limit {
			break
		}
		if e.expires <= cutoff {
			sh.results.free(e.result)
			delete(sh.records, d)
			delete(sh.steps, d)
			n++
			continue
		}
		if earliest == 0 || e.expires < earliest {
			earliest = e.expires
		}
	}
	sh.results.compact(sh.records)
	s.count.Add(-int64(n))
	return n, earliest
}

// reserve takes a place for a new record, or reports that the store holds
// MaxEntries records.
func (s *Store) reserve() bool {
	for {
		n := s.count.Load()
		if n >= int64(s.cfg.MaxEntries) {
			return false
		}
		if s.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// noted lowers nextExpiry to a new record's expiry.
func (s *Store) noted(x int64) {
	s.inserts.Add(1)
	for {
		cur := s.nextExpiry.Load()
		if cur == 0 || cur <= x || s.nextExpiry.CompareAndSwap(cur, x) {
			return
		}
	}
}

// sweepFull runs when the store is full: unless no record can have
// expired yet, it sweeps every shard and learns the new earliest expiry.
// The caller holds no shard lock.
func (s *Store) sweepFull(now int64) {
	if next := s.nextExpiry.Load(); next != 0 && now < next {
		return
	}
	gen := s.inserts.Load()
	var earliest int64
	for i := range s.shards {
		if _, e := s.sweepShard(i, now, 0); e != 0 && (earliest == 0 || e < earliest) {
			earliest = e
		}
	}
	next := int64(0) // unknown: an insert raced the sweep, or the store is empty
	if s.inserts.Load() == gen && earliest != 0 {
		next = earliest
	}
	s.nextExpiry.Store(next)
}

// Begin implements idem.Store.
func (s *Store) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	req, err := req.Normalize()
	if err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	d := req.Key.Digest()
	sh := s.shard(d)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	swept := false
	var (
		now               int64
		e                 entry
		found             bool
		takeover, started bool
	)
	for {
		now = s.now()
		e, found = sh.records[d]
		takeover, started = false, false
		switch {
		case !found || e.expires <= now || e.state == idem.StateReleased:
			// acquire as new below
		case e.fingerprint != req.Fingerprint:
			return idem.Claim{Outcome: idem.Mismatch}, nil
		case e.state == idem.StateCompleted || e.state == idem.StateHeld:
			// The arena's own bytes, which never change (Claim.Result is
			// read-only): a replay copies nothing.
			return idem.Claim{Outcome: idem.Replay, Result: sh.results.bytes(e.result)}, nil
		case e.leaseUntil > now:
			return idem.Claim{Outcome: idem.InFlight, RetryAfter: time.Duration(e.leaseUntil - now)}, nil
		default:
			takeover, started = true, e.started // the mark survives takeovers
		}
		if found || s.reserve() {
			break
		}
		if swept {
			return idem.Claim{}, ErrFull
		}
		// Full: sweep the expired records of every shard, without holding
		// this one's lock (shards are never locked two at a time), then
		// decide again: the key may have been claimed meanwhile.
		sh.mu.Unlock()
		s.sweepFull(now)
		sh.mu.Lock()
		swept = true
	}
	freed := e.result != (resultRef{}) // an expired record's
	sh.results.free(e.result)
	e = entry{
		state:       idem.StateInProgress,
		fingerprint: req.Fingerprint,
		token:       idem.NewToken(),
		fence:       idem.NextFence(e.fence, s.base.Add(time.Duration(now)).UnixMicro()),
		started:     started,
		created:     now,
		leaseUntil:  clock.Add(now, req.Lease),
		expires:     clock.Add(now, req.Retention),
	}
	sh.records[d] = e
	if freed {
		sh.results.compact(sh.records)
	}
	s.noted(e.expires)
	return idem.Claim{
		Outcome:  idem.Acquired,
		Owner:    idem.Owner{Key: req.Key, Token: e.token, Fence: e.fence},
		Takeover: takeover,
		Started:  started,
	}, nil
}

// owned runs fn on the owner's record under its shard lock, or returns
// ErrLeaseLost when owner does not hold it.
//
// fn gets the record as a value and returns it changed: a pointer to it
// would move it to the heap on every call.
func (s *Store) owned(ctx context.Context, owner idem.Owner, fn func(sh *shard, e entry, now int64) (entry, error)) error {
	if owner.Key.IsZero() {
		return idem.ErrLeaseLost // a rejected duplicate's zero Owner holds nothing
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(owner.Key.Digest())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := owner.Key.Digest()
	e, ok := sh.records[d]
	if !ok || e.token != owner.Token || e.state == idem.StateReleased {
		return idem.ErrLeaseLost
	}
	changed, err := fn(sh, e, s.now())
	if changed != e {
		sh.records[d] = changed
	}
	return err
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, owner idem.Owner, result []byte) error {
	return s.finish(ctx, owner, result, idem.StateCompleted)
}

// Hold implements idem.Store: Complete, with the record kept as held.
func (s *Store) Hold(ctx context.Context, owner idem.Owner, result []byte) error {
	return s.finish(ctx, owner, result, idem.StateHeld)
}

// finish stores result with state (completed or held) for owner.
func (s *Store) finish(ctx context.Context, owner idem.Owner, result []byte, state idem.State) error {
	if len(result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	return s.owned(ctx, owner, func(sh *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress {
			// Completed or held by this owner: a repeated call keeps the
			// first outcome, whose result replays have served.
			return e, nil
		}
		e.state = state
		e.result = sh.results.add(result)
		e.leaseUntil = 0
		return e, nil
	})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, owner idem.Owner) error {
	return s.owned(ctx, owner, func(_ *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress {
			return e, idem.ErrLeaseLost
		}
		// Keep the record (and its fence) so the next claim's fence grows.
		e.state = idem.StateReleased
		e.started = false
		e.leaseUntil = 0
		return e, nil
	})
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, owner idem.Owner, lease time.Duration) error {
	if lease <= 0 {
		return configError("lease", "must be positive")
	}
	return s.owned(ctx, owner, func(_ *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress {
			return e, idem.ErrLeaseLost
		}
		e.leaseUntil = clock.Add(now, lease)
		e.expires = max(e.expires, e.leaseUntil)
		return e, nil
	})
}

// MarkStarted implements idem.Store.
func (s *Store) MarkStarted(ctx context.Context, owner idem.Owner) error {
	return s.owned(ctx, owner, func(_ *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress {
			return e, idem.ErrLeaseLost
		}
		e.started = true
		return e, nil
	})
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if key.IsZero() {
		return idem.Record{}, &idem.KeyError{Reason: "zero Key"}
	}
	return s.Lookup(ctx, key.Digest())
}

// Lookup implements idem.Resolver: Get by digest.
func (s *Store) Lookup(ctx context.Context, d idem.Digest) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	sh := s.shard(d)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.records[d]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	rec := s.record(d, &e)
	rec.Result = sh.results.copy(e.result)
	return rec, nil
}

// Purge implements idem.Store. Each shard is swept under its own lock, at
// most batch records at a time, so Begin on other shards never waits.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		return 0, configError("batch", "must be positive")
	}
	if grace < 0 {
		return 0, configError("grace", "must not be negative")
	}
	var total int64
	for i := range s.shards {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			n, _ := s.sweepShard(i, clock.Add(s.now(), -grace), batch)
			total += int64(n)
			if n < batch {
				break
			}
		}
	}
	return total, nil
}

// Len returns the number of records held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].records)
		s.shards[i].mu.Unlock()
	}
	return n
}

// record returns e (the record of d, in sh) as an idem.Record, without
// its result.
func (s *Store) record(d idem.Digest, e *entry) idem.Record {
	return idem.Record{
		Digest:      d,
		State:       e.state,
		Fingerprint: e.fingerprint,
		Fence:       e.fence,
		CreatedAt:   s.time(e.created),
		LeaseUntil:  s.time(e.leaseUntil),
		ExpiresAt:   s.time(e.expires),
		Started:     e.started,
	}
}

// configError is the *idem.ConfigError of package memstore.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "memstore", Field: field, Reason: reason}
}
