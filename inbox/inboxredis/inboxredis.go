package inboxredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/inbox"
)

// ErrInvalidConfig is returned by New for a bad Config.
var ErrInvalidConfig = errors.New("inboxredis: invalid config")

// Config configures a FastPath. Zero fields take their defaults.
type Config struct {
	// Prefix is put in front of every key; default "idem:inbox:". Give each
	// application (or each inbox database) its own prefix when they share a
	// Redis: the key hashes the table name, consumer and message ID, not the
	// database.
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
	// at most this much before the inbox falls back to the database.
	// Default 200ms.
	Timeout time.Duration
}

// FastPath implements inbox.FastPath on Redis (single node, Sentinel or
// Cluster via redis.UniversalClient). Each key is one of:
//
//	processing:<token>  a delivery is in its transaction (PX ClaimTTL)
//	done                the message committed (PX DoneTTL)
//
// Every decision is one Lua script, so it is atomic in Redis.
type FastPath struct {
	rdb redis.UniversalClient
	cfg Config
}

var _ inbox.FastPath = (*FastPath)(nil)

const (
	processingPrefix = "processing:"
	doneValue        = "done"
)

// claimScript: SET NX first; only if the key exists, say what it holds.
var claimScript = redis.NewScript(`
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
var completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == 'done' or (ARGV[1] ~= '' and v == ARGV[1]) then
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the key only while it holds the caller's claim.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// New returns a FastPath over rdb. cfg may be nil.
func New(rdb redis.UniversalClient, cfg *Config) (*FastPath, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidConfig)
	}
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
		return nil, fmt.Errorf("%w: ClaimTTL %v is below 1ms", ErrInvalidConfig, c.ClaimTTL)
	case c.DoneTTL < time.Millisecond:
		return nil, fmt.Errorf("%w: DoneTTL %v is below 1ms", ErrInvalidConfig, c.DoneTTL)
	case c.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, c.Timeout)
	case strings.ContainsAny(c.Prefix, " \r\n"):
		return nil, fmt.Errorf("%w: Prefix %q contains whitespace", ErrInvalidConfig, c.Prefix)
	}
	return &FastPath{rdb: rdb, cfg: c}, nil
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
		return 0, "", fmt.Errorf("inboxredis: token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	n, err := claimScript.Run(ctx, f.rdb, []string{f.cfg.Prefix + key}, processingPrefix+tok, f.cfg.ClaimTTL.Milliseconds()).Int()
	if err != nil {
		return 0, "", fmt.Errorf("inboxredis: claim: %w", err)
	}
	switch n {
	case 1:
		return inbox.FastClaimed, tok, nil
	case 2:
		return inbox.FastBusy, "", nil
	case 3:
		return inbox.FastDone, "", nil
	}
	return 0, "", fmt.Errorf("inboxredis: claim: unexpected reply %d", n)
}

// Complete implements inbox.FastPath.
func (f *FastPath) Complete(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	mine := ""
	if token != "" {
		mine = processingPrefix + token
	}
	if err := completeScript.Run(ctx, f.rdb, []string{f.cfg.Prefix + key}, mine, f.cfg.DoneTTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("inboxredis: complete: %w", err)
	}
	return nil
}

// Release implements inbox.FastPath.
func (f *FastPath) Release(ctx context.Context, key, token string) error {
	if token == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	if err := releaseScript.Run(ctx, f.rdb, []string{f.cfg.Prefix + key}, processingPrefix+token).Err(); err != nil {
		return fmt.Errorf("inboxredis: release: %w", err)
	}
	return nil
}
