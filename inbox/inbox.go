package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
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
		return fmt.Errorf("%w: Dialect is required (inbox.Postgres, inbox.MySQL or inbox.SQLite), got %v", ErrInvalidConfig, c.Dialect)
	}
	if err := CheckIdentifier(c.Table, c.Dialect != SQLite); err != nil {
		return fmt.Errorf("%w: Table: %w", ErrInvalidConfig, err)
	}
	if name := c.Table[strings.LastIndexByte(c.Table, '.')+1:]; len(name) > 48 {
		// "<name>_migrations" and "<name>_created_at_idx" must fit 63/64 bytes.
		return fmt.Errorf("%w: Table name %q is longer than 48 bytes", ErrInvalidConfig, name)
	}
	if c.Retention < 0 {
		return fmt.Errorf("%w: Retention %v is negative", ErrInvalidConfig, c.Retention)
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
	db       *sql.DB
	cfg      Config
	stmt     statements
	fast     FastPath
	bloom    *bloomRing
	fastDown atomic.Bool // fast path failing: warned once, quiet until it recovers

	stats struct {
		processed, duplicates, fastDuplicates, probeDuplicates, bloomNew, fastErrors, retries atomic.Uint64
	}
}

// New returns an Inbox over db. cfg may not be nil: Dialect is required.
// Call Migrate once (at start-up, or from a deploy step) to create the table.
func New(db *sql.DB, cfg *Config) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: Config is required (Dialect must be set)", ErrInvalidConfig)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	ib := &Inbox{db: db, cfg: c, stmt: buildStatements(c.Dialect, c.Table), fast: c.FastPath}
	if c.Bloom != nil {
		ib.bloom = newBloomRing(*c.Bloom, c.now)
	}
	return ib, nil
}

// Table returns the dedup table's name.
func (ib *Inbox) Table() string { return ib.cfg.Table }

// Dialect returns the inbox's dialect.
func (ib *Inbox) Dialect() Dialect { return ib.cfg.Dialect }

// maxInsertAttempts bounds the transparent retries of a deadlock (or
// serialization failure, or SQLite busy) hit by the dedup insert itself,
// before the handler ran.
const maxInsertAttempts = 4

