package redislock

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
)

// MaxNameLen bounds lock names (bytes).
const MaxNameLen = 255

// Config tunes a Locker. The zero value (or nil) gives the defaults.
type Config struct {
	// Prefix starts every key the Locker writes. Default "idem:lock:".
	Prefix string

	// TTL is how long a lock lives without renewal. The watchdog renews it
	// every TTL/3, so it bounds how long a crashed holder blocks others.
	// Default 10s; at least 30ms.
	TTL time.Duration

	// SafetyMargin is how long before the lock may expire in Redis the
	// holder's context is cancelled: the local deadline is TTL − SafetyMargin
	// after the last successful renewal (or the acquisition) was sent, on
	// this process's monotonic clock. It covers the difference between this
	// host's and the Redis server's clock rates and the time the holder's
	// code needs to notice the cancellation and stop. Default TTL/10 (at
	// least 2ms); it must stay below TTL/2.
	SafetyMargin time.Duration

	// RetryMin and RetryMax bound the jittered exponential backoff between
	// attempts of Acquire. Defaults 4ms and 128ms.
	RetryMin, RetryMax time.Duration

	// WaitTimeout bounds how long Acquire waits for a held lock, separately
	// from the context (which also bounds the lease). 0 waits until the
	// context is done.
	WaitTimeout time.Duration

	// FenceTTL expires each per-name fence counter this long after the last
	// acquisition of its name, so that a service locking millions of names
	// (one per order) does not keep a counter for each forever. Every fence
	// is at least the Redis server's clock in microseconds, so a missing
	// counter costs nothing: the next fence is still above every fence
	// handed out before, unless the server's clock went back by more than
	// the time since the last acquisition. Default 7 days; negative keeps
	// counters forever.
	FenceTTL time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Prefix == "" {
		out.Prefix = "idem:lock:"
	}
	if out.TTL == 0 {
		out.TTL = 10 * time.Second
	}
	if out.SafetyMargin == 0 {
		out.SafetyMargin = max(out.TTL/10, 2*time.Millisecond)
	}
	if out.RetryMin == 0 {
		out.RetryMin = 4 * time.Millisecond
	}
	if out.RetryMax == 0 {
		out.RetryMax = 128 * time.Millisecond
	}
	if out.FenceTTL == 0 {
		out.FenceTTL = 7 * 24 * time.Hour
	}
	return out
}

func (c Config) validate() error {
	switch {
	case c.TTL < 30*time.Millisecond:
		return configError("Config.TTL", fmt.Sprintf("%v is below 30ms", c.TTL))
	case c.SafetyMargin < 0 || c.SafetyMargin >= c.TTL/2:
		return configError("Config.SafetyMargin", fmt.Sprintf("%v is not in [0, TTL/2 = %v)", c.SafetyMargin, c.TTL/2))
	case c.RetryMin < 0:
		return configError("Config.RetryMin", fmt.Sprintf("%v is negative", c.RetryMin))
	case c.RetryMax < c.RetryMin:
		return configError("Config.RetryMax", fmt.Sprintf("%v is below RetryMin (%v)", c.RetryMax, c.RetryMin))
	case c.WaitTimeout < 0:
		return configError("Config.WaitTimeout", fmt.Sprintf("%v is negative", c.WaitTimeout))
	case c.FenceTTL > 0 && c.FenceTTL < c.TTL:
		return configError("Config.FenceTTL", fmt.Sprintf("%v is shorter than TTL (%v)", c.FenceTTL, c.TTL))
	}
	return nil
}

