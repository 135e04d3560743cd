package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clock"
	"github.com/idemkit/idem/internal/sqlerr"
)

// Config tunes a Store. A nil *Config means the defaults.
type Config struct {
	// Dialect is the database's SQL dialect. Zero: the dialect of the
	// *sql.DB's driver (pgx or lib/pq: Postgres; go-sql-driver/mysql:
	// MySQL; modernc.org/sqlite, mattn/go-sqlite3 or ncruces: SQLite); New
	// rejects a driver it does not know. Set it for any other driver, or
	// a database behind a wrapping driver.
	Dialect Dialect
	// Table is the records table; Migrate also creates Table+"_migrations".
	// A plain identifier: a letter or underscore, then letters, digits or
	// underscores, at most 48 characters. Default "idem_records". To put it
	// in another PostgreSQL schema, set the connection's search_path.
	Table string
	// MaxResult bounds a stored result in bytes; Complete with a larger one
	// fails with idem.ErrResultTooLarge and changes nothing. Default 64 MiB.
	// On MySQL and MariaDB a result must also fit the server's
	// max_allowed_packet (16 MiB by default on MariaDB) with room for the
	// rest of the statement, counted as the driver sends it with
	// interpolateParams (escaped bytes take two): the Store reads the limit
	// in Migrate, or before its first large Complete, and refuses a result
	// over it with idem.ErrResultTooLarge instead of sending a statement
	// the server would answer by dropping the connection.
	MaxResult int

	// AllowAsyncReplication lets Begin grant claims while the server
	// replicates asynchronously (standbys attached, commits that do not
	// wait for any). A failover may then lose acknowledged records, and
	// each lost key runs again on its next retry. By default such a Store
	// refuses: Begin returns an error matching idem.ErrAsyncReplication
	// and idem.ErrUnavailable that names the setting to change. A single
	// server, a synchronously replicated one, and a server whose
	// replication the Store cannot read (idem.ReplicationUnknown) need
	// nothing. See Store.Replication and docs/replication.md.
	AllowAsyncReplication bool

	// SynchronousCommit (PostgreSQL only) is the synchronous_commit level
	// that every write of the Store sets for its own statement, so that a
	// DSN (options=-c synchronous_commit=off) or a role setting of off or
	// local cannot weaken it: "on" (the default: the commit waits until a
	// synchronous standby has it on disk) or "remote_apply" (until the
	// standby has applied it, so that reads there see it). Weaker levels
	// are refused. Without synchronous_standby_names on the server, both
	// mean a local flush.
	SynchronousCommit string

	// ReplicationCheck is how long Begin trusts the last reading of the
	// server's replication before it reads it again (one statement, in the
	// Begin that finds it stale). Default DefaultReplicationCheck. A
	// standby that attaches asynchronously while the Store runs is noticed
	// within this interval; claims granted before are at the risk the
	// verdict describes.
	ReplicationCheck time.Duration
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
	if out.SynchronousCommit == "" && out.Dialect == Postgres {
		out.SynchronousCommit = "on"
	}
	if out.ReplicationCheck == 0 {
		out.ReplicationCheck = DefaultReplicationCheck
	}
	return out
}

func (c Config) validate() error {
	switch {
	case !c.Dialect.Valid():
		return configError("Config.Dialect", "required: sqlstore.Postgres, sqlstore.MySQL or sqlstore.SQLite")
	case !checkTable(c.Table):
		return configError("Config.Table", fmt.Sprintf("%q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters)", c.Table))
	case c.MaxResult < 0:
		return configError("Config.MaxResult", "must not be negative")
	case c.ReplicationCheck < 0:
		return configError("Config.ReplicationCheck", "must not be negative")
	case c.Dialect != Postgres && c.SynchronousCommit != "":
		return configError("Config.SynchronousCommit", "PostgreSQL only")
	case c.Dialect == Postgres && !pinnedLevels[c.SynchronousCommit]:
		return configError("Config.SynchronousCommit", fmt.Sprintf("%q: want on or remote_apply (a weaker level acknowledges records a failover can lose)", c.SynchronousCommit))
	}
	return nil
}

