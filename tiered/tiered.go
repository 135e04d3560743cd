package tiered

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clock"
)

// Config tunes a Store. A nil *Config means the defaults.
type Config struct {
	// FastTimeout bounds every call to the fast store, so that a hung fast
	// store costs each request at most this much. Complete with a large
	// result gets a little more (one extra millisecond per 64 KiB). Default
	// 50ms.
	FastTimeout time.Duration
	// FastBackoff: after a fast Begin fails, Begin skips the fast store and
	// asks only the durable one for this long, so that an outage costs one
	// timeout per interval rather than one per request. Default 1s;
	// negative: never skip.
	FastBackoff time.Duration
	// Logger receives fast-store failures, at most one line per
	// LogInterval (with the count of the ones it left out). Default
	// slog.Default().
	Logger *slog.Logger
	// LogInterval is the least time between two log lines about fast-store
	// failures. Default 10s.
	LogInterval time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.FastTimeout == 0 {
		out.FastTimeout = 50 * time.Millisecond
	}
	if out.FastBackoff == 0 {
		out.FastBackoff = time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.LogInterval == 0 {
		out.LogInterval = 10 * time.Second
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.FastTimeout < 0:
		return configError("Config.FastTimeout", "must not be negative")
	case c.LogInterval < 0:
		return configError("Config.LogInterval", "must not be negative")
	}
	return nil
}

// TokenBeginner is implemented by fast stores that take the owner token
// from the caller (redisstore.Store does). With it, Store knows the token
// of a fast claim even when the fast store's answer was lost (a timeout
// after the script ran), and can still complete or release that claim
// instead of leaving it to block retries until its lease runs out.
type TokenBeginner interface {
	BeginWithToken(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Claim, error)
}

// Mirror is implemented by fast stores that can be made to show what the
// durable store decided (redisstore.Store does). Store needs it to keep
// the fast copy from going stale; with a fast store without it, Store never
// copies a durable result into the fast store (a durable Replay is not
// cached) and cannot correct a fast record that contradicts the durable
// store. See the package documentation.
type Mirror interface {
	TokenBeginner
	// Adopt replaces key's fast record with an in-progress claim of
	// token, with req's fingerprint, lease and retention.
	Adopt(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Owner, error)
	// CompleteUntil is Complete, lowering the record's expiry to until.
	CompleteUntil(ctx context.Context, owner idem.Owner, result []byte, until time.Time) error
	// Forget deletes key's fast record, whatever it holds.
	Forget(ctx context.Context, key idem.Key) error
}

// Store puts a fast store in front of a durable one. See the package
// documentation for the rules it follows. It is safe for concurrent use.
type Store struct {
	fast    idem.Store
	fastTok TokenBeginner // fast, when it takes tokens; else nil
	mirror  Mirror        // fast, when it can be corrected; else nil
	durable idem.Store
	cfg     Config

	mu        sync.Mutex
	owners    map[idem.Token]fastClaim // durable token → fast claim of the same Begin
	lastSweep time.Time

	bypassUntil atomic.Int64 // UnixNano; Begin skips fast until then

	// repairs: keys whose fast record contradicts the durable store and
	// could not be cleared (Redis failing or skipped at that moment); the
	// next calls clear them once Redis answers again.
	repairMu sync.Mutex
	repairs  map[idem.Digest]idem.Key
	repairN  atomic.Int64

	logMu      sync.Mutex
	lastLog    time.Time
	suppressed int

	fastAnswers, durableBegins, fastErrors atomic.Uint64
}

type fastClaim struct {
	// owner is the fast claim to finish with the durable one. A zero
	// Token means the fast store was skipped when the durable claim was
	// granted: what it holds for the key is unknown, so it is cleared
	// when the claim is finished.
	owner idem.Owner
	until time.Time // local clock; only to forget claims nobody finished
}

var _ idem.Store = (*Store)(nil)

// New returns a Store that answers duplicates from fast and lets durable
// judge every claim. It does no I/O.
func New(fast, durable idem.Store, cfg *Config) (*Store, error) {
	if fast == nil {
		return nil, configError("fast", "nil store (both stores are required)")
	}
	if durable == nil {
		return nil, configError("durable", "nil store (both stores are required)")
	}
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	s := &Store{fast: fast, durable: durable, cfg: conf, owners: make(map[idem.Token]fastClaim)}
	s.fastTok, _ = fast.(TokenBeginner)
	s.mirror, _ = fast.(Mirror)
	return s, nil
}

// Stats counts what the Store did since New.
type Stats struct {
	// FastAnswers: Begins answered by the fast store alone (Replay or
	// InFlight), without a durable query.
	FastAnswers uint64
	// DurableBegins: Begins that asked the durable store.
	DurableBegins uint64
	// FastErrors: fast-store calls that failed (and were fallen through or
	// ignored).
	FastErrors uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{FastAnswers: s.fastAnswers.Load(), DurableBegins: s.durableBegins.Load(), FastErrors: s.fastErrors.Load()}
}

// Begin implements idem.Store:
//
//   - fast Replay or InFlight is the answer, without a durable query (a
//     fast record is completed only after the durable one was, and an
//     in-progress one only ever answers InFlight);
//   - otherwise (fast acquired, mismatch, failed or skipped) the durable
//     store decides, and the fast store is made to show its decision:
//     durable Acquired keeps this Begin's fast claim to be finished with
//     the durable one, or, when the fast store did not show that claim (a
//     fast Mismatch, a lost answer), overwrites the fast record with it;
//     durable Replay copies the result into the fast claim, with the fast
//     expiry lowered to the durable record's; durable InFlight or Mismatch
//     releases the fast claim.
//
// A fast Mismatch is confirmed by the durable store because the fast
// record may be a claim whose release did not reach the fast store.
func (s *Store) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	req, err := req.Normalize()
	if err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	var (
		fastOwner idem.Owner // zero Key: no fast claim to finish
		shown     bool       // the fast store answered with this Begin's own claim
		asked     bool       // the fast store was asked (not skipped)
	)
	s.repair(ctx)
	if !s.bypassed() {
		asked = true
		fc, token, err := s.fastBegin(ctx, req)
		switch {
		case err != nil:
			if cerr := ctx.Err(); cerr != nil {
				if token != (idem.Token{}) {
					s.fastRelease(ctx, idem.Owner{Key: req.Key, Token: token})
				}
				return idem.Claim{}, cerr
			}
			s.fastFailed("begin", err)
			s.backOff()
			if token != (idem.Token{}) && outcomeUnknown(err) {
				// The script may have run: finish that claim like any other.
				fastOwner = idem.Owner{Key: req.Key, Token: token}
			}
		case fc.Outcome == idem.Replay || fc.Outcome == idem.InFlight:
			s.fastAnswers.Add(1)
			return fc, nil
		case fc.Outcome == idem.Acquired:
			fastOwner, shown = fc.Owner, true
		}
	}

	s.durableBegins.Add(1)
	start := time.Now()
	dc, err := s.durable.Begin(ctx, req)
	hasFast := !fastOwner.Key.IsZero()
	switch {
	case err != nil:
		if hasFast {
			s.fastRelease(ctx, fastOwner)
		}
		return idem.Claim{}, err
	case dc.Outcome == idem.Acquired:
		switch {
		case shown:
			s.remember(dc.Owner, fastOwner, req.Retention)
		case asked && s.mirror != nil:
			// The fast store holds something else than this claim (a
			// stale record of another request, or an answer lost on the
			// wire): make it show the durable decision.
			token := fastOwner.Token
			if !hasFast {
				token = idem.NewToken()
			}
			if fo, ok := s.fastAdopt(ctx, req, token, time.Since(start)); ok {
				s.remember(dc.Owner, fo, req.Retention)
			} else {
				s.remember(dc.Owner, idem.Owner{Key: req.Key}, req.Retention)
			}
		case hasFast:
			s.remember(dc.Owner, fastOwner, req.Retention)
		case s.mirror != nil:
			// Skipped after a recent failure: clear the fast record when
			// the claim is finished, whatever it holds by then.
			s.remember(dc.Owner, idem.Owner{Key: req.Key}, req.Retention)
		}
	case dc.Outcome == idem.Replay:
		switch {
		case hasFast:
			s.refill(ctx, fastOwner, req.Key, dc.Result)
		case asked && s.mirror != nil:
			// The fast store answered Mismatch for a completed durable
			// record: its copy is stale.
			s.fastForget(ctx, req.Key)
		}
	default:
		if hasFast {
			s.fastRelease(ctx, fastOwner)
		}
	}
	return dc, nil
}

