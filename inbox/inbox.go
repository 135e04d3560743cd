package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
)

// Outcome is what Process did with a delivery.
type Outcome uint8

const (
	// Processed: the handler ran and its transaction committed.
	Processed Outcome = iota + 1
	// Duplicate: already processed before: the handler was skipped; the
	// caller should ack.
	Duplicate
)

// String returns "processed", "duplicate" or "Outcome(n)".
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Handler does the business work of one message inside tx, the transaction
// that also holds the message's dedup row. It must do all its database work
// through tx and must not commit or roll it back. Returning an error rolls
// back both, so the redelivery runs the handler again.
type Handler func(ctx context.Context, tx *sql.Tx) error

// DefaultTable is the dedup table's default name.
const DefaultTable = "idem_inbox"

// DefaultRetention is the default age after which a Sweeper deletes dedup rows.
const DefaultRetention = 7 * 24 * time.Hour

// Config configures an Inbox. The zero value of every field except Dialect
// means its default.
type Config struct {
	Dialect Dialect // required
	Table   string  // dedup table name, default "idem_inbox"; may be "schema.table" on PostgreSQL and MySQL

	// Retention is how long a dedup row is kept (used by Sweeper). It must
	// cover the broker's whole redelivery horizon: a message redelivered after
	// its row was swept is processed again. Payment callbacks: at least 7
	// days. Default 7 days.
	Retention time.Duration

	// FastPath, when set, is asked before the database (see FastPath).
	FastPath FastPath

	// Bloom, when set, enables the in-process Bloom prefilter: IDs this
	// process has not seen recently skip the FastPath lookup and go straight
	// to the insert; IDs it may have seen are looked up first (in the
	// FastPath, or without one by a read of the dedup row, which answers a
	// duplicate without a write transaction).
	Bloom *BloomConfig

	// Namespace names the database the dedup table lives in, for the
	// FastPath keys: inboxes that share one Redis but not one database must
	// never share fast-path entries (tenant B's new message would be skipped
	// because tenant A processed one with the same ID). Empty (the default):
	// the inbox asks the database once, at the first fast-path use, and
	// uses its name — PostgreSQL: database, schema and table; MySQL:
	// database and table; SQLite: the database file and table — skipping
	// the fast path until it knows. Set it when two database servers hold
	// databases of the same name behind one Redis.
	Namespace string

	// FastPathBackoff: after a fast-path call fails, Process skips the fast
	// path (and uses the database alone) for this long, then lets one call
	// probe it; a successful probe brings it back. Default 1s. An outage
	// (a hung or unreachable Redis) thus costs one fast-path timeout per
	// FastPathBackoff, not one per message.
	FastPathBackoff time.Duration

	// TxOptions are the options of the transactions Process begins (nil:
	// the driver's default isolation). Under PostgreSQL REPEATABLE READ or
	// SERIALIZABLE a concurrent duplicate gets a serialization failure;
	// Process runs the transaction again (see Process). ReadOnly is refused.
	TxOptions *sql.TxOptions

	// EarlyRetries is how many more times Process runs a message whose
	// handler reported that it came too early (an error wrapping ErrNotYet,
	// such as watermark.ErrGap in Strict mode), waiting EarlyBackoff,
	// doubled each time, in between; each wait is counted in
	// Stats.EarlyRetries. Default 4; negative means none. When the message
	// is still early, Process returns the error: the broker should
	// redeliver it later, and an adapter must not count it as poison.
	EarlyRetries int
	// EarlyBackoff is the first wait of EarlyRetries; default 50ms.
	EarlyBackoff time.Duration

	// Logger receives fast-path degradation warnings; default slog.Default().
	// It never receives message contents, only consumer names.
	Logger *slog.Logger

	now func() time.Time // tests
}

