package pglock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/sqlerr"
	"github.com/idemkit/idem/lock"

	"github.com/idemkit/idem"
)

// MaxNameLen bounds lock names (bytes).
const MaxNameLen = 255

// maxWaitSlice bounds one server-side wait of Acquire (lock_timeout). Between
// slices Acquire looks at its context, so a cancelled waiter leaves no
// backend waiting in PostgreSQL for longer than this.
const maxWaitSlice = time.Second

// Config tunes a Locker. The zero value (or nil) gives the defaults.
type Config struct {
	// Namespace is hashed together with each lock name into the advisory
	// lock key (see Key), so that two applications sharing a database do not
	// contend on equal names. Default "idem".
	Namespace string

	// FenceSequence names the sequence that fences are drawn from. Default
	// "idem_lock_fence"; create it with Migrate. May be schema-qualified.
	FenceSequence string

	// NoFence turns fences off: leases carry Fence 0 and no sequence is used.
	NoFence bool

	// CheckInterval is how often a lease's watchdog pings the connection that
	// holds the lock; when the ping fails the lease's context is cancelled.
	// Default 1s; at least 10ms.
	CheckInterval time.Duration

	// WaitTimeout bounds how long Acquire waits for a held lock, separately
	// from the context (which also bounds the lease). 0 waits until the
	// context is done.
	WaitTimeout time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Namespace == "" {
		out.Namespace = "idem"
	}
	if out.FenceSequence == "" {
		out.FenceSequence = "idem_lock_fence"
	}
	if out.CheckInterval == 0 {
		out.CheckInterval = time.Second
	}
	return out
}

func (c Config) validate() error {
	switch {
	case c.CheckInterval < 10*time.Millisecond:
		return configError("Config.CheckInterval", fmt.Sprintf("%v is below 10ms", c.CheckInterval))
	case c.WaitTimeout < 0:
		return configError("Config.WaitTimeout", fmt.Sprintf("%v is negative", c.WaitTimeout))
	case !c.NoFence && !isIdent(c.FenceSequence):
		return configError("Config.FenceSequence", fmt.Sprintf("%q is not a plain [schema.]name of letters, digits and _", c.FenceSequence))
	}
	return nil
}

// isIdent accepts name or schema.name made of ASCII letters, digits and '_'
// (not starting with a digit).
func isIdent(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for i, c := range p {
			letter := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			digit := c >= '0' && c <= '9'
			if !letter && (!digit || i == 0) {
				return false
			}
		}
	}
	return true
}

