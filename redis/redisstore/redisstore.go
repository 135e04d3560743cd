package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clock"
	"github.com/idemkit/idem/internal/heldmark"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

// Config tunes a Store. A nil *Config means the defaults.
type Config struct {
	// Prefix is prepended to every key the store writes: Prefix + the
	// key's digest in hex. Default "idem:".
	Prefix string
	// MaxResult bounds a stored result in bytes; Complete with a larger one
	// fails with idem.ErrResultTooLarge. Default 64 MiB.
	MaxResult int
	// AllowEviction makes Check accept a server whose maxmemory-policy may
	// evict keys (or whose policy cannot be read), logging a warning
	// instead of failing. Evicted records are duplicates waiting to happen:
	// set it only when the server holds nothing but data you can lose.
	AllowEviction bool
	// Logger receives Check's warnings. Default slog.Default().
	Logger *slog.Logger
	// AssumeContextTimeouts makes New accept a client it cannot inspect (a
	// wrapper of your own around a go-redis client). Set it only when that
	// client bounds every call by its context's deadline, as go-redis does
	// with ContextTimeoutEnabled. See New.
	AssumeContextTimeouts bool

	// WaitReplicas, when positive, makes every write that decides
	// ownership or a result wait until that many replicas have it: a Begin
	// that acquires (a takeover too) or replays, MarkStarted, Extend,
	// Complete, CompleteUntil, Hold, Release, Adopt and Resolve send
	// "WAIT WaitReplicas WaitTimeout" behind their script, pipelined on the
	// same connection in the same write (no extra round trip), and fail
	// with an error for which idem.IsUnavailable is true (ErrNotReplicated)
	// when fewer replicas acknowledged in time. See "Replicas" in the
	// package documentation for what that does and does not promise.
	// Default 0: no WAIT; Check then refuses a master with replicas
	// attached unless AllowAsyncReplication is set.
	WaitReplicas int

	// WaitTimeout bounds each WAIT. Default 1s. It must be shorter than
	// the go-redis client's ReadTimeout (New checks), and the callers'
	// deadlines should leave room for it: a call whose context ends first
	// returns the context's error.
	WaitTimeout time.Duration

	// AllowAsyncReplication makes the store accept a master with replicas
	// attached while WaitReplicas is 0: Check logs a warning instead of
	// failing with idem.ErrAsyncReplication, and Begin grants claims. A
	// failover may then lose acknowledged records, and their keys run
	// again.
	AllowAsyncReplication bool
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// maxWaitReplicas bounds Config.WaitReplicas; more is almost surely a
// mistake.
const maxWaitReplicas = 64

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "idem:"

// maxPrefix bounds Config.Prefix; a longer one is almost surely a mistake.
const maxPrefix = 512

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Prefix == "" {
		out.Prefix = DefaultPrefix
	}
	if out.MaxResult == 0 {
		out.MaxResult = 64 << 20
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.WaitTimeout == 0 {
		out.WaitTimeout = DefaultWaitTimeout
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.MaxResult < 0:
		return configError("Config.MaxResult", "must not be negative (0 means the 64 MiB default)")
	case len(c.Prefix) > maxPrefix:
		return configError("Config.Prefix", fmt.Sprintf("is %d bytes, the limit is %d", len(c.Prefix), maxPrefix))
	case c.WaitReplicas < 0 || c.WaitReplicas > maxWaitReplicas:
		return configError("Config.WaitReplicas", fmt.Sprintf("is %d, want 0 (no WAIT) to %d", c.WaitReplicas, maxWaitReplicas))
	case c.WaitTimeout < time.Millisecond:
		return configError("Config.WaitTimeout", "must be at least 1ms (0 means the 1s default)")
	}
	return nil
}

// Store is an idem.Store on Redis. It is safe for concurrent use.
type Store struct {
	c    redisclient.Client
	cfg  Config
	gate gate // see admit
}

var _ idem.Store = (*Store)(nil)

// New returns a Store that keeps its records in c. It does no I/O; call
// Check once at startup to verify the server's eviction policy.
//
// New refuses a client created without ContextTimeoutEnabled
// (redis.Options, ClusterOptions, RingOptions, FailoverOptions and
// UniversalOptions all have it). Without it go-redis ignores the deadline
// of the caller's context and waits for its own ReadTimeout (3s by
// default, and then retries): a hung Redis would hold every request, every
// lease renewal and tiered's fast path for seconds instead of the budget
// the caller chose. A client of another type is refused too, unless
// Config.AssumeContextTimeouts says it honours deadlines.
func New(c redis.UniversalClient, cfg *Config) (*Store, error) {
	if c == nil {
		return nil, configError("client", "nil redis client")
	}
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	if err := checkClient(c, conf.AssumeContextTimeouts); err != nil {
		return nil, err
	}
	if err := checkWaitClient(c, conf); err != nil {
		return nil, err
	}
	return &Store{c: redisclient.GoRedis(c), cfg: conf}, nil
}

// NewRueidis returns a Store that keeps its records through a rueidis
// client (single node, sentinel or cluster, as rueidis.NewClient chose from
// its options). It does no I/O; call Check once at startup.
//
// rueidis honours context deadlines natively, so there is nothing to
// refuse, and it pipelines the commands of concurrent callers onto shared
// connections, which makes it the faster client under concurrency
// (BENCHMARKS.md). rueidis never resends a script, and the first command on
// a connection that died (a restarted server, a reset) fails; go-redis, by
// default, checks a connection before use and resends a command whose
// reply it lost. So that both stores answer alike, the store on rueidis
// sends a command again after a transport error while the caller's context
// is alive, at most twice more. Every script is safe to run again: Begin
// and Adopt recognise their own token, Complete and Hold keep the owner's
// first outcome, Release carries a nonce, Extend and MarkStarted repeat
// themselves.
func NewRueidis(c rueidis.Client, cfg *Config) (*Store, error) {
	if c == nil {
		return nil, configError("client", "nil rueidis client")
	}
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	return &Store{c: resending{redisclient.Rueidis(c)}, cfg: conf}, nil
}

// resending sends a script or command again after a transport error, while
// ctx is alive, up to resends more times (see NewRueidis). Server errors,
// nil replies and an ended context are final. More than one resend: the
// first command on a connection that died may fail before rueidis has
// noticed, and the next one may still be handed the same connection.
type resending struct{ redisclient.Client }

// resends bounds the resends of one call.
const resends = 2

func resend(ctx context.Context, err error) bool {
	return err != nil && !errors.Is(err, redisclient.ErrNil) && !redisclient.IsServerError(err) && callerStopped(ctx) == nil
}

func (c resending) Eval(ctx context.Context, s *redisclient.Script, keys []string, args ...string) redisclient.Reply {
	r := c.Client.Eval(ctx, s, keys, args...)
	for i := 0; i < resends && resend(ctx, r.Err()); i++ {
		r = c.Client.Eval(ctx, s, keys, args...)
	}
	return r
}

func (c resending) EvalWait(ctx context.Context, s *redisclient.Script, w redisclient.Wait, keys []string, args ...string) (redisclient.Reply, redisclient.Reply) {
	r, a := c.Client.EvalWait(ctx, s, w, keys, args...)
	for i := 0; i < resends && resend(ctx, r.Err()); i++ {
		r, a = c.Client.EvalWait(ctx, s, w, keys, args...)
	}
	return r, a
}

func (c resending) Do(ctx context.Context, name string, keys []string, args ...string) redisclient.Reply {
	r := c.Client.Do(ctx, name, keys, args...)
	for i := 0; i < resends && resend(ctx, r.Err()); i++ {
		r = c.Client.Do(ctx, name, keys, args...)
	}
	return r
}

// checkWaitClient refuses, when WaitReplicas is set, a client on which the
// store cannot pipeline a script and WAIT on one connection (a Ring, or a
// type it cannot inspect), and a ReadTimeout that would cut a WAIT short.
func checkWaitClient(c redis.UniversalClient, conf Config) error {
	if conf.WaitReplicas == 0 {
		return nil
	}
	var read time.Duration
	switch c := c.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		return configError("Config.WaitReplicas", fmt.Sprintf("needs a *redis.Client (single node or sentinel) "+
			"or a *redis.ClusterClient, which the store can pipeline WAIT on; got a %T", c))
	}
	if read > 0 && read <= conf.WaitTimeout {
		return configError("Config.WaitTimeout", fmt.Sprintf("is %v, not shorter than the client's ReadTimeout %v: "+
			"a WAIT that runs its course would read as a timeout", conf.WaitTimeout, read))
	}
	return nil
}