func (s *Store) fastBegin(ctx context.Context, req idem.BeginRequest) (idem.Claim, idem.Token, error) {
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FastTimeout)
	defer cancel()
	if s.fastTok != nil {
		token := idem.NewToken()
		c, err := s.fastTok.BeginWithToken(fctx, req, token)
		return c, token, err
	}
	c, err := s.fast.Begin(fctx, req)
	return c, c.Owner.Token, err
}

// outcomeUnknown reports whether a failed fast call may still have taken
// effect: everything but a connection that was never made.
func outcomeUnknown(err error) bool {
	var op *net.OpError
	return !(errors.As(err, &op) && op.Op == "dial")
}

// Complete implements idem.Store: the durable store first (the result is
// durable before anyone is told), then the fast store, best-effort. A fast
// failure is logged and never returned.
func (s *Store) Complete(ctx context.Context, owner idem.Owner, result []byte) error {
	if err := s.durable.Complete(ctx, owner, result); err != nil {
		if errors.Is(err, idem.ErrLeaseLost) {
			if fo, ok := s.forget(owner); ok {
				s.fastRelease(ctx, fo)
			}
		}
		return err
	}
	if fo, ok := s.forget(owner); ok {
		s.fastComplete(ctx, fo, result)
	} else {
		// An owner this Store did not grant (another process's, or from
		// before a restart): whatever Redis holds for the key is not known
		// to be this result. Clear it; the next Begin copies the durable one.
		s.fastForget(ctx, owner.Key)
	}
	return nil
}

