package redisinbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

// Config configures a FastPath. Zero fields take their defaults.
type Config struct {
	// Prefix is put in front of every key; default "idem:inbox:". The keys
	// themselves already hash the database's identity (see
	// inbox.Config.Namespace), the table, consumer and message ID, so
	// inboxes of different databases never share an entry; a prefix of its
	// own per application keeps Redis easy to inspect and clean.
	Prefix string
	// ClaimTTL bounds a "processing" entry: if its holder dies, the entry
	// expires. Default 30s. It only decides how long redeliveries are told
	// "busy" (they then go to the database anyway).
	ClaimTTL time.Duration
	// DoneTTL is how long a "done" entry answers duplicates without the
	// database. It should cover the business duplicate window (payment
	// callbacks: 7 days); shorter only costs database reads, never
	// correctness. Default 24h.
	DoneTTL time.Duration
	// Timeout bounds each Redis call, so a hanging Redis delays a message by
	// at most this much before the inbox falls back to the database (whose
	// breaker then skips Redis for a while). Default 200ms. rueidis ends a
	// call at the deadline by itself. It holds also for a go-redis client
	// created without Options.ContextTimeoutEnabled, which ignores context
	// deadlines on its sockets: then each call runs in a goroutine that the
	// FastPath stops waiting for at the timeout (see New).
	Timeout time.Duration
}

// maxAbandoned bounds the calls of a client without ContextTimeoutEnabled
// that may still be running after their timeout.
const maxAbandoned = 64

// FastPath implements inbox.FastPath on Redis (single node, Sentinel or
// Cluster, through go-redis or rueidis). Each key is one of:
//
//	processing:<token>  a delivery is in its transaction (PX ClaimTTL)
//	done                the message committed (PX DoneTTL)
//
// Every decision is one Lua script, so it is atomic in Redis.
type FastPath struct {
	c   redisclient.Client
	cfg Config
	// The scripts' TTL arguments, in milliseconds.
	claimTTL, doneTTL string

	// honoursDeadline: the client applies context deadlines to its socket
	// I/O (rueidis; go-redis with Options.ContextTimeoutEnabled), so a call
	// returns at Timeout by itself.
	honoursDeadline bool
	abandoned       atomic.Int64 // calls of a deadline-ignoring client still running past their timeout
}

var _ inbox.FastPath = (*FastPath)(nil)

const (
	processingPrefix = "processing:"
	doneValue        = "done"
)

// claimScript: SET NX first; only if the key exists, say what it holds.
var claimScript = redisclient.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == 'done' then
  return 3