func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FastPathBackoff == 0 {
		c.FastPathBackoff = DefaultFastPathBackoff
	}
	switch {
	case c.EarlyRetries == 0:
		c.EarlyRetries = 4
	case c.EarlyRetries < 0:
		c.EarlyRetries = 0
	}
	if c.EarlyBackoff == 0 {
		c.EarlyBackoff = 50 * time.Millisecond
	}
	if c.Bloom != nil {
		b := c.Bloom.withDefaults()
		c.Bloom = &b
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if !c.Dialect.Valid() {
		return configError("Config.Dialect", fmt.Sprintf("required (inbox.Postgres, inbox.MySQL or inbox.SQLite), got %v", c.Dialect))
	}
	if err := sqldialect.CheckIdent(c.Table, c.Dialect != SQLite); err != nil {
		return configError("Config.Table", err.Error())
	}
	if name := c.Table[strings.LastIndexByte(c.Table, '.')+1:]; len(name) > 48 {
		// "<name>_migrations" and "<name>_created_at_idx" must fit 63/64 bytes.
		return configError("Config.Table", fmt.Sprintf("name %q is longer than 48 bytes", name))
	}
	if c.Retention < 0 {
		return configError("Config.Retention", fmt.Sprintf("%v is negative", c.Retention))
	}
	if c.FastPathBackoff < 0 {
		return configError("Config.FastPathBackoff", fmt.Sprintf("%v is negative", c.FastPathBackoff))
	}
	if c.EarlyBackoff < 0 {
		return configError("Config.EarlyBackoff", fmt.Sprintf("%v is negative", c.EarlyBackoff))
	}
	if c.TxOptions != nil && c.TxOptions.ReadOnly {
		return configError("Config.TxOptions", "ReadOnly: the inbox writes its dedup row in the transaction")
	}
	if c.Bloom != nil {
		if err := c.Bloom.validate(); err != nil {
			return err
		}
	}
	return nil
}

// Inbox makes a consumer's message handling idempotent: each (consumer,
// message ID) pair commits its handler's work at most once. It is safe for
// concurrent use.
type Inbox struct {
	db    *sql.DB
	cfg   Config
	stmt  statements
	fast  FastPath
	bloom *bloomRing
	brk   breaker
	ns    namespace

	stats struct {
		processed, duplicates, fastDuplicates, probeDuplicates, bloomNew, fastErrors, fastSkipped, retries, txRetries, early atomic.Uint64
	}
}