// Locker hands out PostgreSQL advisory locks. It is safe for concurrent use.
type Locker struct {
	db  *sql.DB
	cfg Config

	qTry, qWait     string // session level, on a pinned connection
	qTryTx, qWaitTx string // transaction level, in the caller's *sql.Tx
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker on db, a pool opened with the "pgx" driver
// (github.com/jackc/pgx/v5/stdlib) or another PostgreSQL database/sql
// driver. cfg may be nil.
//
// Session-level locks (Acquire, TryAcquire) pin one pooled connection per
// lease, and a waiting Acquire holds one too: bound the pool with
// db.SetMaxOpenConns. They need a direct connection or a session-mode
// pooler; behind PgBouncer in transaction mode use AcquireTx.
func New(db *sql.DB, cfg *Config) (*Locker, error) {
	if db == nil {
		return nil, configError("db", "nil *sql.DB")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	l := &Locker{db: db, cfg: c}
	// Subqueries with OFFSET 0 are evaluated before the outer select list, so
	// the fence is drawn only after the lock is granted: a later holder of
	// the same lock always draws a larger number.
	//
	// The transaction-level forms lock only in a READ COMMITTED transaction:
	// the innermost subquery (readCommitted) yields no row otherwise, so the
	// lock function is never called and the statement returns no row.
	if c.NoFence {
		l.qTry = `SELECT pg_try_advisory_lock($1), NULL::bigint`
		l.qWait = `SELECT 0::bigint FROM (SELECT pg_advisory_lock($1) FROM (SELECT set_config('lock_timeout', $2, true) OFFSET 0) a OFFSET 0) b`
		l.qTryTx = `SELECT l, NULL::bigint FROM (SELECT pg_try_advisory_xact_lock($1) AS l FROM ` + readCommitted + `) a`
		l.qWaitTx = `SELECT 0::bigint FROM (SELECT pg_advisory_xact_lock($1) FROM ` + readCommitted + `) a`
	} else {
		l.qTry = `SELECT l, CASE WHEN l THEN nextval($2::regclass) END FROM (SELECT pg_try_advisory_lock($1) AS l OFFSET 0) a`
		l.qWait = `SELECT nextval($3::regclass) FROM (SELECT pg_advisory_lock($1) FROM (SELECT set_config('lock_timeout', $2, true) OFFSET 0) a OFFSET 0) b`
		l.qTryTx = `SELECT l, CASE WHEN l THEN nextval($2::regclass) END FROM (SELECT pg_try_advisory_xact_lock($1) AS l FROM ` + readCommitted + ` OFFSET 0) a`
		l.qWaitTx = `SELECT nextval($2::regclass) FROM (SELECT pg_advisory_xact_lock($1) FROM ` + readCommitted + ` OFFSET 0) a`
	}
	return l, nil
}

// Migrate creates the fence sequence if it does not exist. It does nothing
// when fences are off.
func (l *Locker) Migrate(ctx context.Context) error {
	if l.cfg.NoFence {
		return nil
	}
	if _, err := l.db.ExecContext(ctx, "CREATE SEQUENCE IF NOT EXISTS "+l.cfg.FenceSequence); err != nil {
		return fmt.Errorf("pglock: create fence sequence %s: %w", l.cfg.FenceSequence, err)
	}
	return nil
}

// Key is the advisory lock key of name in namespace: the first 8 bytes of
// SHA-256(namespace, 0x00, name), big-endian, as a signed bigint. It is what
// pg_locks shows as classid (high 32 bits) and objid (low 32 bits) with
// objsubid 1.
//
// Two different names collide with probability 2^-64 per pair; a collision
// only makes them exclude each other (never lets two holders of one name
// in). Keys of the two-int4 advisory lock functions never meet these.
func Key(namespace, name string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}

// Key is Key(Config.Namespace, name).
func (l *Locker) Key(name string) int64 { return Key(l.cfg.Namespace, name) }

func checkName(name string) error {
	if name == "" {
		return errors.New("pglock: empty lock name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("pglock: lock name of %d bytes exceeds %d", len(name), MaxNameLen)
	}
	return nil
}

// Acquire takes a session-level advisory lock on a connection it pins from
// the pool, waiting (server side, in slices of at most a second) until it is
// granted, ctx is done or Config.WaitTimeout runs out; then the error wraps
// lock.ErrNotAcquired and the context's cause. A failure to reach the
// server ends the call at once, with an error wrapping lock.ErrUnavailable
// (as TryAcquire's does). A server that stops answering (a black-holed
// connection) is ErrUnavailable too, with ErrNotAcquired, when the wait
// runs out: each server-side wait ends a fifth of the time left (10ms to
// 250ms) before the deadline, so a call still unanswered at the deadline,
// or a connection the pool could open but did not get, was not a holder.
// Likewise a wait spent getting a connection the pool could open, ending
// before the lock was asked for, is ErrUnavailable with ErrNotAcquired.
//
// The lease keeps the connection until Release. Always Release it.
func (l *Locker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, name, true)
}

// TryAcquire makes one attempt (pg_try_advisory_lock); an error wrapping
// lock.ErrNotAcquired means another session holds the lock.
func (l *Locker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.acquire(ctx, name, false)
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool) (lock.Lease, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	key := l.Key(name)
	wctx := ctx
	if wait && l.cfg.WaitTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, l.cfg.WaitTimeout)
		defer cancel()
	}
	conn, err := l.db.Conn(wctx)
	if err != nil {
		if wctx.Err() != nil && l.poolHasRoom() {
			// No connection came within the whole wait although the
			// pool may open one: the server never finished a handshake.
			err = fmt.Errorf("%w: no connection within the wait: %w", lock.ErrUnavailable, err)
		} else {
			err = unavailable(wctx, err)
		}
		return nil, l.waitErr(wctx, name, fmt.Errorf("pglock: acquire %q: get connection: %w", name, err))
	}
	// The server's wait ends a grace before the context, so that the
	// connection survives a timed-out wait, and so that a call the context
	// cuts off is one the server never answered (see below). The grace is
	// fixed once for the whole wait: recomputed from what is left after
	// each slice, it shrank to 10ms for the last slices, and a loaded
	// client that read the server's lock_timeout answer later than that
	// reported a held lock as an unavailable server.
	var (
		serverEnd time.Time
		asked     bool // a wait slice was sent: the lock was asked for
	)
	if dl, ok := wctx.Deadline(); ok && wait {
		left := time.Until(dl)
		serverEnd = dl.Add(-min(max(left/5, 10*time.Millisecond), 250*time.Millisecond))
	}
	for {
		var (
			got   bool
			fence sql.NullInt64
		)
		if !wait {
			err = conn.QueryRowContext(wctx, l.qTry, l.args(key)...).Scan(&got, &fence)
		} else {
			slice := maxWaitSlice
			if !serverEnd.IsZero() {
				slice = min(slice, time.Until(serverEnd))
			}
			if slice < time.Millisecond {
				_ = conn.Close()
				if !asked && l.poolHasRoom() {
					// The whole wait went on getting a connection the pool
					// could open: the server was slow, nobody was seen
					// holding the lock.
					return nil, fmt.Errorf("pglock: acquire %q: %w: %w: the wait ended before the lock was asked for (getting a connection took it)", name, lock.ErrNotAcquired, lock.ErrUnavailable)
				}
				return nil, fmt.Errorf("pglock: acquire %q: %w: %w", name, lock.ErrNotAcquired, context.DeadlineExceeded)
			}
			asked = true
			ms := strconv.FormatInt(slice.Milliseconds(), 10) + "ms"
			err = conn.QueryRowContext(wctx, l.qWait, l.args(key, ms)...).Scan(&fence)
			got = err == nil
			if sqlState(err) == "55P03" { // lock_not_available: the slice ended
				if wctx.Err() != nil {
					_ = conn.Close()
					return nil, l.waitErr(wctx, name, nil)
				}
				continue
			}
		}
		if err != nil {
			// The lock may have been granted just as the call failed: never
			// hand this connection back to the pool.
			discard(conn)
			if errors.Is(wctx.Err(), context.DeadlineExceeded) {
				// The server's own wait ends before the deadline: a
				// call still unanswered at the deadline is a server
				// (or a connection) that does not answer, not a holder.
				return nil, l.waitErr(wctx, name, fmt.Errorf("pglock: acquire %q: %w: no reply before the deadline: %w", name, lock.ErrUnavailable, err))
			}
			if sqlState(err) == "42P01" {
				err = fmt.Errorf("%w (create the fence sequence with (*pglock.Locker).Migrate)", err)
			}
			return nil, l.waitErr(wctx, name, fmt.Errorf("pglock: acquire %q: %w", name, unavailable(wctx, err)))
		}
		if !got {
			_ = conn.Close()
			return nil, fmt.Errorf("pglock: acquire %q: %w", name, lock.ErrNotAcquired)
		}
		return l.newLease(ctx, conn, name, key, lock.Fence(fence.Int64)), nil
	}
}