// Hold implements idem.Store: the fast claim is released first, then the
// durable store holds the key. A held key is answered by the durable store
// alone (Begin replays it from there), so that resolving it there
// (Resolve) leaves no stale copy behind.
//
// The order settles a race with the owner's Complete (an adapter's two
// finishing calls, crossed by a retry): the durable store keeps the first
// of the two, and its Complete of a held record succeeds without changing
// it. Once Hold has taken the fast claim from this Store, a Complete here
// finds no claim to copy its result into and clears the fast record; once
// the fast claim is released, the fast store refuses the copy of a
// Complete granted elsewhere (its owner token is gone). A Complete copies
// its result into Redis only when it took the fast claim before Hold
// started, that is when its durable Complete came first and won.
func (s *Store) Hold(ctx context.Context, owner idem.Owner, result []byte) error {
	var cleared bool
	if fo, ok := s.forget(owner); ok {
		cleared = s.fastRelease(ctx, fo)
	} else {
		cleared = s.fastForget(ctx, owner.Key) // an owner this Store did not grant
	}
	err := s.durable.Hold(ctx, owner, result)
	if err == nil && !cleared {
		// The fast store failed before the durable decision: a Complete
		// granted elsewhere may have copied its result since. Clear the
		// key again now, or once Redis answers (repair).
		s.fastForget(ctx, owner.Key)
	}
	return err
}