end
return 2
`)

// completeScript writes "done" if the key is empty, already done, or still
// holds the caller's claim (ARGV[1], "" when the caller took none). It never
// overwrites another delivery's live claim: that delivery completes itself.
var completeScript = redisclient.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == 'done' or (ARGV[1] ~= '' and v == ARGV[1]) then
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the key only while it holds the caller's claim.
var releaseScript = redisclient.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// New returns a FastPath over the go-redis client rdb. cfg may be nil.
//
// Create rdb with Options.ContextTimeoutEnabled (ClusterOptions, RingOptions
// alike): go-redis then ends a call at Config.Timeout by itself. A client
// without it (or one New cannot inspect, such as a wrapper) waits for its own
// ReadTimeout (3s by default, or for ever with -1) whatever the context says;
// New accepts it and bounds every call itself: the call runs in a goroutine,
// and the FastPath returns context.DeadlineExceeded at Config.Timeout without
// waiting for it. That goroutine ends when go-redis gives up or the client is
// closed. Once 64 calls are hung that way, further calls fail at once
// (without touching Redis) until some end.
func New(rdb redis.UniversalClient, cfg *Config) (*FastPath, error) {
	if rdb == nil {
		return nil, configError("client", "nil redis client")
	}
	return newFastPath(redisclient.GoRedis(rdb), honoursDeadline(rdb), cfg)
}

// NewRueidis returns a FastPath over a rueidis client (single node, Sentinel
// or Cluster, as rueidis.NewClient chose from its options). cfg may be nil.
// rueidis ends every call at Config.Timeout by itself, and pipelines the
// calls of concurrent deliveries onto shared connections, so it is the
// cheaper client under load (docs/redis.md). Keep rueidis's default of not
// retrying scripts.
func NewRueidis(c rueidis.Client, cfg *Config) (*FastPath, error) {
	if c == nil {
		return nil, configError("client", "nil rueidis client")
	}
	return newFastPath(redisclient.Rueidis(c), true, cfg)
}

func newFastPath(rc redisclient.Client, honours bool, cfg *Config) (*FastPath, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Prefix == "" {
		c.Prefix = "idem:inbox:"
	}
	if c.ClaimTTL == 0 {
		c.ClaimTTL = 30 * time.Second
	}
	if c.DoneTTL == 0 {
		c.DoneTTL = 24 * time.Hour
	}
	if c.Timeout == 0 {
		c.Timeout = 200 * time.Millisecond
	}
	switch {
	case c.ClaimTTL < time.Millisecond:
		return nil, configError("Config.ClaimTTL", fmt.Sprintf("%v is below 1ms", c.ClaimTTL))
	case c.DoneTTL < time.Millisecond:
		return nil, configError("Config.DoneTTL", fmt.Sprintf("%v is below 1ms", c.DoneTTL))
	case c.Timeout < 0:
		return nil, configError("Config.Timeout", fmt.Sprintf("%v is negative", c.Timeout))
	case strings.ContainsAny(c.Prefix, " \r\n"):
		return nil, configError("Config.Prefix", fmt.Sprintf("%q contains whitespace", c.Prefix))
	}
	return &FastPath{
		c:               rc,
		cfg:             c,
		claimTTL:        strconv.FormatInt(c.ClaimTTL.Milliseconds(), 10),
		doneTTL:         strconv.FormatInt(c.DoneTTL.Milliseconds(), 10),
		honoursDeadline: honours,
	}, nil
}

// honoursDeadline reports whether rdb is a go-redis client created with
// ContextTimeoutEnabled.
func honoursDeadline(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ErrTooManyHung is returned at once, without touching Redis, while 64 calls
// of a go-redis client without ContextTimeoutEnabled are still hung past their
// timeout (see New).
var ErrTooManyHung = errors.New("redisinbox: too many Redis calls still hung past their timeout")

// Call states of a deadline-ignoring client's call.
const (
	callRunning int32 = iota
	callDone
	callAbandoned
)

// run runs script on key within Config.Timeout and returns its integer reply.
func (f *FastPath) run(ctx context.Context, script *redisclient.Script, key string, args ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	keys := []string{f.cfg.Prefix + key}
	if f.honoursDeadline {
		return f.c.Eval(ctx, script, keys, args...).Int64()
	}
	// The client would not stop at the deadline: run the call aside and
	// stop waiting for it at the timeout. Only calls abandoned that way
	// count against maxAbandoned; ordinary concurrency is not limited.
	if f.abandoned.Load() >= maxAbandoned {
		return 0, ErrTooManyHung
	}
	type reply struct {
		n   int64
		err error
	}
	done := make(chan reply, 1)
	var state atomic.Int32
	go func() {
		n, err := f.c.Eval(ctx, script, keys, args...).Int64()
		done <- reply{n, err}
		if !state.CompareAndSwap(callRunning, callDone) {
			f.abandoned.Add(-1) // it was abandoned: its slot is free again
		}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-ctx.Done():
		if !state.CompareAndSwap(callRunning, callAbandoned) {
			r := <-done // finished just now
			return r.n, r.err
		}
		f.abandoned.Add(1)
		return 0, ctx.Err()
	}
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Claim implements inbox.FastPath.
func (f *FastPath) Claim(ctx context.Context, key string) (inbox.FastState, string, error) {
	tok, err := newToken()
	if err != nil {
		return 0, "", fmt.Errorf("redisinbox: token: %w", err)
	}
	n, err := f.run(ctx, claimScript, key, processingPrefix+tok, f.claimTTL)
	if err != nil {
		return 0, "", fmt.Errorf("redisinbox: claim: %w", err)
	}
	switch n {
	case 1:
		return inbox.FastClaimed, tok, nil
	case 2:
		return inbox.FastBusy, "", nil
	case 3:
		return inbox.FastDone, "", nil
	}
	return 0, "", fmt.Errorf("redisinbox: claim: unexpected reply %d", n)
}

// Complete implements inbox.FastPath.
func (f *FastPath) Complete(ctx context.Context, key, token string) error {
	mine := ""
	if token != "" {
		mine = processingPrefix + token
	}
	if _, err := f.run(ctx, completeScript, key, mine, f.doneTTL); err != nil {
		return fmt.Errorf("redisinbox: complete: %w", err)
	}
	return nil
}

// Release implements inbox.FastPath.
func (f *FastPath) Release(ctx context.Context, key, token string) error {
	if token == "" {
		return nil
	}
	if _, err := f.run(ctx, releaseScript, key, processingPrefix+token); err != nil {
		return fmt.Errorf("redisinbox: release: %w", err)
	}
	return nil
}

// configError is the *idem.ConfigError of package redisinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "redisinbox", Field: field, Reason: reason}
}