// New returns an Inbox over db. cfg may not be nil: Dialect is required.
// Call Migrate once (at start-up, or from a deploy step) to create the table.
func New(db *sql.DB, cfg *Config) (*Inbox, error) {
	if db == nil {
		return nil, configError("db", "nil *sql.DB")
	}
	if cfg == nil {
		return nil, configError("Config.Dialect", "required (a nil *Config has none)")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	ib := &Inbox{db: db, cfg: c, stmt: buildStatements(c.Dialect, c.Table), fast: c.FastPath}
	ib.brk = breaker{backoff: c.FastPathBackoff, now: c.now}
	if c.Namespace != "" {
		ns := "namespace\x00" + c.Namespace
		ib.ns.value.Store(&ns)
	}
	if c.Bloom != nil {
		ib.bloom = newBloomRing(*c.Bloom, c.now)
	}
	return ib, nil
}

// Table returns the dedup table's name.
func (ib *Inbox) Table() string { return ib.cfg.Table }

// Dialect returns the inbox's dialect.
func (ib *Inbox) Dialect() Dialect { return ib.cfg.Dialect }

// maxAttempts bounds the runs of one message's transaction by Process when
// the database aborts it for a concurrency conflict (deadlock, serialization
// failure, SQLite busy): the database rolled it back entirely, so running it
// again is what the redelivery would do, only sooner.
const maxAttempts = 4

// Process handles one delivery of messageID for consumer, exactly once:
//
//  1. begin a transaction (Config.TxOptions); its first statement inserts
//     the dedup row (INSERT … ON CONFLICT DO NOTHING / INSERT IGNORE) and
//     looks at the rows affected;
//  2. 0 rows: the message was processed before → roll back, return Duplicate
//     without running h;
//  3. 1 row: run h in the same transaction and commit; return Processed.
//
// If h fails (or panics), the transaction rolls back and takes the dedup row
// with it, so the redelivery runs h again; the error is returned wrapped
// (errors.Is works for h's error and for ErrHandler) with Outcome 0.
//
// Process runs the transaction again by itself, a bounded number of times,
// when the database aborted it for a deadlock or a serialization failure
// (maxAttempts in all, counted in Stats.TxRetries), and when h returned an
// error wrapping ErrNotYet (Config.EarlyRetries, with backoff). h must
// therefore be safe to run again after its transaction rolled back — which
// it must be anyway, since the broker redelivers.
//
// Every other error is returned with its cause wrapped (%w): an unreachable
// database, a reset connection, a lock timeout reach the caller as the
// driver reported them, so an adapter can tell an outage (redeliver, do not
// count it against the message) from a bad message.
//
// A concurrent delivery of the same message blocks on the first one's
// uncommitted row, then returns Duplicate if the first committed, or runs h
// if it rolled back. Ack the broker for Processed and Duplicate; nack (or let
// it redeliver) on error. An error from the commit itself leaves the outcome
// unknown; the redelivery finds out.
func (ib *Inbox) Process(ctx context.Context, consumer, messageID string, h Handler) (Outcome, error) {
	if h == nil {
		return 0, configError("h", "nil Handler")
	}
	return ib.process(ctx, consumer, messageID, func(ctx context.Context, k key) (Outcome, error) { return ib.attempt(ctx, k, h) })
}

// Claim is the dedup insert of one message, for an engine that sends it in
// the same round trip as the business statements (ProcessEngine; package
// pgxinbox queues it in one pgx.Batch with them). Unlike Process's insert
// it has no ON CONFLICT clause: a duplicate fails it with a unique
// violation (PostgreSQL SQLSTATE 23505 on Table), which aborts the
// transaction, so the business statements sent after it in the same
// transaction are never executed for a duplicate: the storage engine
// decides, not a check in Go.
type Claim struct {
	SQL  string // INSERT INTO <Table> (consumer, message_id, created_at) VALUES (…)
	Args []any  // the consumer and the stored message ID (StoredMessageID)
}

// Engine runs one attempt of a message's transaction for ProcessEngine: it
// begins a transaction, executes c.SQL with c.Args as its first statement,
// then the business work, and commits only if every statement succeeded.
// It returns Duplicate when c failed with a unique violation on the dedup
// table (nothing committed), Processed after the commit, or an error with
// nothing committed (or, for a failed commit, the outcome unknown). An error
// of the business work must wrap ErrHandler (fmt.Errorf("%w: %w",
// inbox.ErrHandler, err)); every other error is treated as the database's.
type Engine func(ctx context.Context, c Claim) (Outcome, error)

// ProcessEngine is Process with the transaction run by run instead of
// database/sql: the Bloom prefilter, the fast path, the counters and the
// retries (deadlock, serialization failure, ErrNotYet) are Process's.
// Package pgxinbox's ProcessBatch is the engine it was made for: BEGIN,
// the claim and the business statements in one pgx.Batch, so that the
// dedup row costs no round trip of its own. run is trusted to keep
// Engine's contract; the guarantee (a duplicate never commits its effect)
// rests on it committing nothing after a failed claim.
func (ib *Inbox) ProcessEngine(ctx context.Context, consumer, messageID string, run Engine) (Outcome, error) {
	if run == nil {
		return 0, configError("run", "nil Engine")
	}
	return ib.process(ctx, consumer, messageID, func(ctx context.Context, k key) (Outcome, error) {
		out, err := run(ctx, Claim{SQL: ib.stmt.claim, Args: []any{k.consumer, k.stored}})
		switch {
		case err != nil && !errors.Is(err, ErrHandler):
			return 0, storeErr(err)
		case err != nil:
			return 0, err
		case out != Processed && out != Duplicate:
			return 0, fmt.Errorf("inbox: engine returned outcome %v and no error", out)
		}
		return out, nil
	})
}

func (ib *Inbox) process(ctx context.Context, consumer, messageID string, attempt func(context.Context, key) (Outcome, error)) (Outcome, error) {
	k, err := ib.makeKey(consumer, messageID)
	if err != nil {
		return 0, err
	}

	// Layer 1: Bloom. "Definitely new" skips every lookup.
	maybeSeen := true
	if ib.bloom != nil {
		maybeSeen = ib.bloom.mayContain(k.digest[:])
		if !maybeSeen {
			ib.stats.bloomNew.Add(1)
		}
	}

	// Layer 2: fast path, or (Bloom without fast path) one read of the row.
	var token, fkey string
	if ib.fast != nil {
		fkey = ib.fastKey(ctx, consumer, k)
	}
	if maybeSeen && fkey != "" && ib.fastAllowed() {
		st, tok, err := ib.fast.Claim(ctx, fkey)
		switch {
		case err != nil:
			ib.fastFailed(ctx, consumer, "claim", err)
		case st == FastDone:
			ib.fastOK()
			ib.stats.fastDuplicates.Add(1)
			ib.stats.duplicates.Add(1)
			return Duplicate, nil
		case st == FastClaimed:
			ib.fastOK()
			token = tok
		default: // FastBusy: the database's row lock sorts it out.
			ib.fastOK()
		}
	} else if maybeSeen && ib.fast == nil && ib.bloom != nil {
		// A committed row is decisive; absence is not (the insert decides).
		var one int
		err := ib.db.QueryRowContext(ctx, ib.stmt.probe, k.consumer, k.stored).Scan(&one)
		if err == nil {
			ib.stats.probeDuplicates.Add(1)
			ib.stats.duplicates.Add(1)
			return Duplicate, nil
		}
		// sql.ErrNoRows or a database error: the transaction below decides
		// (and reports the error if the database is really gone).
	}

	// Layer 3: the database decides.
	out, err := ib.processDB(ctx, k, attempt)
	after := context.WithoutCancel(ctx)
	switch {
	case err != nil:
		if token != "" {
			ib.fastRelease(after, consumer, fkey, token)
		}
		return 0, err
	case out == Duplicate:
		ib.stats.duplicates.Add(1)
	default:
		ib.stats.processed.Add(1)
	}
	// Committed (or committed before): remember it in the faster layers.
	if ib.bloom != nil {
		ib.bloom.add(k.digest[:])
	}
	if fkey != "" {
		ib.fastComplete(after, consumer, fkey, token)
	}
	return out, nil
}

type noEarlyWaitKey struct{}

// WithoutEarlyWait returns ctx marked so that Process returns a handler's
// ErrNotYet at once, without Config.EarlyRetries' waits: for a caller that
// keeps early messages aside itself and runs them again as soon as another
// message was applied (the broker adapters park them so).
func WithoutEarlyWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noEarlyWaitKey{}, true)
}