// Release implements idem.Store: durable first, then fast, best-effort.
func (s *Store) Release(ctx context.Context, owner idem.Owner) error {
	return s.releaseFast(ctx, owner, s.durable.Release(ctx, owner))
}

// releaseFast releases the fast claim of owner once the durable store
// answered err to a call that ends owner's claim, and returns err.
func (s *Store) releaseFast(ctx context.Context, owner idem.Owner, err error) error {
	if err == nil || errors.Is(err, idem.ErrLeaseLost) {
		if fo, ok := s.forget(owner); ok {
			s.fastRelease(ctx, fo)
		} else if err == nil {
			s.fastForget(ctx, owner.Key) // an owner this Store did not grant
		}
	}
	return err
}

// Extend implements idem.Store: durable first, then fast, best-effort, so
// the fast claim keeps answering InFlight for as long as the durable one
// lives.
func (s *Store) Extend(ctx context.Context, owner idem.Owner, lease time.Duration) error {
	err := s.durable.Extend(ctx, owner, lease)
	switch {
	case err == nil:
		if fo, ok := s.lookup(owner, lease); ok && fo.Token != (idem.Token{}) {
			fctx, cancel := s.fastCtx(ctx, 0)
			defer cancel()
			if ferr := s.fast.Extend(fctx, fo, lease); ferr != nil && !errors.Is(ferr, idem.ErrLeaseLost) {
				s.fastFailed("extend", ferr)
			}
		}
	case errors.Is(err, idem.ErrLeaseLost):
		if fo, ok := s.forget(owner); ok {
			s.fastRelease(ctx, fo)
		}
	}
	return err
}

// MarkStarted implements idem.Store: the durable store alone, one round
// trip. The fast store never grants a claim (every Acquired, takeovers
// included, comes from the durable Begin, which reports Claim.Started), so
// the mark is needed only where claims are judged; an in-progress fast
// record answers InFlight, marked or not.
func (s *Store) MarkStarted(ctx context.Context, owner idem.Owner) error {
	return s.durable.MarkStarted(ctx, owner)
}

// Get implements idem.Store: the durable record is the record.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	return s.durable.Get(ctx, key)
}

// Purge implements idem.Store: it purges the durable store and returns its
// count, then purges the fast store best-effort.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	n, err := s.durable.Purge(ctx, grace, batch)
	if err != nil {
		return n, err
	}
	if _, ferr := s.fast.Purge(ctx, grace, batch); ferr != nil && ctx.Err() == nil {
		s.fastFailed("purge", ferr)
	}
	return n, nil
}

// fastCtx bounds a fast call that follows a durable decision. It does not
// inherit the caller's cancellation: once the durable store decided, the
// fast store should learn of it even if the caller has gone.
func (s *Store) fastCtx(ctx context.Context, payload int) (context.Context, context.CancelFunc) {
	d := s.cfg.FastTimeout + time.Duration(payload>>16)*time.Millisecond
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// fastComplete copies a result the durable store holds into the fast
// claim fo. If the fast store no longer shows fo (ErrLeaseLost: the record
// was lost, or replaced by a stale one), its record is cleared; if the
// write fails, fo is released so that duplicates go to the durable store
// instead of waiting for the fast lease.
func (s *Store) fastComplete(ctx context.Context, fo idem.Owner, result []byte) {
	if fo.Token == (idem.Token{}) {
		s.fastForget(ctx, fo.Key)
		return
	}
	fctx, cancel := s.fastCtx(ctx, len(result))
	err := s.fast.Complete(fctx, fo, result)
	cancel()
	s.afterFastComplete(ctx, fo, err)
}

func (s *Store) afterFastComplete(ctx context.Context, fo idem.Owner, err error) {
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrLeaseLost):
		s.fastForget(ctx, fo.Key)
	case errors.Is(err, idem.ErrResultTooLarge):
		s.fastRelease(ctx, fo)
	default:
		s.fastFailed("complete", err)
		s.fastRelease(ctx, fo)
	}
}