// noContextTimeouts is the reason New refuses a client that does not bound
// its calls by the context's deadline.
const noContextTimeouts = "the redis client ignores context deadlines; create it with ContextTimeoutEnabled: true"

// checkClient refuses a client that ignores context deadlines, with a
// *idem.ConfigError for Field "client".
func checkClient(c redis.UniversalClient, assume bool) error {
	var enabled bool
	switch c := c.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		if assume {
			return nil
		}
		return configError("client", fmt.Sprintf("%s (a %T cannot be inspected: set Config.AssumeContextTimeouts "+
			"if it bounds every call by its context)", noContextTimeouts, c))
	}
	if !enabled {
		return configError("client", noContextTimeouts)
	}
	return nil
}

// The scripts, one per operation that writes. Each touches exactly one key,
// so each runs on the one node that owns the key in a cluster.
var (
	//go:embed lua/begin.lua
	beginSrc string
	//go:embed lua/complete.lua
	completeSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/extend.lua
	extendSrc string
	//go:embed lua/purge.lua
	purgeSrc string
	//go:embed lua/mark.lua
	markSrc string
	//go:embed lua/hold.lua
	holdSrc string

	beginScript    = redisclient.NewScript(beginSrc)
	completeScript = redisclient.NewScript(completeSrc)
	releaseScript  = redisclient.NewScript(releaseSrc)
	extendScript   = redisclient.NewScript(extendSrc)
	markScript     = redisclient.NewScript(markSrc)
	holdScript     = redisclient.NewScript(holdSrc)
	purgeScript    = redisclient.NewScript(purgeSrc)
)