// Locker hands out Redis locks. It is safe for concurrent use.
type Locker struct {
	c   redisclient.Client
	cfg Config

	// Script arguments that never change, formatted once (see acquire).
	ttlArg, fenceTTLArg string

	wd watchdog // renews the leases
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker on rdb (a *redis.Client, *redis.ClusterClient,
// *redis.Ring or failover client, or a type embedding one). cfg may be nil.
//
// rdb must have been created with ContextTimeoutEnabled: true in its
// options. Without it go-redis ignores context deadlines and waits for its
// own ReadTimeout and retries (seconds) instead: an Acquire, a renewal or a
// Release against an unreachable Redis would outlast the caller's context.
// New refuses such a client rather than hide that; it also refuses a client
// whose options it cannot read.
func New(rdb redis.UniversalClient, cfg *Config) (*Locker, error) {
	if rdb == nil {
		return nil, configError("client", "nil redis client")
	}
	if err := checkClient(rdb); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return build(redisclient.GoRedis(rdb), c), nil
}

// NewRueidis returns a Locker on a rueidis client (single node, sentinel
// or cluster). cfg may be nil. rueidis honours context deadlines natively
// and pipelines the commands of concurrent callers automatically: under
// concurrency it costs about half the client CPU per Acquire of go-redis
// (BENCHMARKS.md). Keep rueidis's default of not retrying scripts.
func NewRueidis(c rueidis.Client, cfg *Config) (*Locker, error) {
	if c == nil {
		return nil, configError("client", "nil rueidis client")
	}
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	return build(redisclient.Rueidis(c), conf), nil
}

func build(rc redisclient.Client, c Config) *Locker {
	l := &Locker{c: rc, cfg: c}
	l.ttlArg = strconv.FormatInt(c.TTL.Milliseconds(), 10)
	l.fenceTTLArg = strconv.FormatInt(l.fenceTTLms(), 10)
	return l
}

// Acquire waits for the lock, retrying with jittered exponential backoff
// until it is granted, ctx is done or Config.WaitTimeout runs out; then the
// error wraps lock.ErrNotAcquired and the context's cause, and also
// lock.ErrUnavailable when the last attempt could not reach Redis: a
// transport error, a BUSY, READONLY or LOADING reply, or no reply at all
// for half the wait (at most 100ms) when the wait ran out, which is a
// black-holed connection, never a holder. An outage is retried like
// contention: set WaitTimeout or a deadline to bound it. Acquire returns
// at most 100ms after the wait ends (the best-effort delete of a lock an
// unanswered attempt may have taken; if that times out, the lock expires
// after TTL). Every attempt of
// one call uses the same token: if an attempt's reply is lost after Redis
// granted the lock, the next attempt recovers it (same fence).
//
// The returned lease is renewed by a watchdog until it is released, lost, or
// ctx is done. Always Release it.
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, name, newValue(), true)
}

// TryAcquire makes one attempt; an error wrapping lock.ErrNotAcquired means
// another owner holds the lock, one wrapping lock.ErrUnavailable that Redis
// could not be reached or could not serve it (BUSY, READONLY, LOADING).
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, name, newValue(), false)
}

// RaiseFence lifts the fence counter of name to at least min, so that the
// next acquisition gets a fence above it, and returns the counter. It is the
// repair for the rare case where a database refuses a new holder's writes
// with *lock.StaleFenceError because the Redis counter went backwards (data
// lost and the server's clock stepped back): raise to the fence the database
// reported, release, and acquire again.
//
// If the lock is held when the counter is raised, the counter is set to
// min+1 instead: a holder whose Acquire reply was lost may recover the lock
// and report the counter as its fence, which must not be min, a fence an
// earlier holder may have used.
func (l *Locker) RaiseFence(ctx context.Context, name string, min lock.Fence) (lock.Fence, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if min >= maxFence {
		return 0, fmt.Errorf("redislock: raise fence of %q to %d: fences must stay below 2^53", name, min)
	}
	key, fk := l.keys(name)
	n, err := l.c.Eval(ctx, raiseFenceScript, []string{fk, key}, strconv.FormatInt(int64(min), 10), l.fenceTTLArg).Int64()
	if err != nil {
		return 0, fmt.Errorf("redislock: raise fence of %q: %w", name, err)
	}
	return lock.Fence(n), nil
}

