package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Config tunes a Store. Dialect is required, so a nil *Config is rejected.
type Config struct {
	// Dialect is the database's SQL dialect. Required.
	Dialect Dialect
	// Table is the records table; Migrate also creates Table+"_migrations".
	// A plain identifier: a letter or underscore, then letters, digits or
	// underscores, at most 48 characters. Default "idem_records". To put it
	// in another PostgreSQL schema, set the connection's search_path.
	Table string
	// MaxResult bounds a stored result in bytes; Complete with a larger one
	// fails with idem.ErrResultTooLarge and changes nothing. Default 64 MiB.
	// The server must accept a statement that large: MySQL's and MariaDB's
	// max_allowed_packet (16 MiB by default on MariaDB) must exceed it.
	MaxResult int
}

// DefaultTable is the table name used when Config.Table is empty.
const DefaultTable = "idem_records"

// maxAttempts bounds Begin's optimistic loop. Each retry means another
// caller changed the record between Begin's read and its write, so the
// loop ends after a few rounds even with hundreds of racing callers.
const maxAttempts = 32

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Table == "" {
		out.Table = DefaultTable
	}
	if out.MaxResult == 0 {
		out.MaxResult = 64 << 20
	}
	return out
}

func (c Config) validate() error {
	switch {
	case !c.Dialect.Valid():
		return &idem.ConfigError{Field: "Dialect", Reason: "required: sqlstore.Postgres, sqlstore.MySQL or sqlstore.SQLite"}
	case !checkTable(c.Table):
		return &idem.ConfigError{Field: "Table", Reason: fmt.Sprintf("%q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters)", c.Table)}
	case c.MaxResult < 0:
		return &idem.ConfigError{Field: "MaxResult", Reason: "must not be negative"}
	}
	return nil
}

// Store is an idem.Store on a SQL database. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	cfg Config
	q   queries
}

var _ idem.Store = (*Store)(nil)

// New returns a Store on db. It does no I/O: run Migrate (or `idem migrate`)
// before the first use.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlstore: nil *sql.DB")
	}
	if cfg == nil {
		return nil, &idem.ConfigError{Field: "Dialect", Reason: "required (a nil *Config has none)"}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: c, q: newQueries(c.Dialect, c.Table)}, nil
}

// Execer runs a statement. *sql.DB, *sql.Tx and *sql.Conn satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// errContention is wrapped as unavailable when Begin's loop gives up.
var errContention = fmt.Errorf("sqlstore: the record changed under %d consecutive attempts", maxAttempts)

// fail turns a driver error into the error a caller sees: the context's
// error if the caller stopped waiting, otherwise an idem.ErrUnavailable.
func fail(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return idem.Unavailable(op, err)
}

// snapshot is the record as claim or read found it.
type snapshot struct {
	found       bool
	state       int64
	fingerprint []byte
	fence       int64
	leaseUntil  int64
	expiresAt   int64
	result      []byte // only for a replay
	now         int64
}

// Begin implements idem.Store.
//
// On PostgreSQL a first claim and a replay take one statement. Elsewhere
// Begin reads first (a replay is that read alone), then inserts. A record
// that exists but is free (expired, released, or in progress with an
// expired lease) is re-claimed by a conditional UPDATE that matches only the
// version read and re-checks, by the store's clock, that it is still free;
// when another caller changed the record in between, Begin reads again.
func (s *Store) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	req, err := req.Normalize()
	if err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	d := req.Key.Digest()
	token := idem.NewToken()
	args := []any{d[:], req.Fingerprint[:], token[:], req.Lease.Microseconds(), req.Retention.Microseconds()}
	owner := func(fence int64, takeover, started bool) idem.Claim {
		return idem.Claim{
			Outcome:  idem.Acquired,
			Owner:    idem.Owner{Key: req.Key, Token: token, Fence: uint64(fence)},
			Takeover: takeover,
			Started:  takeover && started,
		}
	}
	for range maxAttempts {
		var snap snapshot
		if s.cfg.Dialect == Postgres {
			inserted, fence, sn, err := s.claimPostgres(ctx, args)
			if err != nil {
				return idem.Claim{}, fail(ctx, "begin", err)
			}
			if inserted {
				return owner(fence, false, false), nil
			}
			snap = sn
		} else {
			snap, err = s.read(ctx, args[:2])
			if err != nil {
				return idem.Claim{}, fail(ctx, "begin", err)
			}
			if !snap.found {
				fence, ok, err := s.insert(ctx, args)
				if err != nil {
					return idem.Claim{}, fail(ctx, "begin", err)
				}
				if ok {
					return owner(fence, false, false), nil
				}
				continue // a racing caller inserted it first: read it
			}
		}
		if !snap.found {
			// PostgreSQL: the conflicting row was committed after this
			// statement's snapshot, or it was purged meanwhile.
			continue
		}
		takeover := false
		switch {
		case snap.expiresAt <= snap.now || snap.state == stReleased:
			// free: acquire as new
		case string(snap.fingerprint) != string(req.Fingerprint[:]):
			return idem.Claim{Outcome: idem.Mismatch}, nil
		case snap.state == stCompleted:
			return idem.Claim{Outcome: idem.Replay, Result: snap.result}, nil
		case snap.leaseUntil > snap.now:
			return idem.Claim{Outcome: idem.InFlight, RetryAfter: time.Duration(snap.leaseUntil-snap.now) * time.Microsecond}, nil
		default:
			takeover = true // in progress, lease expired, same request
		}
		fence, started, ok, err := s.acquire(ctx, append(args, snap.fence, snap.state))
		if err != nil {
			return idem.Claim{}, fail(ctx, "begin", err)
		}
		if ok {
			return owner(fence, takeover, started), nil
		}
	}
	return idem.Claim{}, idem.Unavailable("begin", errContention)
}