// Process handles one delivery of messageID for consumer, exactly once:
//
//  1. begin a transaction; its first statement inserts the dedup row
//     (INSERT … ON CONFLICT DO NOTHING / INSERT IGNORE) and looks at the
//     rows affected;
//  2. 0 rows: the message was processed before → roll back, return Duplicate
//     without running h;
//  3. 1 row: run h in the same transaction and commit; return Processed.
//
// If h fails (or panics), the transaction rolls back and takes the dedup row
// with it, so the redelivery runs h again; the error is returned wrapped
// (errors.Is works for h's error and for ErrHandler) with Outcome 0.
//
// A concurrent delivery of the same message blocks on the first one's
// uncommitted row, then returns Duplicate if the first committed, or runs h
// if it rolled back. Ack the broker for Processed and Duplicate; nack (or let
// it redeliver) on error. An error from the commit itself leaves the outcome
// unknown; the redelivery finds out.
func (ib *Inbox) Process(ctx context.Context, consumer, messageID string, h Handler) (Outcome, error) {
	if h == nil {
		return 0, fmt.Errorf("%w: handler is nil", ErrInvalidConfig)
	}
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
	var token string
	if maybeSeen && ib.fast != nil {
		st, tok, err := ib.fast.Claim(ctx, k.fastKey())
		switch {
		case err != nil:
			ib.fastFailed(consumer, "claim", err)
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
	} else if maybeSeen && ib.bloom != nil {
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
	out, err := ib.processDB(ctx, k, h)
	after := context.WithoutCancel(ctx)
	switch {
	case err != nil:
		if token != "" {
			ib.fastRelease(after, consumer, k, token)
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
	if ib.fast != nil {
		ib.fastComplete(after, consumer, k, token)
	}
	return out, nil
}

func (ib *Inbox) processDB(ctx context.Context, k key, h Handler) (Outcome, error) {
	for attempt := 1; ; attempt++ {
		tx, err := ib.db.BeginTx(ctx, nil)
		if err != nil {
			return 0, fmt.Errorf("inbox: begin: %w", err)
		}
		inserted, err := ib.insert(ctx, tx, k)
		if err != nil {
			err = errors.Join(err, rollback(tx))
			if attempt < maxInsertAttempts && isConflict(err) && ctx.Err() == nil {
				ib.stats.retries.Add(1)
				continue // nothing but our own insert ran: retrying is invisible
			}
			return 0, err
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
			return 0, fmt.Errorf("inbox: commit (outcome unknown, the redelivery will tell): %w", err)
		}
		return Processed, nil
	}
}

// ProcessTx is Process inside the caller's transaction tx, so that the dedup
// row, h's work and anything else the caller writes in tx (an outbox row, say)
// commit together. ProcessTx never commits or rolls back tx, and consults
// neither the FastPath nor the Bloom prefilter (it cannot know whether or when
// tx commits).
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
// transaction.
func (ib *Inbox) ProcessTx(ctx context.Context, tx *sql.Tx, consumer, messageID string, h Handler) (Outcome, error) {
	if tx == nil {
		return 0, fmt.Errorf("%w: tx is nil", ErrInvalidConfig)
	}
	if h == nil {
		return 0, fmt.Errorf("%w: handler is nil", ErrInvalidConfig)
	}
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
	if err := runHandler(ctx, tx, h); err != nil {
		return 0, err
	}
	ib.stats.processed.Add(1)
	return Processed, nil
}

// insert adds the dedup row and reports whether it was new. The storage
// engine decides: never a read followed by a write.
func (ib *Inbox) insert(ctx context.Context, tx *sql.Tx, k key) (bool, error) {
	res, err := tx.ExecContext(ctx, ib.stmt.insert, k.consumer, k.stored)
	if err != nil {
		return false, fmt.Errorf("inbox: insert dedup row into %s: %w", ib.cfg.Table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: insert dedup row into %s: rows affected: %w", ib.cfg.Table, err)
	}
	switch n {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("inbox: insert dedup row into %s: %d rows affected, want 0 or 1", ib.cfg.Table, n)
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
		return fmt.Errorf("inbox: rollback: %w", err)
	}
	return nil
}

// fastTimeout bounds the post-commit fast-path writes, which run detached
// from the caller's context.
const fastTimeout = 2 * time.Second

func (ib *Inbox) fastComplete(ctx context.Context, consumer string, k key, token string) {
	ctx, cancel := context.WithTimeout(ctx, fastTimeout)
	defer cancel()
	if err := ib.fast.Complete(ctx, k.fastKey(), token); err != nil {
		ib.fastFailed(consumer, "complete", err)
		return
	}
	ib.fastOK()
}

func (ib *Inbox) fastRelease(ctx context.Context, consumer string, k key, token string) {
	ctx, cancel := context.WithTimeout(ctx, fastTimeout)
	defer cancel()
	if err := ib.fast.Release(ctx, k.fastKey(), token); err != nil {
		ib.fastFailed(consumer, "release", err)
		return
	}
	ib.fastOK()
}

// fastFailed logs the first failure of an outage at Warn and the rest at Debug.
func (ib *Inbox) fastFailed(consumer, op string, err error) {
	ib.stats.fastErrors.Add(1)
	level := slog.LevelDebug
	if ib.fastDown.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	ib.cfg.Logger.Log(context.Background(), level, "inbox: fast path unavailable, using the database alone",
		"table", ib.cfg.Table, "consumer", consumer, "op", op, "err", err)
}

func (ib *Inbox) fastOK() {
	if ib.fastDown.Load() && ib.fastDown.CompareAndSwap(true, false) {
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
	InsertRetries      uint64 // dedup inserts retried after a deadlock or lock timeout
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
		InsertRetries:      ib.stats.retries.Load(),
	}
}