// noContextTimeouts is the reason New refuses a client created without
// ContextTimeoutEnabled.
const noContextTimeouts = "the go-redis client must be created with ContextTimeoutEnabled: true " +
	"(without it, context deadlines are ignored and a call to an unreachable Redis outlasts them)"

// checkClient refuses a client that ignores context deadlines, with a
// *idem.ConfigError for Field "client".
func checkClient(rdb redis.UniversalClient) error {
	var enabled bool
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }:
		enabled = c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		enabled = c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return configError("client", fmt.Sprintf("cannot read the options of a %T: %s", rdb, noContextTimeouts))
	}
	if !enabled {
		return configError("client", noContextTimeouts)
	}
	return nil
}

// maxFence bounds fences: the scripts compute with Lua numbers (doubles).
const maxFence = 1 << 53

// keys returns the lock key and its fence key, in one allocation.
func (l *Locker) keys(name string) (key, fenceKey string) {
	fenceKey = l.cfg.Prefix + "{" + name + "}:fence"
	return fenceKey[:len(fenceKey)-len(":fence")], fenceKey
}

func (l *Locker) fenceTTLms() int64 {
	if l.cfg.FenceTTL < 0 {
		return 0
	}
	return l.cfg.FenceTTL.Milliseconds()
}

func checkName(name string) error {
	if name == "" {
		return errors.New("redislock: empty lock name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("redislock: lock name of %d bytes exceeds %d", len(name), MaxNameLen)
	}
	if name[0] == '}' {
		// "{}…" is an empty hash tag: Redis Cluster would hash the lock key
		// and its fence key into different slots.
		return fmt.Errorf("redislock: lock name %q starts with '}'", name)
	}
	return nil
}

// tokenLen is the length of an owner token: 128 random bits in base32.
const tokenLen = 26

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newValue returns a fresh lock value: a random owner token (crypto/rand,
// 128 bits, base32, so never containing ':') followed by ':'.
func newValue() string {
	var raw [16]byte
	_, _ = cryptorand.Read(raw[:]) // never fails (Go 1.24+)
	var v [tokenLen + 1]byte
	tokenEncoding.Encode(v[:tokenLen], raw[:])
	v[tokenLen] = ':'
	return string(v[:])
}

// acquire takes the lock for value (newValue), the same value for every
// attempt of one call.
func (l *Locker) acquire(ctx context.Context, name, value string, wait bool) (lock.Lease, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	key, fk := l.keys(name)
	wctx := ctx
	if wait && l.cfg.WaitTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, l.cfg.WaitTimeout)
		defer cancel()
	}
	// The lease is allocated up front: it carries the script's keys and
	// arguments, shared by all attempts (and by the release and renewals).
	ls := &Lease{l: l, name: name, key: key, value: value, qidx: -1}
	ls.keys = [...]string{key, fk}
	ls.args = [...]string{value, l.ttlArg, l.fenceTTLArg}
	var (
		lastErr error
		unsure  bool // an attempt may have taken the lock without us learning it
		down    bool // the last attempt that ended before wctx could not reach Redis
		delay   = l.cfg.RetryMin
		start   = time.Now()
	)
	for {
		sent := time.Now()
		fence, pttl, err := acquireReply(l.c.Eval(wctx, acquireScript, ls.keys[:], ls.args[:]...))
		switch {
		case err == nil && fence > 0:
			ls.start(ctx, lock.Fence(fence), sent)
			return ls, nil
		case err == nil:
			lastErr, down = nil, false
			if !wait {
				return nil, fmt.Errorf("redislock: acquire %q: %w", name, lock.ErrNotAcquired)
			}
			if pttl := time.Duration(pttl) * time.Millisecond; pttl > 0 && pttl < delay {
				delay = pttl // the holder's lock ends sooner than our backoff
			}
		case errors.Is(err, errBadReply):
			return nil, fmt.Errorf("redislock: acquire %q: %w", name, err)
		default:
			unsure = true
			over := waitOver(wctx)
			if over && down {
				break // the wait ran out mid-call: keep why the last attempt failed
			}
			lastErr = err
			switch {
			case !over && (!redisclient.IsServerError(err) || redisclient.IsUnavailableReply(err)):
				down = true
				lastErr = fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
			case over && time.Since(sent) >= unanswered(wctx, start):
				// The wait ran out while Redis kept an attempt
				// unanswered far longer than it takes to answer one: a
				// black-holed connection or a stalled server, not a
				// holder.
				down = true
				lastErr = fmt.Errorf("%w: no reply in %v: %w", lock.ErrUnavailable, time.Since(sent).Round(time.Millisecond), err)
			default:
				down = false
			}
			if !wait && !over {
				l.abandon(ctx, key, value)
				return nil, fmt.Errorf("redislock: acquire %q: %w", name, lastErr)
			}
		}
		if wctx.Err() != nil {
			break
		}
		sleep := delay/2 + rand.N(delay/2+1)
		t := time.NewTimer(sleep)
		select {
		case <-wctx.Done():
		case <-t.C:
		}
		t.Stop()
		if wctx.Err() != nil {
			break
		}
		delay = min(2*delay, l.cfg.RetryMax)
		if delay <= 0 {
			delay = time.Millisecond
		}
	}
	if unsure {
		l.abandon(ctx, key, value)
	}
	cause := context.Cause(wctx)
	if lastErr != nil && (down || !errors.Is(lastErr, cause)) {
		return nil, fmt.Errorf("redislock: acquire %q: %w: %w (last attempt: %w)", name, lock.ErrNotAcquired, cause, lastErr)
	}
	return nil, fmt.Errorf("redislock: acquire %q: %w: %w", name, lock.ErrNotAcquired, cause)
}