// refill copies a durable Replay into the fast claim fo, with the fast
// expiry lowered to the durable record's, so that the copy never outlives
// the original: a retry after the durable record expired (and was purged)
// must not be answered from the copy. It costs one durable read (Get), on
// the fast store's misses only. Without a Mirror (no way to lower the
// expiry), or when the durable record is gone by then, fo is released.
func (s *Store) refill(ctx context.Context, fo idem.Owner, key idem.Key, result []byte) {
	if s.mirror == nil {
		s.fastRelease(ctx, fo)
		return
	}
	rec, err := s.durable.Get(ctx, key)
	// Held records are not copied (see Hold), and neither is a result
	// the durable record no longer holds (it was resolved meanwhile).
	if err != nil || rec.State != idem.StateCompleted || !bytes.Equal(rec.Result, result) {
		s.fastRelease(ctx, fo)
		return
	}
	fctx, cancel := s.fastCtx(ctx, len(result))
	err = s.mirror.CompleteUntil(fctx, fo, result, rec.ExpiresAt)
	cancel()
	s.afterFastComplete(ctx, fo, err)
}

// fastAdopt overwrites the fast record with a claim of token. Its
// retention is shortened by the time the durable Begin took, so that the
// fast record expires no later than the durable one (whose clock started
// before).
func (s *Store) fastAdopt(ctx context.Context, req idem.BeginRequest, token idem.Token, elapsed time.Duration) (idem.Owner, bool) {
	req.Retention = max(req.Retention-elapsed, req.Lease)
	fctx, cancel := s.fastCtx(ctx, 0)
	defer cancel()
	fo, err := s.mirror.Adopt(fctx, req, token)
	if err != nil {
		s.fastFailed("adopt", err)
		return idem.Owner{}, false
	}
	return fo, true
}

// fastForget clears a fast record that contradicts the durable store. If
// the fast store is being skipped or fails, the key is queued: the next
// calls clear it once Redis answers again (repair). It reports whether the
// record is known to be cleared.
func (s *Store) fastForget(ctx context.Context, key idem.Key) bool {
	if s.mirror == nil {
		return false
	}
	if s.bypassed() {
		s.queueRepair(key)
		return false
	}
	fctx, cancel := s.fastCtx(ctx, 0)
	defer cancel()
	if err := s.mirror.Forget(fctx, key); err != nil {
		s.fastFailed("forget", err)
		s.queueRepair(key)
		return false
	}
	return true
}

// maxRepairs bounds the repair queue. Past it, new entries are dropped
// (and logged): their fast records answer InFlight until their lease ends,
// as without a queue.
const maxRepairs = 10000

// repairBatch is how many queued keys one call clears at most.
const repairBatch = 16

func (s *Store) queueRepair(key idem.Key) { s.queueRepairDigest(key.Digest(), key) }

// queueRepairDigest queues the fast record under d; key is zero when
// only the digest is known (the fast store must then forget by digest).
func (s *Store) queueRepairDigest(d idem.Digest, key idem.Key) {
	if s.mirror == nil {
		return
	}
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	if s.repairs == nil {
		s.repairs = make(map[idem.Digest]idem.Key)
	}
	if _, ok := s.repairs[d]; ok {
		return
	}
	if len(s.repairs) >= maxRepairs {
		s.fastFailed("repair", errors.New("tiered: repair queue full; a stale fast record stays until its lease ends"))
		return
	}
	s.repairs[d] = key
	s.repairN.Store(int64(len(s.repairs)))
}