func (s *Store) claimPostgres(ctx context.Context, args []any) (inserted bool, fence int64, snap snapshot, err error) {
	rows, err := s.db.QueryContext(ctx, s.q.claim.sql, args...)
	if err != nil {
		return false, 0, snap, err
	}
	defer rows.Close()
	if rows.Next() {
		var fp, result []byte
		if err := rows.Scan(&inserted, &snap.state, &fp, &snap.fence, &snap.leaseUntil, &snap.expiresAt, &result, &snap.now); err != nil {
			return false, 0, snap, err
		}
		snap.found = true
		snap.fingerprint = fp
		snap.result = result
	}
	if err := rows.Err(); err != nil {
		return false, 0, snap, err
	}
	if err := rows.Close(); err != nil {
		return false, 0, snap, err
	}
	return inserted, snap.fence, snap, nil
}

func (s *Store) read(ctx context.Context, args []any) (snapshot, error) {
	var (
		snap                                snapshot
		state, fence, leaseUntil, expiresAt sql.NullInt64
		fp, result                          []byte
	)
	err := s.db.QueryRowContext(ctx, s.q.read.sql, s.q.read.args(args...)...).
		Scan(&state, &fp, &fence, &leaseUntil, &expiresAt, &result, &snap.now)
	if err != nil {
		return snap, err
	}
	if !state.Valid {
		return snap, nil
	}
	snap.found = true
	snap.state, snap.fence, snap.leaseUntil, snap.expiresAt = state.Int64, fence.Int64, leaseUntil.Int64, expiresAt.Int64
	snap.fingerprint, snap.result = fp, result
	return snap, nil
}

// insert creates the record if none exists; ok reports whether it did.
func (s *Store) insert(ctx context.Context, args []any) (fence int64, ok bool, err error) {
	if s.cfg.Dialect == MySQL {
		return s.execFence(ctx, s.q.insert, args)
	}
	return s.queryFence(ctx, s.q.insert, args)
}

// acquire re-claims the record version it was given; ok reports whether
// the record was still that version and still free, and started whether
// it kept a previous holder's MarkStarted (a takeover).
func (s *Store) acquire(ctx context.Context, args []any) (fence int64, started, ok bool, err error) {
	q := s.q.acquire
	if s.cfg.Dialect == MySQL {
		// LAST_INSERT_ID is fence*2 + started (see the statement).
		v, ok, err := s.execFence(ctx, q, args)
		return v >> 1, v&1 == 1, ok, err
	}
	err = s.db.QueryRowContext(ctx, q.sql, q.args(args...)...).Scan(&fence, &started)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, false, nil
	case err != nil:
		return 0, false, false, err
	}
	return fence, started, true, nil
}