func (l *Locker) args(key int64, more ...any) []any {
	a := append([]any{key}, more...)
	if !l.cfg.NoFence {
		a = append(a, l.cfg.FenceSequence)
	}
	return a
}

// waitErr reports a wait that ended with its context as lock.ErrNotAcquired
// plus the cause; other failures as they are.
func (l *Locker) waitErr(wctx context.Context, name string, err error) error {
	if wctx.Err() == nil {
		return err
	}
	if err == nil {
		return fmt.Errorf("pglock: acquire %q: %w: %w", name, lock.ErrNotAcquired, context.Cause(wctx))
	}
	return fmt.Errorf("%w: %w (%w)", lock.ErrNotAcquired, context.Cause(wctx), err)
}

// poolHasRoom reports whether the pool could open another connection (it
// is not at MaxOpenConns), so that waiting for one is waiting for the
// server, not for another session's lock to be released.
func (l *Locker) poolHasRoom() bool {
	st := l.db.Stats()
	return st.MaxOpenConnections == 0 || st.OpenConnections < st.MaxOpenConnections
}

// unavailable marks err with lock.ErrUnavailable when it says the server
// could not be reached (and not that ctx ended).
func unavailable(ctx context.Context, err error) error {
	if ctx.Err() == nil && sqlerr.IsConnection(err) {
		return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
	}
	return err
}

// discard closes a pinned connection instead of returning it to the pool:
// returning driver.ErrBadConn from Raw makes database/sql close it. A
// session-level lock the connection might still hold ends with the session.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close() // sql.ErrConnDone after Raw; harmless
}