// repair clears up to repairBatch queued fast records, unless the fast
// store is being skipped. It stops at the first failure (and backs off).
func (s *Store) repair(ctx context.Context) {
	if s.repairN.Load() == 0 || s.bypassed() {
		return
	}
	s.repairMu.Lock()
	type entry struct {
		d idem.Digest
		k idem.Key // zero: known by digest only (Resolve)
	}
	batch := make([]entry, 0, repairBatch)
	for d, k := range s.repairs {
		if len(batch) == repairBatch {
			break
		}
		batch = append(batch, entry{d, k})
		delete(s.repairs, d)
	}
	s.repairN.Store(int64(len(s.repairs)))
	s.repairMu.Unlock()
	for i, e := range batch {
		fctx, cancel := s.fastCtx(ctx, 0)
		var err error
		if e.k.IsZero() {
			err = s.forgetDigest(fctx, e.d)
		} else {
			err = s.mirror.Forget(fctx, e.k)
		}
		cancel()
		if err != nil {
			s.fastFailed("repair", err)
			s.backOff()
			for _, e := range batch[i:] {
				s.queueRepairDigest(e.d, e.k)
			}
			return
		}
	}
}

// fastRelease releases the fast claim fo, or clears the key's fast record
// when fo has no token (the fast store was skipped). It reports whether
// the fast store no longer shows fo.
func (s *Store) fastRelease(ctx context.Context, fo idem.Owner) bool {
	if fo.Token == (idem.Token{}) {
		return s.fastForget(ctx, fo.Key)
	}
	fctx, cancel := s.fastCtx(ctx, 0)
	defer cancel()
	if err := s.fast.Release(fctx, fo); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		s.fastFailed("release", err)
		s.queueRepair(fo.Key)
		return false
	}
	return true
}

func (s *Store) bypassed() bool {
	u := s.bypassUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

func (s *Store) backOff() {
	if s.cfg.FastBackoff > 0 {
		// Saturated: a backoff past 2262 (the end of Unix nanoseconds)
		// must not wrap into the past.
		s.bypassUntil.Store(clock.Add(time.Now().UnixNano(), s.cfg.FastBackoff))
	}
}

// remember keeps the fast claim that goes with a durable owner.
func (s *Store) remember(durable, fast idem.Owner, retention time.Duration) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owners[durable.Token] = fastClaim{owner: fast, until: now.Add(retention)}
	if now.Sub(s.lastSweep) > time.Minute {
		s.lastSweep = now
		for t, fc := range s.owners {
			if now.After(fc.until) { // its record expired: nobody can finish it
				delete(s.owners, t)
			}
		}
	}
}

// forget removes and returns the fast claim of a durable owner.
func (s *Store) forget(owner idem.Owner) (idem.Owner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fc, ok := s.owners[owner.Token]
	if !ok || fc.owner.Key.Digest() != owner.Key.Digest() {
		return idem.Owner{}, false
	}
	delete(s.owners, owner.Token)
	return fc.owner, true
}

// lookup returns the fast claim of a durable owner and keeps it at least
// lease longer.
func (s *Store) lookup(owner idem.Owner, lease time.Duration) (idem.Owner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fc, ok := s.owners[owner.Token]
	if !ok || fc.owner.Key.Digest() != owner.Key.Digest() {
		return idem.Owner{}, false
	}
	if u := time.Now().Add(lease); u.After(fc.until) {
		fc.until = u
		s.owners[owner.Token] = fc
	}
	return fc.owner, true
}

// fastFailed counts a fast-store failure and logs it, at most once per
// LogInterval.
func (s *Store) fastFailed(op string, err error) {
	s.fastErrors.Add(1)
	now := time.Now()
	s.logMu.Lock()
	if !s.lastLog.IsZero() && now.Sub(s.lastLog) < s.cfg.LogInterval {
		s.suppressed++
		s.logMu.Unlock()
		return
	}
	n := s.suppressed
	s.suppressed = 0
	s.lastLog = now
	s.logMu.Unlock()
	s.cfg.Logger.Warn("tiered: fast store failed; the durable store answers instead",
		"op", op, "err", err, "suppressed_since_last_log", n)
}

// configError is the *idem.ConfigError of package tiered.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "tiered", Field: field, Reason: reason}
}
