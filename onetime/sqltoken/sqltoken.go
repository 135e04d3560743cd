package sqltoken

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/onetime"
)

// Config tunes a Store. A nil *Config is invalid: Dialect is required.
type Config struct {
	Dialect Dialect // required
	// Table is the token table's name. Default "idem_onetime_tokens".
	Table string
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Table == "" {
		out.Table = "idem_onetime_tokens"
	}
	return out
}

func (c Config) validate() error {
	switch c.Dialect {
	case Postgres, MySQL, SQLite:
	case 0:
		return configError("Config.Dialect", "required (sqltoken.Postgres, MySQL or SQLite)")
	default:
		return configError("Config.Dialect", "unknown "+c.Dialect.String())
	}
	if !checkTable(c.Table) {
		return configError("Config.Table", fmt.Sprintf("%q is not a plain identifier (letters, digits, _; at most 48)", c.Table))
	}
	return nil
}

// Store keeps tokens in a SQL table.
type Store struct {
	db  *sql.DB
	cfg Config
	q   queries
}

var _ onetime.Store = (*Store)(nil)

// New returns a Store on db. It does no I/O; call Migrate once to create the
// table.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, configError("db", "nil *sql.DB")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: c, q: buildQueries(c.Dialect, c.Table)}, nil
}

// Insert implements onetime.Store.
func (s *Store) Insert(ctx context.Context, token, scope onetime.Digest, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return configError("ttl", "must be at least 1ms")
	}
	_, err := s.db.ExecContext(ctx, s.q.insert, token[:], scope[:], ttl.Microseconds())
	return idem.StoreError(ctx, "insert token", err)
}

// maxAttempts bounds Consume's loop when a loss's classification finds the
// token consumable again (it was restored between the two statements).
const maxAttempts = 3

// Consume implements onetime.Store. The decision is one conditional UPDATE
// (one row affected: this call spent the token). Only a loss reads the row
// afterwards, to say why; that read decides nothing except the error.
func (s *Store) Consume(ctx context.Context, token, scope onetime.Digest, use onetime.Use) error {
	if use.Fence > math.MaxInt64 {
		return fmt.Errorf("sqltoken: fence %d does not fit a BIGINT", use.Fence)
	}
	fence := int64(use.Fence)
	for range maxAttempts {
		res, err := s.db.ExecContext(ctx, s.q.consume, s.q.consumeArgs(token[:], scope[:], use.ID[:], fence)...)
		if err != nil {
			return idem.StoreError(ctx, "consume token", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return idem.StoreError(ctx, "consume token", err)
		}
		if n == 1 {
			return nil
		}
		var (
			gotScope, usedBy []byte
			usedFence        sql.NullInt64
			expired          int
		)
		err = s.db.QueryRowContext(ctx, s.q.classify, token[:]).Scan(&gotScope, &usedBy, &usedFence, &expired)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return onetime.ErrUnknown
		case err != nil:
			return idem.StoreError(ctx, "classify token", err)
		case !bytes.Equal(gotScope, scope[:]):
			return onetime.ErrWrongScope
		case usedBy != nil && !(bytes.Equal(usedBy, use.ID[:]) && usedFence.Int64 <= fence):
			return onetime.ErrUsed
		case expired == 1:
			return onetime.ErrExpired
		case usedBy != nil && usedFence.Int64 == fence:
			// Held by this very Use: a re-take that changed no column
			// (MySQL counts changed rows, not matched ones).
			return nil
		}
		// The row now looks consumable by us: it changed between the two
		// statements (a Restore). Decide again, atomically.
	}
	return onetime.ErrUsed
}

// Restore implements onetime.Store.
func (s *Store) Restore(ctx context.Context, token onetime.Digest, use onetime.Use) error {
	if use.Fence > math.MaxInt64 {
		return onetime.ErrNotHeld
	}
	res, err := s.db.ExecContext(ctx, s.q.restore, token[:], use.ID[:], int64(use.Fence))
	if err != nil {
		return idem.StoreError(ctx, "restore token", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return idem.StoreError(ctx, "restore token", err)
	}
	if n != 1 {
		return onetime.ErrNotHeld
	}
	return nil
}

// Purge implements onetime.Store: it deletes tokens whose expiry passed at
// least grace ago, batch rows per statement, until none is left. A token's
// expiry never changes, so nothing live can be caught by it.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	if grace < 0 {
		grace = 0
	}
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.q.purge, grace.Microseconds(), batch)
		if err != nil {
			return total, idem.StoreError(ctx, "purge tokens", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, idem.StoreError(ctx, "purge tokens", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// configError is the *idem.ConfigError of package sqltoken.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "sqltoken", Field: field, Reason: reason}
}