// Store is an idem.Store on a SQL database. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	cfg Config
	q   queries
	sq  stepQueries // step.go

	// maxPacket is MySQL's max_allowed_packet as last read (0: not yet).
	maxPacket atomic.Int64

	// repl is the last verdict on the server's replication (nil: not
	// read yet); replSem admits one reader at a time.
	repl    atomic.Pointer[replVerdict]
	replSem chan struct{}
	// readRepl replaces readReplication in tests (nil: the real reader).
	readRepl func(ctx context.Context) (idem.Replication, error)
}

// packetRoom is what a Complete statement needs in a MySQL packet besides
// the result: its text, the key, the token and the protocol's headers.
const packetRoom = 64 << 10

var _ idem.Store = (*Store)(nil)

// New returns a Store on db. It does no I/O: run Migrate (or `idem migrate`)
// before the first use.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, configError("db", "nil *sql.DB")
	}
	c := cfg.withDefaults()
	if c.Dialect == 0 {
		d, ok := driverDialect(db)
		if !ok {
			return nil, configError("Config.Dialect", fmt.Sprintf("required: the driver %T is not one whose dialect New knows", db.Driver()))
		}
		c.Dialect = d
		if c.SynchronousCommit == "" && d == Postgres {
			c.SynchronousCommit = "on"
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Store{db: db, cfg: c, q: newQueries(c.Dialect, c.Table, c.SynchronousCommit), sq: newStepQueries(c.Dialect, c.Table, c.SynchronousCommit), replSem: make(chan struct{}, 1)}, nil
}

// Execer runs a statement. *sql.DB, *sql.Tx and *sql.Conn satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// errContention is wrapped as unavailable when Begin's loop gives up.
var errContention = fmt.Errorf("sqlstore: the record changed under %d consecutive attempts", maxAttempts)

// serializationFailure reports whether err means that the statement lost
// a race with another transaction and running it again may succeed:
// PostgreSQL's serialization failure (40001, under REPEATABLE READ or
// SERIALIZABLE) or deadlock (40P01), MySQL's deadlock (1213). Lock wait
// timeouts are not: a lock held that long is a store in trouble.
func serializationFailure(err error) bool {
	switch sqlerr.SQLState(err) {
	case "40001", "40P01":
		return true
	}
	n, ok := sqlerr.MySQLNumber(err)
	return ok && n == 1213
}

// lostRace reports whether a statement that failed with err should be run
// again (a serialization failure while the caller still waits), after a
// short random pause that lets the winner finish.
func (s *Store) lostRace(ctx context.Context, err error) bool {
	if !serializationFailure(err) || ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(time.Duration(1+mrand.IntN(5)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fail turns a driver error into the error a caller sees: the context's
// error if the caller stopped waiting, otherwise an idem.ErrUnavailable.
func fail(ctx context.Context, op string, err error) error {
	return idem.StoreError(ctx, op, err)
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
	post        int64 // PostgreSQL: the clock again, after the statement's waits
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
	if err := s.replicationGate(ctx); err != nil {
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
				if s.lostRace(ctx, err) {
					continue
				}
				return idem.Claim{}, fail(ctx, "begin", err)
			}
			if inserted {
				ok, err := s.fullLease(ctx, d[:], token[:], req.Lease, sn.now, sn.post)
				if err != nil {
					if s.lostRace(ctx, err) {
						continue
					}
					return idem.Claim{}, err
				}
				if ok {
					return owner(fence, false, false), nil
				}
				continue
			}
			snap = sn
		} else {
			snap, err = s.read(ctx, args[:2])
			if err != nil {
				if s.lostRace(ctx, err) {
					continue
				}
				return idem.Claim{}, fail(ctx, "begin", err)
			}
			if !snap.found {
				fence, ok, err := s.insert(ctx, args)
				if err != nil {
					if s.lostRace(ctx, err) {
						continue
					}
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
			return idem.Claim{Outcome: idem.InFlight, RetryAfter: clock.Micros(snap.leaseUntil - snap.now)}, nil
		default:
			takeover = true // in progress, lease expired, same request
		}
		fence, started, ok, err := s.acquire(ctx, append(args, snap.fence, snap.state), req.Lease)
		if err != nil {
			if s.lostRace(ctx, err) {
				continue
			}
			return idem.Claim{}, err
		}
		if ok {
			return owner(fence, takeover, started), nil
		}
	}
	return idem.Claim{}, idem.StoreError(ctx, "begin", errContention)
}

func (s *Store) claimPostgres(ctx context.Context, args []any) (inserted bool, fence int64, snap snapshot, err error) {
	rows, err := s.db.QueryContext(ctx, s.q.claim.sql, args...)
	if err != nil {
		return false, 0, snap, err
	}
	defer rows.Close()
	if rows.Next() {
		var fp, result []byte
		if err := rows.Scan(&inserted, &snap.state, &fp, &snap.fence, &snap.leaseUntil, &snap.expiresAt, &result, &snap.now, &snap.post); err != nil {
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
// the record was still that version and still free (and its lease full),
// and started whether it kept a previous holder's MarkStarted (a
// takeover). Errors are the ones Begin returns.
func (s *Store) acquire(ctx context.Context, args []any, lease time.Duration) (fence int64, started, ok bool, err error) {
	q := s.q.acquire
	switch s.cfg.Dialect {
	case MySQL:
		// LAST_INSERT_ID is fence*2 + started (see the statement).
		v, ok, err := s.execFence(ctx, q, args)
		if err != nil {
			return 0, false, false, fail(ctx, "begin", err)
		}
		return v >> 1, v&1 == 1, ok, nil
	case Postgres:
		var pre, post int64
		err = s.db.QueryRowContext(ctx, q.sql, q.args(args...)...).Scan(&fence, &started, &pre, &post)
		if err == nil {
			d, token := args[0].([]byte), args[2].([]byte)
			ok, err = s.fullLease(ctx, d, token, lease, pre, post)
			return fence, started, ok, err
		}
	default:
		err = s.db.QueryRowContext(ctx, q.sql, q.args(args...)...).Scan(&fence, &started)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, false, nil
	case err != nil:
		return 0, false, false, fail(ctx, "begin", err)
	}
	return fence, started, true, nil
}

// fullLease makes sure that a claim Begin is about to report carries its
// whole lease measured after the statement's waits. PostgreSQL computes the
// lease when the statement starts (pre); if the statement then waited for a
// row lock long enough to spend a noticeable part of it (post - pre), the
// lease is renewed from now, in the same owner-compare UPDATE as Extend.
// ok is false when the claim was taken over in between (its lease had run
// out during the wait): Begin then starts again and never reports it.
func (s *Store) fullLease(ctx context.Context, d, token []byte, lease time.Duration, pre, post int64) (ok bool, err error) {
	if post-pre <= lease.Microseconds()/50 {
		return true, nil
	}
	err = s.owned(ctx, s.db, "begin", s.q.extend, []any{d, token, lease.Microseconds()})
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
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

// packetTooLarge reports whether err is MySQL's refusal of a statement
// larger than max_allowed_packet: the server's ER_NET_PACKET_TOO_LARGE
// (1153) or the driver's own check (go-sql-driver's ErrPktTooLarge).
func packetTooLarge(err error) bool {
	if n, ok := sqlerr.MySQLNumber(err); ok && n == 1153 {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.HasPrefix(e.Error(), "packet for query is too large") {
			return true
		}
	}
	return false
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
	for attempt := 1; err != nil && ex == Execer(s.db) && attempt < maxAttempts && s.lostRace(ctx, err); attempt++ {
		// Each statement is its own transaction: running it again is
		// safe, and the owner check decides afresh.
		res, err = ex.ExecContext(ctx, q.sql, q.args(args...)...)
	}
	if err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("sqlstore: %s: %w", op, err)
		}
		if packetTooLarge(err) {
			return fmt.Errorf("%w: the server refused the statement as larger than its max_allowed_packet: %w", idem.ErrResultTooLarge, err)
		}
		if ex != Execer(s.db) && serializationFailure(err) && ctx.Err() == nil {
			// Inside the caller's transaction (CompleteTx): the whole
			// transaction lost a race and must be run again by the
			// caller; the store is not unavailable.
			return fmt.Errorf("sqlstore: %s: the transaction must be retried: %w", op, err)
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

// MaxResult returns the largest result Complete accepts: Config.MaxResult,
// capped on MySQL by the server's max_allowed_packet less room for the
// statement once the Store has read it (Migrate does, and so does the
// first large Complete). On MySQL the cap applies to the result as
// statement text, where escaped bytes count twice.
func (s *Store) MaxResult() int {
	limit := s.cfg.MaxResult
	if p := s.maxPacket.Load(); p > 0 {
		limit = min(limit, int(max(p-packetRoom, 0)))
	}
	return limit
}

// learnPacket reads the server's max_allowed_packet (MySQL only).
func (s *Store) learnPacket(ctx context.Context) error {
	if s.cfg.Dialect != MySQL {
		return nil
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&n); err != nil {
		return err
	}
	s.maxPacket.Store(n)
	return nil
}

// mysqlEscaped is the size of b in a MySQL statement text: the bytes that
// go-sql-driver's interpolateParams escapes with a backslash take two.
func mysqlEscaped(b []byte) int {
	n := len(b)
	for _, c := range b {
		switch c {
		case 0, '\n', '\r', '\\', '\'', '"', 0x1a:
			n++
		}
	}
	return n
}

func (s *Store) completeArgs(ctx context.Context, owner idem.Owner, result []byte) ([]any, error) {
	if len(result) > s.cfg.MaxResult {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	if s.cfg.Dialect == MySQL && len(result) > 512<<10 {
		if s.maxPacket.Load() == 0 {
			// A failure here leaves the server's own refusal (mapped to
			// ErrResultTooLarge by owned) as the backstop.
			_ = s.learnPacket(ctx)
		}
		if limit, size := s.MaxResult(), mysqlEscaped(result); size > limit {
			return nil, fmt.Errorf("%w: %d bytes (%d as statement text), over the server's max_allowed_packet less %d bytes for the statement", idem.ErrResultTooLarge, len(result), size, packetRoom)
		}
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
	args, err := s.completeArgs(ctx, owner, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, s.db, "complete", s.q.complete, args)
}

// Hold implements idem.Store: Complete that also sets the record's held
// mark, in the same UPDATE. A repeated Hold or Complete by the owner
// succeeds and keeps what was stored first.
func (s *Store) Hold(ctx context.Context, owner idem.Owner, result []byte) error {
	args, err := s.completeArgs(ctx, owner, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, s.db, "hold", s.q.hold, args)
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
//
// On PostgreSQL the record is as durable as tx's commit: the transaction's
// own synchronous_commit applies (the Store's other writes pin
// Config.SynchronousCommit; this one does not change the caller's
// transaction). When the DSN or the role may set a weaker level, call
// PinSynchronousCommit(ctx, tx, "on") in the transaction.
func (s *Store) CompleteTx(ctx context.Context, tx Execer, owner idem.Owner, result []byte) error {
	if tx == nil {
		return configError("tx", "nil Execer")
	}
	args, err := s.completeArgs(ctx, owner, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, tx, "complete", s.q.completeTx, args)
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
		return configError("lease", "must be at least 1ms")
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
	return s.Lookup(ctx, key.Digest())
}

// Lookup implements idem.Resolver: Get by digest.
func (s *Store) Lookup(ctx context.Context, d idem.Digest) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
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
	if rec.State < idem.StateInProgress || rec.State > idem.StateHeld {
		return idem.Record{}, fmt.Errorf("sqlstore: record %v has unknown state %d (written by a newer release?)", d, state)
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
		return 0, configError("batch", "must be positive")
	}
	if grace < 0 {
		return 0, configError("grace", "must not be negative")
	}
	var total int64
	lost := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := s.db.ExecContext(ctx, s.q.purge.sql, s.q.purge.args(grace.Microseconds(), int64(batch))...)
		if err != nil {
			if lost++; lost < maxAttempts && s.lostRace(ctx, err) {
				continue // a record changed under the batch: run it again
			}
			return total, fail(ctx, "purge", err)
		}
		lost = 0
		n, err := res.RowsAffected()
		if err != nil {
			return total, fail(ctx, "purge", err)
		}
		total += n
		if n < int64(batch) {
			// The recovery points of the records gone (package step).
			return total, s.purgeSteps(ctx, grace.Microseconds(), batch)
		}
	}
}

// configError is the *idem.ConfigError of package sqlstore.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "sqlstore", Field: field, Reason: reason}
}