// sqlState returns the SQLSTATE of a PostgreSQL error (pgconn.PgError and
// lib/pq errors both have a SQLState method), or "".
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// readCommitted is a subquery with one row in a READ COMMITTED (or READ
// UNCOMMITTED, which PostgreSQL runs as READ COMMITTED) transaction and none
// otherwise.
const readCommitted = `(SELECT 1 WHERE current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') OFFSET 0) rc`

// ErrIsolation is returned by AcquireTx and TryAcquireTx in a REPEATABLE
// READ or SERIALIZABLE transaction. There the transaction's snapshot is
// taken by its first statement, before the lock is granted (or, if the lock
// is not the first statement, earlier still), so the double check inside the
// lock would not see what the previous holder committed just before it
// released: both holders would act. Take the lock in a READ COMMITTED
// transaction, or hold a session-level lock (Acquire) around the
// REPEATABLE READ transaction: its snapshot then starts after the grant.
var ErrIsolation = errors.New("pglock: transaction-level lock refused: the transaction is REPEATABLE READ or SERIALIZABLE, " +
	"its snapshot predates the lock (use READ COMMITTED, or a session lock around the transaction)")

// Tx is what AcquireTx needs: *sql.Tx satisfies it. Pass a transaction, never
// a *sql.DB or *sql.Conn outside one: a transaction-level lock taken outside
// a transaction block ends with its statement.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// AcquireTx takes a transaction-level advisory lock (pg_advisory_xact_lock)
// in tx, waiting until it is granted or ctx is done, and returns the fence.
// The lock is released by COMMIT or ROLLBACK, never earlier; it is safe
// behind PgBouncer in transaction mode. Taking the same name twice in one
// transaction succeeds at once (advisory locks are reentrant).
//
// tx must be READ COMMITTED (PostgreSQL's default). In a REPEATABLE READ or
// SERIALIZABLE transaction AcquireTx takes no lock and returns an error
// wrapping ErrIsolation: such a transaction reads from a snapshot taken
// before the lock was granted, so re-reading the state inside the lock
// would miss what the previous holder committed.
//
// To bound the wait without losing the connection, run
// "SET LOCAL lock_timeout = '2s'" in tx first: a timeout then fails the
// statement (SQLSTATE 55P03) and the transaction must roll back. When ctx
// ends the wait, pgx closes the connection and the transaction is lost.
func (l *Locker) AcquireTx(ctx context.Context, tx Tx, name string) (lock.Fence, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, configError("tx", "nil Tx")
	}
	var fence int64
	if err := tx.QueryRowContext(ctx, l.qWaitTx, l.args(l.Key(name))...).Scan(&fence); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, isolationErr(ctx, tx, "acquire", name)
		}
		if sqlState(err) == "55P03" {
			return 0, fmt.Errorf("pglock: acquire %q in tx: %w: %w", name, lock.ErrNotAcquired, err)
		}
		return 0, fmt.Errorf("pglock: acquire %q in tx: %w", name, err)
	}
	return lock.Fence(fence), nil
}

// TryAcquireTx is AcquireTx without waiting (pg_try_advisory_xact_lock); an
// error wrapping lock.ErrNotAcquired means another session holds the lock.
// Like AcquireTx it refuses a REPEATABLE READ or SERIALIZABLE transaction
// (ErrIsolation).
func (l *Locker) TryAcquireTx(ctx context.Context, tx Tx, name string) (lock.Fence, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, configError("tx", "nil Tx")
	}
	var (
		got   bool
		fence sql.NullInt64
	)
	if err := tx.QueryRowContext(ctx, l.qTryTx, l.args(l.Key(name))...).Scan(&got, &fence); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, isolationErr(ctx, tx, "try acquire", name)
		}
		return 0, fmt.Errorf("pglock: try acquire %q in tx: %w", name, err)
	}
	if !got {
		return 0, fmt.Errorf("pglock: try acquire %q in tx: %w", name, lock.ErrNotAcquired)
	}
	return lock.Fence(fence.Int64), nil
}

// isolationErr builds the error for a refused transaction-level lock. The
// refusal was decided by the statement; this read only names the level.
func isolationErr(ctx context.Context, tx Tx, op, name string) error {
	var level string
	if err := tx.QueryRowContext(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level); err != nil {
		level = "unknown: " + err.Error()
	}
	return fmt.Errorf("pglock: %s %q in tx (isolation %s): %w", op, name, level, ErrIsolation)
}

// configError is the *idem.ConfigError of package pglock.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "pglock", Field: field, Reason: reason}
}