var errBadReply = errors.New("unexpected reply")

// waitOver reports whether wctx has ended, or its deadline has passed and
// its timer has not fired yet. A client that checks the deadline itself
// (rueidis) returns context.DeadlineExceeded at the deadline, and on a
// loaded machine wctx.Err() can still be nil a moment later: judged by
// wctx.Err() alone, an attempt that merely ran into the end of the wait
// (on a held lock) read as an unreachable Redis.
func waitOver(wctx context.Context) bool {
	if wctx.Err() != nil {
		return true
	}
	dl, ok := wctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// unanswered is how long an attempt that the end of the wait cut off must
// have gone without a reply to count as Redis not answering: half the
// wait, at most 100ms (a healthy server answers the script in well under
// a millisecond).
func unanswered(wctx context.Context, start time.Time) time.Duration {
	wait := 200 * time.Millisecond
	if dl, ok := wctx.Deadline(); ok {
		wait = min(wait, dl.Sub(start))
	}
	return wait / 2
}

// abandonTimeout bounds the best-effort delete of a lock that an attempt
// without a reply may have taken: it is what Acquire and TryAcquire may
// take past their wait. If it runs out, the lock expires after TTL.
const abandonTimeout = 100 * time.Millisecond

// acquireReply decodes acquireScript's {fence, 0} or {0, pttl}.
func acquireReply(r redisclient.Reply) (fence, pttl int64, err error) {
	v, err := r.Value()
	if err != nil {
		return 0, 0, err
	}
	if a, ok := v.([]any); ok && len(a) == 2 {
		f, ok1 := a[0].(int64)
		p, ok2 := a[1].(int64)
		if ok1 && ok2 {
			return f, p, nil
		}
	}
	return 0, 0, fmt.Errorf("%w %v", errBadReply, v)
}

// abandon deletes the lock if it holds value: an attempt whose reply never
// arrived may have taken it. Best effort: if it fails, the lock expires
// after TTL.
func (l *Locker) abandon(ctx context.Context, key, value string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.cfg.TTL, abandonTimeout))
	defer cancel()
	_ = l.c.Eval(actx, releaseScript, []string{key}, value).Err()
}

// configError is the *idem.ConfigError of package redislock.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "redislock", Field: field, Reason: reason}
}