// micros formats d in microseconds, the unit of the scripts' arguments.
func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// Key returns the Redis key that holds key's record.
func (s *Store) Key(key idem.Key) string { return s.redisKey(key.Digest()) }

func (s *Store) redisKey(d idem.Digest) string {
	var buf [2 * len(idem.Digest{})]byte
	hex.Encode(buf[:], d[:])
	return s.cfg.Prefix + string(buf[:])
}

// Begin implements idem.Store. While the master has replicas attached and
// Config.WaitReplicas is 0, Begin refuses with an error matching
// idem.ErrAsyncReplication and idem.ErrUnavailable, unless
// Config.AllowAsyncReplication is set: the replication is read at the
// first Begin and again by the first Begin after it is 5 seconds old (no
// background goroutine), so a replica that attaches or leaves changes the
// answer within seconds.
func (s *Store) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	if err := s.admit(ctx); err != nil {
		return idem.Claim{}, err
	}
	return s.BeginWithToken(ctx, req, idem.NewToken())
}

// BeginWithToken is Begin with an owner token chosen by the caller, which
// must be random (idem.NewToken) and never reused. A layered store
// (tiered) uses it so that it can finish a claim whose Begin answer it
// lost: it knows the token even when it never learned the outcome.
//
// The script recognises its own token: a Begin that finds an in-progress
// claim of the same token (go-redis resent the command after its answer
// was lost on the wire) answers Acquired again, with the same fence and a
// lease renewed from now, never InFlight.
//
// BeginWithToken does not refuse for asynchronous replication (Begin
// does): a layered store keeps its decisions in its durable store, whose
// replication is what counts, and Redis is its cache.
func (s *Store) BeginWithToken(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Claim, error) {
	req, err := req.Normalize()
	if err != nil {
		return idem.Claim{}, err
	}
	if token == (idem.Token{}) {
		return idem.Claim{}, errors.New("redisstore: zero owner token")
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	fp := req.Fingerprint
	args := []string{string(fp[:]), string(token[:]), micros(req.Lease), micros(req.Retention)}
	if s.cfg.WaitReplicas > 0 {
		args = append(args, "1") // a replay rewrites a field, for the WAIT
	}
	w := s.eval(ctx, beginScript, []string{s.redisKey(req.Key.Digest())}, args...)
	res, err := w.reply.Slice()
	if err != nil {
		return idem.Claim{}, s.fail(ctx, "begin", err)
	}
	claim, err := decodeBegin(res)
	if err != nil {
		return idem.Claim{}, s.fail(ctx, "begin", err)
	}
	if claim.Outcome == idem.Acquired || claim.Outcome == idem.Replay {
		// A claim or a result that no replica acknowledged is not
		// answered: a failover could lose it. An acquired claim stays on
		// the master until its lease runs out (see "Replicas" in the
		// package documentation).
		if err := s.replicated(ctx, "begin", w); err != nil {
			return idem.Claim{}, err
		}
	}
	if claim.Outcome == idem.Acquired {
		claim.Owner.Key = req.Key
		claim.Owner.Token = token
	}
	return claim, nil
}

func decodeBegin(res []any) (idem.Claim, error) {
	if len(res) == 0 {
		return idem.Claim{}, errors.New("redisstore: empty reply from the begin script")
	}
	code, _ := res[0].(int64)
	switch {
	case code == 1 && len(res) == 4:
		fs, _ := res[1].(string)
		fence, err := strconv.ParseUint(fs, 10, 64)
		if err != nil || fence == 0 {
			return idem.Claim{}, fmt.Errorf("redisstore: bad fence %q in the begin script's reply", fs)
		}
		takeover, _ := res[2].(int64)
		started, _ := res[3].(int64)
		return idem.Claim{Outcome: idem.Acquired, Owner: idem.Owner{Fence: fence}, Takeover: takeover == 1, Started: started == 1}, nil
	case code == 2 && len(res) == 2:
		r, _ := res[1].(string)
		return idem.Claim{Outcome: idem.Replay, Result: []byte(r)}, nil
	case code == 3 && len(res) == 2:
		us, _ := res[1].(int64)
		return idem.Claim{Outcome: idem.InFlight, RetryAfter: clock.Micros(us)}, nil
	case code == 4:
		return idem.Claim{Outcome: idem.Mismatch}, nil
	}
	return idem.Claim{}, fmt.Errorf("redisstore: unexpected reply from the begin script: %v", res)
}

// owned runs one of the owner scripts and maps its 0 reply to ErrLeaseLost.
func (s *Store) owned(ctx context.Context, op string, script *redisclient.Script, owner idem.Owner, args ...string) error {
	if owner.Key.IsZero() || owner.Token == (idem.Token{}) {
		return idem.ErrLeaseLost // a rejected duplicate's zero Owner holds nothing
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.eval(ctx, script, []string{s.redisKey(owner.Key.Digest())},
		append([]string{string(owner.Token[:])}, args...)...)
	n, err := w.reply.Int64()
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if n != 1 {
		return idem.ErrLeaseLost
	}
	return s.replicated(ctx, op, w)
}

// waited is a script's reply and, when the store sent WAIT behind it,
// WAIT's.
type waited struct {
	reply, acked redisclient.Reply
	sent         bool
}

// eval runs a script whose success decides ownership or a result: with
// Config.WaitReplicas, WAIT goes behind it on the same connection.
func (s *Store) eval(ctx context.Context, script *redisclient.Script, keys []string, args ...string) waited {
	if s.cfg.WaitReplicas == 0 {
		return waited{reply: s.c.Eval(ctx, script, keys, args...)}
	}
	w := redisclient.Wait{Replicas: s.cfg.WaitReplicas, Timeout: s.cfg.WaitTimeout}
	r, a := s.c.EvalWait(ctx, script, w, keys, args...)
	return waited{reply: r, acked: a, sent: true}
}

// ErrNotReplicated is matched (errors.Is) by the error of a write that
// fewer than Config.WaitReplicas replicas acknowledged within
// Config.WaitTimeout. The error also matches idem.ErrUnavailable: the
// write may be on the master, but it was not acknowledged to the caller,
// and nothing may run on it.
var ErrNotReplicated = errors.New("redisstore: fewer replicas than Config.WaitReplicas acknowledged the write")

// replicated checks the WAIT that went behind a successful script: nil
// when none was sent or enough replicas acknowledged.
func (s *Store) replicated(ctx context.Context, op string, w waited) error {
	if !w.sent {
		return nil
	}
	n, err := w.acked.Int64()
	if err != nil {
		return s.fail(ctx, op, fmt.Errorf("redisstore: WAIT: %w", err))
	}
	if n < int64(s.cfg.WaitReplicas) {
		return s.fail(ctx, op, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, n, s.cfg.WaitReplicas, s.cfg.WaitTimeout))
	}
	return nil
}

// Complete implements idem.Store. A repeated Complete by the same owner
// succeeds and keeps the first result: a replay already served stays the
// answer every retry sees.
func (s *Store) Complete(ctx context.Context, owner idem.Owner, result []byte) error {
	if len(result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	if result == nil {
		result = []byte{}
	}
	return s.owned(ctx, "complete", completeScript, owner, string(result))
}

// Hold implements idem.Store: Complete, with the record's held mark (field
// h) set in the same script. A repeated Hold or Complete by the owner
// succeeds and keeps the first outcome.
func (s *Store) Hold(ctx context.Context, owner idem.Owner, result []byte) error {
	if len(result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	if result == nil {
		result = []byte{}
	}
	return s.owned(ctx, "hold", completeScript, owner, string(result), "0", "1")
}

// CompleteUntil is Complete, and lowers the record's expiry to until when
// that is earlier (a past until deletes the record at once). A layered
// store (tiered) uses it when it copies a durable record, so that the copy
// never outlives the original. until is compared with the Redis server's
// clock.
func (s *Store) CompleteUntil(ctx context.Context, owner idem.Owner, result []byte, until time.Time) error {
	if len(result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	if result == nil {
		result = []byte{}
	}
	latest := until.UnixMicro()
	if latest < 1 {
		latest = 1 // the zero time or the epoch: already expired, never "no cap"
	}
	return s.owned(ctx, "complete", completeScript, owner, string(result), strconv.FormatInt(latest, 10))
}

// Adopt writes an in-progress claim of token for req (its fingerprint,
// lease and retention), replacing whatever the key holds, and returns its
// owner. It decides nothing: a layered store (tiered) calls it after the
// durable store granted a claim that this store did not show (a stale
// record, or a Begin whose answer was lost), so that Redis shows the
// durable decision. Never call it to claim a key: that is Begin.
func (s *Store) Adopt(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Owner, error) {
	req, err := req.Normalize()
	if err != nil {
		return idem.Owner{}, err
	}
	if token == (idem.Token{}) {
		return idem.Owner{}, errors.New("redisstore: zero owner token")
	}
	if err := ctx.Err(); err != nil {
		return idem.Owner{}, err
	}
	fp := req.Fingerprint
	w := s.eval(ctx, holdScript, []string{s.redisKey(req.Key.Digest())},
		string(fp[:]), string(token[:]), micros(req.Lease), micros(req.Retention))
	fs, err := w.reply.Text()
	if err != nil {
		return idem.Owner{}, s.fail(ctx, "hold", err)
	}
	if err := s.replicated(ctx, "hold", w); err != nil {
		return idem.Owner{}, err
	}
	fence, err := strconv.ParseUint(fs, 10, 64)
	if err != nil {
		return idem.Owner{}, s.fail(ctx, "hold", fmt.Errorf("redisstore: bad fence %q in the hold script's reply", fs))
	}
	return idem.Owner{Key: req.Key, Token: token, Fence: fence}, nil
}

// Forget deletes key's record, whatever it holds. A layered store (tiered)
// calls it when the durable store's decision shows that this copy is
// stale; the next Begin finds nothing and asks the durable store again.
// Fences keep growing afterwards, with the server clock.
func (s *Store) Forget(ctx context.Context, key idem.Key) error {
	if key.IsZero() {
		return &idem.KeyError{Reason: "zero Key"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fail(ctx, "forget", s.c.Do(ctx, "DEL", []string{s.redisKey(key.Digest())}).Err())
}

// Release implements idem.Store. Each call carries a random nonce, so
// that go-redis resending it after a lost reply gets the first answer
// again, while a second Release by the owner gets idem.ErrLeaseLost.
func (s *Store) Release(ctx context.Context, owner idem.Owner) error {
	nonce := idem.NewToken()
	return s.owned(ctx, "release", releaseScript, owner, string(nonce[:]))
}

// MarkStarted implements idem.Store: one script that checks the owner and
// sets the record's mark in the same step. A Begin that takes the claim
// over copies the mark into its own claim and reports Claim.Started.
func (s *Store) MarkStarted(ctx context.Context, owner idem.Owner) error {
	return s.owned(ctx, "mark started", markScript, owner)
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, owner idem.Owner, lease time.Duration) error {
	if lease < time.Millisecond {
		return configError("lease", "must be at least 1ms")
	}
	return s.owned(ctx, "extend", extendScript, owner, micros(lease))
}

// recordFields are the hash fields of a version-1 record:
//
//	v    encoding version, "1"
//	s    state: "p" in progress, "c" completed, "r" released
//	fp   fingerprint, 32 raw bytes
//	tok  owner token, 16 raw bytes
//	f    fence, decimal
//	c    acquired at, µs since the Unix epoch (server clock)
//	lu   lease until, µs (0 when not in progress)
//	x    expires at, µs; the key's PEXPIREAT is this, rounded up to a ms
//	     (down, when CompleteUntil lowered it)
//	res  result bytes (completed only)
//	m    "1" once the owner called MarkStarted; kept across takeovers
//	tk   "1" when the current owner acquired by takeover, else "0"
//	rn   released only: the nonce of the Release call that released it
//	h    "1" on a held record (completed by Hold; cleared by Resolve)
//
// Records written before m, tk and h existed lack them, and read as not
// started, not taken over and not held: the encoding is still version 1.
// A record that earlier releases held, before h existed, is completed
// with an outcome-unknown result (heldmark.Legacy): it reads as held too.
var recordFields = []string{"v", "s", "fp", "f", "c", "lu", "x", "res", "m", "h"}

// Get implements idem.Store. It is one HMGET.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if key.IsZero() {
		return idem.Record{}, &idem.KeyError{Reason: "zero Key"}
	}
	return s.Lookup(ctx, key.Digest())
}

// ErrVersion reports a record written in an encoding this release does not
// read (a newer idem wrote it). It matches idem.ErrUnavailable through the
// store's error wrapping: the store cannot answer for that key.
var ErrVersion = errors.New("redisstore: record version not supported")

func decodeRecord(d idem.Digest, vals []any) (idem.Record, error) {
	str := func(i int) string {
		if i >= len(vals) {
			return ""
		}
		s, _ := vals[i].(string)
		return s
	}
	if v := str(0); v != "1" {
		return idem.Record{}, fmt.Errorf("%w: version %q (this release reads 1)", ErrVersion, v)
	}
	rec := idem.Record{Digest: d}
	switch str(1) {
	case "p":
		rec.State = idem.StateInProgress
	case "c":
		rec.State = idem.StateCompleted
	case "r":
		rec.State = idem.StateReleased
	default:
		return idem.Record{}, fmt.Errorf("redisstore: record %s has unknown state %q", d, str(1))
	}
	if fp := str(2); len(fp) == len(rec.Fingerprint) {
		copy(rec.Fingerprint[:], fp)
	} else {
		return idem.Record{}, fmt.Errorf("redisstore: record %s has a %d-byte fingerprint", d, len(fp))
	}
	var err error
	if rec.Fence, err = strconv.ParseUint(str(3), 10, 64); err != nil {
		return idem.Record{}, fmt.Errorf("redisstore: record %s: fence: %w", d, err)
	}
	times := []*time.Time{&rec.CreatedAt, &rec.LeaseUntil, &rec.ExpiresAt}
	for i, p := range times {
		us, err := strconv.ParseInt(str(4+i), 10, 64)
		if err != nil {
			return idem.Record{}, fmt.Errorf("redisstore: record %s: field %s: %w", d, recordFields[4+i], err)
		}
		if us != 0 {
			*p = time.UnixMicro(us)
		}
	}
	if rec.State == idem.StateCompleted {
		rec.Result = []byte(str(7))
		if str(9) == "1" || heldmark.Legacy(rec.Result) {
			rec.State = idem.StateHeld
		}
	}
	rec.Started = str(8) == "1"
	return rec, nil
}

// Purge implements idem.Store. Redis deletes records by itself when their
// TTL (the record's expiry) runs out, so Purge normally finds nothing: it
// exists for records whose TTL was removed by hand and for the rounding
// of expiries to milliseconds. It SCANs the keys under Prefix (on every
// master of a cluster) and deletes them, batch keys per pipeline, each with
// a script that compares the record's expiry with the server clock in the
// same step, so a record re-created while Purge runs is never deleted.
// SCAN walks the whole database, not only the keys under Prefix: on a
// shared server with millions of keys, run it rarely, if at all.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		return 0, configError("batch", "must be positive")
	}
	if grace < 0 {
		return 0, configError("grace", "must not be negative")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var total int64
	err := s.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		n, err := s.purgeNode(ctx, node, grace, batch)
		total += n // ForEachMaster visits the nodes one at a time
		return err
	})
	return total, s.fail(ctx, "purge", err)
}

// scanCount is the COUNT hint of Purge's SCAN calls: how many slots of the
// whole keyspace one call walks, matching or not.
const scanCount = 5000

func (s *Store) purgeNode(ctx context.Context, c redisclient.Client, grace time.Duration, batch int) (int64, error) {
	var total int64
	g := micros(grace)
	err := s.scan(ctx, c, max(scanCount, batch), batch, func(chunk []string) error {
		calls := make([]redisclient.Call, len(chunk))
		for i, k := range chunk {
			calls[i] = redisclient.Call{Keys: []string{k}, Args: []string{g}}
		}
		for _, r := range c.EvalMany(ctx, purgeScript, calls) {
			n, err := r.Int64()
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, err
}

// scan walks the keys under Prefix on one node, SCAN with a COUNT hint of
// count, and hands them to fn in chunks of at most batch keys.
func (s *Store) scan(ctx context.Context, node redisclient.Client, count, batch int, fn func(keys []string) error) error {
	cursor := "0"
	match := escapeGlob(s.cfg.Prefix) + "*"
	n := strconv.Itoa(count)
	for {
		a, err := node.Do(ctx, "SCAN", nil, cursor, "MATCH", match, "COUNT", n).Slice()
		if err != nil {
			return err
		}
		if len(a) != 2 {
			return fmt.Errorf("redisstore: SCAN answered %d elements, want 2", len(a))
		}
		next, ok := a[0].(string)
		if !ok {
			return fmt.Errorf("redisstore: SCAN cursor is a %T", a[0])
		}
		elems, _ := a[1].([]any)
		keys := make([]string, 0, len(elems))
		for _, e := range elems {
			k, ok := e.(string)
			if !ok {
				return fmt.Errorf("redisstore: SCAN key is a %T", e)
			}
			keys = append(keys, k)
		}
		for len(keys) > 0 {
			chunk := keys[:min(batch, len(keys))]
			keys = keys[len(chunk):]
			if err := fn(chunk); err != nil {
				return err
			}
		}
		if cursor = next; cursor == "0" {
			return nil
		}
	}
}

// escapeGlob escapes the characters SCAN MATCH treats as patterns.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fail wraps a Redis error for op with idem.StoreError: the caller's
// context decides what a failure is. When ctx has ended (or its deadline
// has passed), the answer is ctx's error, whatever the client made of the
// deadline (a context error, an i/o timeout); while ctx is alive every
// failure, a dial or read timeout included, makes the store unavailable,
// and a context error that did not come from ctx (a dial timeout inside
// the client) is not passed on as one. A nil reply is a protocol surprise.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redisclient.ErrNil) {
		err = fmt.Errorf("redisstore: unexpected nil reply: %w", err)
	}
	var se *redisclient.ServerError
	if errors.As(err, &se) && strings.HasPrefix(se.Msg, "IDEMVERSION") {
		err = fmt.Errorf("%w: %v", ErrVersion, err)
	}
	return idem.StoreError(ctx, op, err)
}

// callerStopped returns ctx's error if ctx has ended, or is past its
// deadline: go-redis sets the connection's deadline to ctx's, and the read
// can fail a moment before ctx's own timer marks it done.
func callerStopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// configError is the *idem.ConfigError of package redisstore.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "redisstore", Field: field, Reason: reason}
}