func noEarlyWait(ctx context.Context) bool {
	v, _ := ctx.Value(noEarlyWaitKey{}).(bool)
	return v
}

func (ib *Inbox) processDB(ctx context.Context, k key, attempt func(context.Context, key) (Outcome, error)) (Outcome, error) {
	conflicts, early := 0, 0
	for {
		out, err := attempt(ctx, k)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return 0, err
		}
		var wait time.Duration
		switch {
		case isConflict(err) && conflicts+1 < maxAttempts:
			// The database rolled the whole transaction back: nothing of
			// it survives, running it again is invisible.
			conflicts++
			ib.stats.txRetries.Add(1)
			if errors.Is(err, errInsert) {
				ib.stats.retries.Add(1)
			}
			wait = time.Duration(conflicts) * time.Duration(1+rand.IntN(5)) * time.Millisecond
		case errors.Is(err, ErrNotYet) && errors.Is(err, ErrHandler) && early < ib.cfg.EarlyRetries && !noEarlyWait(ctx):
			wait = ib.cfg.EarlyBackoff << early
			early++
			ib.stats.early.Add(1)
		default:
			return 0, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// attempt runs the message's transaction once.
func (ib *Inbox) attempt(ctx context.Context, k key, h Handler) (Outcome, error) {
	tx, err := ib.db.BeginTx(ctx, ib.cfg.TxOptions)
	if err != nil {
		return 0, storeErr(fmt.Errorf("inbox: begin: %w", err))
	}
	inserted, err := ib.insert(ctx, tx, k)
	if err != nil {
		return 0, errors.Join(err, rollback(tx))
	}
	if !inserted {
		if err := rollback(tx); err != nil {
			return 0, err
		}
		return Duplicate, nil
	}
	if err := runHandler(ctx, tx, h); err != nil {
		return 0, errors.Join(err, rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return 0, storeErr(fmt.Errorf("inbox: commit (outcome unknown, the redelivery will tell): %w", err))
	}
	return Processed, nil
}

// ProcessTx is Process inside the caller's transaction tx, so that the dedup
// row, h's work and anything else the caller writes in tx (an outbox row, say)
// commit together. ProcessTx never commits or rolls back tx, never runs it
// again (see Process), and consults neither the FastPath nor the Bloom
// prefilter (it cannot know whether or when tx commits).
//
//   - Processed: h ran in tx. The message counts as processed only when the
//     caller commits tx.
//   - Duplicate: h did not run. Roll back tx (or commit it if it holds other
//     work of yours) and ack.
//   - error: the caller MUST roll back tx. Committing it would commit the
//     dedup row without h's complete work, and the message would never run
//     again.
//
// On PostgreSQL the insert must not fail inside tx, and it does not: it uses
// ON CONFLICT DO NOTHING, so a duplicate never aborts the caller's
// transaction. For a transaction of another driver (pgx.Tx) use ProcessIn.
func (ib *Inbox) ProcessTx(ctx context.Context, tx *sql.Tx, consumer, messageID string, h Handler) (Outcome, error) {
	if tx == nil {
		return 0, configError("tx", "nil")
	}
	if h == nil {
		return 0, configError("h", "nil Handler")
	}
	return ib.processIn(ctx, tx, consumer, messageID, func(ctx context.Context) error { return runHandler(ctx, tx, h) })
}

// Execer is what ProcessIn needs from the caller's transaction: the one
// method that runs the dedup insert. *sql.Tx and *sql.Conn have it; package
// pgxinbox adapts a pgx.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ProcessIn is ProcessTx for a transaction of any driver: it inserts the
// dedup row through tx and, only if the row is new, calls fn, which does the
// business work in the same transaction (it has tx in scope). The contract is
// ProcessTx's: ProcessIn never commits or rolls back, and on an error the
// caller must roll back. An error from fn is wrapped like a Handler's
// (errors.Is(err, ErrHandler)). A panic in fn propagates; the caller's
// deferred rollback ends the transaction.
//
// Package pgxinbox wraps it for pgx.Tx: pgxinbox.ProcessTx(ctx, ib, tx, …).
func (ib *Inbox) ProcessIn(ctx context.Context, tx Execer, consumer, messageID string, fn func(ctx context.Context) error) (Outcome, error) {
	if tx == nil {
		return 0, configError("tx", "nil")
	}
	if fn == nil {
		return 0, configError("fn", "nil")
	}
	return ib.processIn(ctx, tx, consumer, messageID, func(ctx context.Context) error {
		if err := fn(ctx); err != nil {
			return &handlerError{err: err}
		}
		return nil
	})
}

func (ib *Inbox) processIn(ctx context.Context, tx Execer, consumer, messageID string, run func(ctx context.Context) error) (Outcome, error) {
	k, err := ib.makeKey(consumer, messageID)
	if err != nil {
		return 0, err
	}
	inserted, err := ib.insert(ctx, tx, k)
	if err != nil {
		return 0, err
	}
	if !inserted {
		ib.stats.duplicates.Add(1)
		return Duplicate, nil
	}
	if err := run(ctx); err != nil {
		return 0, err
	}
	ib.stats.processed.Add(1)
	return Processed, nil
}

// errInsert marks a failure of the dedup insert itself (for Stats).
var errInsert = errors.New("inbox: insert dedup row")

// insert adds the dedup row and reports whether it was new. The storage
// engine decides: never a read followed by a write.
func (ib *Inbox) insert(ctx context.Context, tx Execer, k key) (bool, error) {
	res, err := tx.ExecContext(ctx, ib.stmt.insert, k.consumer, k.stored)
	if err != nil {
		return false, storeErr(fmt.Errorf("%w into %s: %w", errInsert, ib.cfg.Table, err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(fmt.Errorf("%w into %s: rows affected: %w", errInsert, ib.cfg.Table, err))
	}
	switch n {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("%w into %s: %d rows affected, want 0 or 1", errInsert, ib.cfg.Table, n)
}

// runHandler calls h and rolls tx back if h panics, then re-panics, so a
// panicking handler never leaves a transaction (and its locks) open.
func runHandler(ctx context.Context, tx *sql.Tx, h Handler) (err error) {
	panicked := true
	defer func() {
		if panicked {
			_ = tx.Rollback()
		}
	}()
	err = h(ctx, tx)
	panicked = false
	if err != nil {
		return &handlerError{err: err}
	}
	return nil
}

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return storeErr(fmt.Errorf("inbox: rollback: %w", err))
	}
	return nil
}

// fastTimeout bounds the post-commit fast-path writes, which run detached
// from the caller's context.
const fastTimeout = 2 * time.Second

// fastKey returns the message's fast-path key, or "" when the database's
// namespace is not known yet (the database could not be asked): then this
// message uses the database alone.
func (ib *Inbox) fastKey(ctx context.Context, consumer string, k key) string {
	ns, err := ib.namespace(ctx)
	if err != nil {
		ib.stats.fastSkipped.Add(1)
		ib.cfg.Logger.Debug("inbox: fast path skipped, database namespace unknown", "table", ib.cfg.Table, "consumer", consumer, "err", err)
		return ""
	}
	return k.fastKey(ns)
}

// fastAllowed asks the breaker, counting the skips.
func (ib *Inbox) fastAllowed() bool {
	if ib.brk.allow() {
		return true
	}
	ib.stats.fastSkipped.Add(1)
	return false
}

func (ib *Inbox) fastComplete(ctx context.Context, consumer, fkey, token string) {
	if !ib.fastAllowed() {
		return // a live claim of ours expires after its ClaimTTL
	}
	cctx, cancel := context.WithTimeout(ctx, fastTimeout)
	defer cancel()
	if err := ib.fast.Complete(cctx, fkey, token); err != nil {
		ib.fastFailed(ctx, consumer, "complete", err)
		return
	}
	ib.fastOK()
}

func (ib *Inbox) fastRelease(ctx context.Context, consumer, fkey, token string) {
	if !ib.fastAllowed() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, fastTimeout)
	defer cancel()
	if err := ib.fast.Release(cctx, fkey, token); err != nil {
		ib.fastFailed(ctx, consumer, "release", err)
		return
	}
	ib.fastOK()
}

// fastFailed opens the breaker; the first failure of an outage is logged at
// Warn, the rest at Debug. ctx is the caller's context (the detached one for
// the post-commit writes): a call that failed because the caller's own
// context ended says nothing about the fast path and leaves the breaker as it
// was.
func (ib *Inbox) fastFailed(ctx context.Context, consumer, op string, err error) {
	ib.stats.fastErrors.Add(1)
	if ctx.Err() != nil {
		ib.brk.probing.Store(false)
		return
	}
	level := slog.LevelDebug
	if ib.brk.failure() {
		level = slog.LevelWarn
	}
	ib.cfg.Logger.Log(context.Background(), level, "inbox: fast path unavailable, using the database alone",
		"table", ib.cfg.Table, "consumer", consumer, "op", op, "retry_in", ib.cfg.FastPathBackoff, "err", err)
}

func (ib *Inbox) fastOK() {
	if ib.brk.success() {
		ib.cfg.Logger.Info("inbox: fast path recovered", "table", ib.cfg.Table)
	}
}

// Stats are counters since New. Duplicates counts all Duplicate outcomes;
// FastPathDuplicates and ProbeDuplicates are the part answered without a
// write transaction.
type Stats struct {
	Processed          uint64 // Process/ProcessTx returned Processed
	Duplicates         uint64 // Process/ProcessTx returned Duplicate
	FastPathDuplicates uint64 // … answered by the FastPath ("done")
	ProbeDuplicates    uint64 // … answered by a read of the dedup row (Bloom said "maybe seen")
	BloomDefinitelyNew uint64 // lookups the Bloom prefilter skipped
	FastPathErrors     uint64 // fast-path calls that failed (each fell back to the database)
	FastPathSkipped    uint64 // fast-path calls skipped: breaker open after a failure, or namespace unknown
	InsertRetries      uint64 // transactions run again after their dedup insert hit a deadlock or serialization failure
	TxRetries          uint64 // transactions run again after a deadlock or serialization failure anywhere in them
	EarlyRetries       uint64 // waits before running again a message whose handler returned ErrNotYet
}

// Stats returns a snapshot of the counters.
func (ib *Inbox) Stats() Stats {
	return Stats{
		Processed:          ib.stats.processed.Load(),
		Duplicates:         ib.stats.duplicates.Load(),
		FastPathDuplicates: ib.stats.fastDuplicates.Load(),
		ProbeDuplicates:    ib.stats.probeDuplicates.Load(),
		BloomDefinitelyNew: ib.stats.bloomNew.Load(),
		FastPathErrors:     ib.stats.fastErrors.Load(),
		FastPathSkipped:    ib.stats.fastSkipped.Load(),
		InsertRetries:      ib.stats.retries.Load(),
		TxRetries:          ib.stats.txRetries.Load(),
		EarlyRetries:       ib.stats.early.Load(),
	}
}