// queryFence runs a statement that RETURNING the new fence of the one row it
// wrote, or no row.
func (s *Store) queryFence(ctx context.Context, q query, args []any) (int64, bool, error) {
	var fence int64
	err := s.db.QueryRowContext(ctx, q.sql, q.args(args...)...).Scan(&fence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return fence, true, nil
}

// execFence runs a MySQL statement that set the new fence through
// LAST_INSERT_ID(expr).
func (s *Store) execFence(ctx context.Context, q query, args []any) (int64, bool, error) {
	res, err := s.db.ExecContext(ctx, q.sql, q.args(args...)...)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	fence, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	return fence, true, nil
}

// ownerArgs rejects an owner that cannot hold any record.
func ownerArgs(owner idem.Owner) ([]any, bool) {
	if owner.Key.IsZero() || owner.Token == (idem.Token{}) {
		return nil, false
	}
	d := owner.Key.Digest()
	return []any{d[:], owner.Token[:]}, true
}

// owned runs one owner-compare UPDATE on ex and maps "no row" to
// ErrLeaseLost.
func (s *Store) owned(ctx context.Context, ex Execer, op string, q query, args []any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := ex.ExecContext(ctx, q.sql, q.args(args...)...)
	if err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("sqlstore: %s: %w", op, err)
		}
		return fail(ctx, op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fail(ctx, op, err)
	}
	if n == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

func (s *Store) completeArgs(owner idem.Owner, result []byte) ([]any, error) {
	if len(result) > s.cfg.MaxResult {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	args, ok := ownerArgs(owner)
	if !ok {
		return nil, idem.ErrLeaseLost
	}
	if result == nil {
		result = []byte{} // completed records hold a result, possibly empty
	}
	return append(args, result), nil
}

// Complete implements idem.Store. A repeated Complete by the owner succeeds
// and keeps the result stored first.
func (s *Store) Complete(ctx context.Context, owner idem.Owner, result []byte) error {
	args, err := s.completeArgs(owner, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, s.db, "complete", s.q.complete, args)
}

// CompleteTx completes owner's claim inside the caller's transaction tx, so
// that the business change and the record's completion commit together, or
// not at all. It returns idem.ErrLeaseLost when owner no longer holds the
// claim: the caller must then roll back, because another caller may be
// executing the same operation.
//
// The statement locks the record's row until tx ends: a retry that finds
// the lease expired waits for the commit and then replays the result, or,
// after a rollback, takes the claim over. Until Commit returns, the claim
// is only in progress; if Commit fails, treat the outcome as unknown (as
// for any commit) and let the retry find out.
//
// tx must be on the same database as the Store's *sql.DB (any *sql.Tx,
// *sql.Conn or *sql.DB satisfies Execer). Keep the transaction shorter than
// the lease, or extend the lease before it runs out.
func (s *Store) CompleteTx(ctx context.Context, tx Execer, owner idem.Owner, result []byte) error {
	if tx == nil {
		return errors.New("sqlstore: CompleteTx: nil Execer")
	}
	args, err := s.completeArgs(owner, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, tx, "complete", s.q.complete, args)
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, owner idem.Owner) error {
	args, ok := ownerArgs(owner)
	if !ok {
		return idem.ErrLeaseLost
	}
	return s.owned(ctx, s.db, "release", s.q.release, args)
}

// Extend implements idem.Store. It also moves the record's expiry to at
// least the end of the new lease.
func (s *Store) Extend(ctx context.Context, owner idem.Owner, lease time.Duration) error {
	if lease < time.Millisecond {
		return &idem.ConfigError{Field: "lease", Reason: "must be at least 1ms"}
	}
	args, ok := ownerArgs(owner)
	if !ok {
		return idem.ErrLeaseLost
	}
	return s.owned(ctx, s.db, "extend", s.q.extend, append(args, lease.Microseconds()))
}

// MarkStarted implements idem.Store: one UPDATE that compares the owner's
// token and sets the record's started mark.
func (s *Store) MarkStarted(ctx context.Context, owner idem.Owner) error {
	args, ok := ownerArgs(owner)
	if !ok {
		return idem.ErrLeaseLost
	}
	return s.owned(ctx, s.db, "mark started", s.q.markStarted, args)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if key.IsZero() {
		return idem.Record{}, &idem.KeyError{Reason: "zero Key"}
	}
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	d := key.Digest()
	var (
		state, fence, created, leaseUntil, expires int64
		fp, result                                 []byte
		started                                    bool
	)
	err := s.db.QueryRowContext(ctx, s.q.get.sql, s.q.get.args(d[:])...).
		Scan(&state, &fp, &fence, &result, &created, &leaseUntil, &expires, &started)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, fail(ctx, "get", err)
	}
	rec := idem.Record{
		Digest:    d,
		State:     idem.State(state),
		Fence:     uint64(fence),
		Result:    result,
		CreatedAt: time.UnixMicro(created),
		ExpiresAt: time.UnixMicro(expires),
		Started:   started,
	}
	if rec.State < idem.StateInProgress || rec.State > idem.StateReleased {
		return idem.Record{}, fmt.Errorf("sqlstore: record %v has unknown state %d (written by a newer release?)", key, state)
	}
	copy(rec.Fingerprint[:], fp)
	if leaseUntil != 0 {
		rec.LeaseUntil = time.UnixMicro(leaseUntil)
	}
	return rec, nil
}

// Purge implements idem.Store: it deletes records that expired at least
// grace ago by the store's clock, batch rows per statement, until a
// statement deletes fewer than batch.
func (s *Store) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		return 0, errors.New("sqlstore: Purge batch must be positive")
	}
	if grace < 0 {
		return 0, errors.New("sqlstore: Purge grace must not be negative")
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := s.db.ExecContext(ctx, s.q.purge.sql, s.q.purge.args(grace.Microseconds(), int64(batch))...)
		if err != nil {
			return total, fail(ctx, "purge", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fail(ctx, "purge", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
