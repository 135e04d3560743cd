package redistoken

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

// Config tunes a Store. A nil *Config means the defaults.
type Config struct {
	// Prefix is prepended to every key. Default "idem:onetime:".
	Prefix string
	// Retain is how long a token is kept after its expiry, so that a late
	// submit is told ErrUsed or ErrExpired rather than ErrUnknown. Redis
	// deletes the key when it runs out. Default 24h.
	Retain time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Prefix == "" {
		out.Prefix = "idem:onetime:"
	}
	if out.Retain == 0 {
		out.Retain = 24 * time.Hour
	}
	return out
}

func (c Config) validate() error {
	if c.Retain < time.Millisecond {
		return configError("Config.Retain", "must be at least 1ms")
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return configError("Config.Prefix", "must not contain { or } (the key's hash tag is the token digest)")
	}
	return nil
}

// Store keeps tokens in Redis, one hash per token.
type Store struct {
	c   redisclient.Client
	cfg Config
}

var _ onetime.Store = (*Store)(nil)

// New returns a Store on c. It does no I/O.
func New(c redis.UniversalClient, cfg *Config) (*Store, error) {
	if c == nil {
		return nil, configError("client", "nil redis client")
	}
	return newStore(redisclient.GoRedis(c), cfg)
}

// NewRueidis returns a Store on a rueidis client (single node, sentinel or
// cluster). It does no I/O. rueidis honours context deadlines natively and
// pipelines concurrent callers' commands automatically.
func NewRueidis(c rueidis.Client, cfg *Config) (*Store, error) {
	if c == nil {
		return nil, configError("client", "nil rueidis client")
	}
	return newStore(redisclient.Rueidis(c), cfg)
}

func newStore(c redisclient.Client, cfg *Config) (*Store, error) {
	conf := cfg.withDefaults()
	if err := conf.validate(); err != nil {
		return nil, err
	}
	return &Store{c: c, cfg: conf}, nil
}

// key is Prefix + "{" + hex(digest) + "}": one key per script, and the
// braces make it a cluster hash tag of its own.
func (s *Store) key(d onetime.Digest) string {
	return s.cfg.Prefix + "{" + d.String() + "}"
}

// The token hash: v = encoding version, s = scope digest, e = expiry (unix
// ms, server clock), u = spender's Use ID, f = spender's fence (20 digits).
//
// Times come from the server's TIME inside the script; Redis 7 replicates a
// script's effects, so replicas apply the same values.
var insertScript = redisclient.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'v', '1', 's', ARGV[1], 'e', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl + tonumber(ARGV[3]))
return 1
`)

// consumeScript returns 0 on success, else 1 unknown, 2 wrong scope, 3 used,
// 4 expired: the whole decision and its classification in one atomic step.
var consumeScript = redisclient.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 'e', 'u', 'f')
if not r[1] then return 1 end
if r[1] ~= ARGV[1] then return 2 end
if r[3] and not (r[3] == ARGV[2] and r[4] <= ARGV[3]) then return 3 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(r[2]) then return 4 end
redis.call('HSET', KEYS[1], 'u', ARGV[2], 'f', ARGV[3])
return 0
`)

var restoreScript = redisclient.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'u', 'f')
if r[1] == ARGV[1] and r[2] == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'u', 'f')
  return 1
end
return 0
`)

// Insert implements onetime.Store.
func (s *Store) Insert(ctx context.Context, token, scope onetime.Digest, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return configError("ttl", "must be at least 1ms")
	}
	n, err := s.c.Eval(ctx, insertScript, []string{s.key(token)},
		string(scope[:]), ms(ttl), ms(s.cfg.Retain)).Int64()
	if err != nil {
		return idem.StoreError(ctx, "insert token", err)
	}
	if n != 1 {
		return errors.New("redistoken: token digest collision (a token was issued twice)")
	}
	return nil
}

// Consume implements onetime.Store.
func (s *Store) Consume(ctx context.Context, token, scope onetime.Digest, use onetime.Use) error {
	n, err := s.c.Eval(ctx, consumeScript, []string{s.key(token)},
		string(scope[:]), string(use.ID[:]), use.FenceString()).Int64()
	if err != nil {
		return idem.StoreError(ctx, "consume token", err)
	}
	switch n {
	case 0:
		return nil
	case 1:
		return onetime.ErrUnknown
	case 2:
		return onetime.ErrWrongScope
	case 3:
		return onetime.ErrUsed
	case 4:
		return onetime.ErrExpired
	}
	return fmt.Errorf("redistoken: consume script returned %d", n)
}

// Restore implements onetime.Store.
func (s *Store) Restore(ctx context.Context, token onetime.Digest, use onetime.Use) error {
	n, err := s.c.Eval(ctx, restoreScript, []string{s.key(token)}, string(use.ID[:]), use.FenceString()).Int64()
	if err != nil {
		return idem.StoreError(ctx, "restore token", err)
	}
	if n != 1 {
		return onetime.ErrNotHeld
	}
	return nil
}

// Purge implements onetime.Store. Redis deletes every token Config.Retain
// after its expiry by itself, so Purge deletes nothing and returns 0; it
// only checks that ctx is alive and the server answers.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.c.Do(ctx, "PING", nil).Err(); err != nil {
		return 0, idem.StoreError(ctx, "purge tokens", err)
	}
	return 0, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// configError is the *idem.ConfigError of package redistoken.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "redistoken", Field: field, Reason: reason}
}
