package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// SweeperConfig configures a Sweeper. Zero fields take their defaults.
type SweeperConfig struct {
	Interval  time.Duration // pause between sweeps while started; default 1 minute
	BatchSize int           // rows per DELETE statement; default 1000
	Logger    *slog.Logger  // default: the Inbox's Logger
}

// Sweeper deletes dedup rows older than the Inbox's Retention, in bounded
// batches: one DELETE of at most BatchSize rows per statement, each its own
// short transaction, so writers are never blocked for long. Age is measured by
// the database clock on both sides (created_at and the cutoff), so the
// sweeping host's clock does not matter.
//
// A message redelivered after its row was swept is processed again: the
// Retention must cover the broker's redelivery horizon.
type Sweeper struct {
	ib  *Inbox
	cfg SweeperConfig

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSweeper returns a Sweeper for ib's table. cfg may be nil.
func NewSweeper(ib *Inbox, cfg *SweeperConfig) (*Sweeper, error) {
	if ib == nil {
		return nil, configError("ib", "nil *Inbox")
	}
	var c SweeperConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.Logger == nil {
		c.Logger = ib.cfg.Logger
	}
	if c.Interval < 0 {
		return nil, configError("SweeperConfig.Interval", fmt.Sprintf("%v is negative", c.Interval))
	}
	if c.BatchSize < 1 || c.BatchSize > 100_000 {
		return nil, configError("SweeperConfig.BatchSize", fmt.Sprintf("%d is not in [1, 100000]", c.BatchSize))
	}
	return &Sweeper{ib: ib, cfg: c}, nil
}

// Sweep deletes every dedup row older than the retention window, batch by
// batch, and returns how many it deleted. It stops early, with the count so
// far, when ctx ends or a statement fails.
func (s *Sweeper) Sweep(ctx context.Context) (int64, error) {
	var total int64
	age := s.ib.cfg.Retention.Microseconds()
	for {
		n, err := s.batch(ctx, age)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(s.cfg.BatchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

func (s *Sweeper) batch(ctx context.Context, ageMicros int64) (int64, error) {
	var opts *sql.TxOptions
	if s.ib.cfg.Dialect == MySQL {
		// READ COMMITTED: no gap locks, so the range delete cannot block
		// inserts of new dedup rows.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := s.ib.db.BeginTx(ctx, opts)
	if err != nil {
		return 0, fmt.Errorf("inbox: sweep %s: begin: %w", s.ib.cfg.Table, err)
	}
	res, err := tx.ExecContext(ctx, s.ib.stmt.sweep, ageMicros, s.cfg.BatchSize)
	if err != nil {
		return 0, errors.Join(fmt.Errorf("inbox: sweep %s: %w", s.ib.cfg.Table, err), rollback(tx))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, errors.Join(fmt.Errorf("inbox: sweep %s: rows affected: %w", s.ib.cfg.Table, err), rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("inbox: sweep %s: commit: %w", s.ib.cfg.Table, err)
	}
	return n, nil
}

// Start runs Sweep now and then every Interval in a goroutine the Sweeper
// owns, until Stop or until ctx ends. Errors are logged and retried at the
// next interval. Start while running returns ErrAlreadyStarted; Start after
// Stop starts again.
func (s *Sweeper) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		select {
		case <-s.done: // stopped by its context: may start again
		default:
			return ErrAlreadyStarted
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.done = make(chan struct{})
	go s.run(ctx, s.done)
	return nil
}

func (s *Sweeper) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.Warn("inbox: sweep failed, retrying at the next interval", "table", s.ib.cfg.Table, "deleted", n, "err", err)
		case n > 0:
			s.cfg.Logger.Debug("inbox: swept dedup rows", "table", s.ib.cfg.Table, "deleted", n)
		}
		t.Reset(s.cfg.Interval)
	}
}

// Stop ends the background sweeping and waits for the goroutine to exit, or
// for ctx to end (then it returns ctx's error; the goroutine still exits
// promptly, at the end of its current statement). Stop is safe to call twice
// and without Start.
func (s *Sweeper) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
