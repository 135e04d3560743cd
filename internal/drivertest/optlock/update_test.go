package optlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/idemkit/idem/optlock"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestUpdate(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.insert(1, 100, 7)
		if err := e.tbl.Update(ctx, e.db, int64(1), 7, map[string]any{"balance": 60, "owner": "ann"}); err != nil {
			t.Fatal(err)
		}
		if a := e.row(1); a.Balance != 60 || a.Owner.String != "ann" || a.Version != 8 {
			t.Fatalf("row = %+v, want balance 60, owner ann, version 8", a)
		}
		// The same version again: somebody (we) wrote in between.
		err := e.tbl.Update(ctx, e.db, int64(1), 7, map[string]any{"balance": 0})
		if !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("stale Update = %v, want ErrConflict", err)
		}
		if a := e.row(1); a.Balance != 60 || a.Version != 8 {
			t.Fatalf("stale Update wrote: %+v", a)
		}
		// A missing row is a conflict too: the version cannot match.
		if err := e.tbl.Update(ctx, e.db, int64(2), 0, nil); !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("Update of a missing row = %v", err)
		}
		// An empty set is a bare version bump.
		if err := e.tbl.Update(ctx, e.db, int64(1), 8, nil); err != nil {
			t.Fatal(err)
		}
		if a := e.row(1); a.Balance != 60 || a.Version != 9 {
			t.Fatalf("row = %+v", a)
		}
	})
}

// TestUpdateZeroVersion: zero is a version, never "skip the check".
func TestUpdateZeroVersion(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.insert(1, 100, 0)
		if err := e.tbl.Update(ctx, e.db, int64(1), 0, map[string]any{"balance": 90}); err != nil {
			t.Fatalf("Update at version 0: %v", err)
		}
		if err := e.tbl.Update(ctx, e.db, int64(1), 0, map[string]any{"balance": 80}); !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("second Update at version 0 = %v, want ErrConflict", err)
		}
		e.insert(2, 100, 3)
		if err := e.tbl.Update(ctx, e.db, int64(2), 0, map[string]any{"balance": 0}); !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("Update at version 0 of a v3 row = %v, want ErrConflict", err)
		}
		if a, b := e.row(1), e.row(2); a.Balance != 90 || a.Version != 1 || b.Balance != 100 || b.Version != 3 {
			t.Fatalf("rows = %+v, %+v", a, b)
		}
	})
}

// TestUpdateSameValues: writing the values a row already has is a success,
// not a conflict, on every database; and the raw statement without a version
// bump shows why that needs care on MySQL/MariaDB (changed rows, not matched).
func TestUpdateSameValues(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.insert(1, 100, 4)
		if err := e.tbl.Update(ctx, e.db, int64(1), 4, map[string]any{"balance": 100}); err != nil {
			t.Fatalf("same-value Update = %v, want success", err)
		}
		if a := e.row(1); a.Balance != 100 || a.Version != 5 {
			t.Fatalf("row = %+v", a)
		}

		// The pitfall, without the bump: same values, version matched.
		res := e.exec(fmt.Sprintf("UPDATE %s SET balance = %s WHERE id = %s AND version = %s", e.table, e.ph(1), e.ph(2), e.ph(3)),
			100, 1, 5)
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		want := int64(1)
		if e.dialect == optlock.MySQL {
			want = 0 // the row matched but did not change: a false "conflict"
		}
		if n != want {
			t.Fatalf("raw same-value UPDATE affected %d rows, want %d on %s", n, want, e.dialect)
		}

		if e.dialect == optlock.MySQL { // and with clientFoundRows=true the helper behaves the same
			db, err := sql.Open("mysql", e.dsn+dsnSep(e.dsn)+"clientFoundRows=true")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := e.tbl.Update(ctx, db, int64(1), 5, map[string]any{"balance": 100}); err != nil {
				t.Fatalf("same-value Update with clientFoundRows: %v", err)
			}
			if err := e.tbl.Update(ctx, db, int64(1), 5, map[string]any{"balance": 100}); !errors.Is(err, optlock.ErrConflict) {
				t.Fatalf("stale Update with clientFoundRows: %v", err)
			}
		}
	})
}

func dsnSep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}

func TestUpdateRejectsBadColumns(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.insert(1, 100, 0)
		ce := &countingExec{Executor: e.db}
		for _, c := range []struct {
			set  map[string]any
			want string
		}{
			{map[string]any{"version": 9}, `must not write the "version" column`},
			{map[string]any{"id": 9}, `must not write the "id" column`},
			// Unquoted identifiers are case-insensitive: on MySQL and SQLite
			// "VERSION = 7" after the bump would win and defeat the check.
			{map[string]any{"VERSION": 7}, `must not write the "VERSION" column`},
			{map[string]any{"Version": 7}, `must not write the "Version" column`},
			{map[string]any{"ID": 2}, `must not write the "ID" column`},
			{map[string]any{"balance": 1, "BALANCE": 2}, "names one column twice"},
			{map[string]any{"balance = 0, owner": "x"}, "not a plain identifier"},
			{map[string]any{"": 1}, "empty identifier"},
		} {
			if err := e.tbl.Update(ctx, ce, int64(1), 0, c.set); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Update(%v) = %v, want %q", c.set, err, c.want)
			}
		}
		if n := ce.n.Load(); n != 0 {
			t.Fatalf("bad input reached the database: %d statements", n)
		}
		// The row is untouched and the compare-and-set still guards it.
		if err := e.tbl.Update(ctx, e.db, int64(1), 0, map[string]any{"balance": 5}); err != nil {
			t.Fatal(err)
		}
		if err := e.tbl.Update(ctx, e.db, int64(1), 0, map[string]any{"balance": 6}); !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("stale write after the rejected ones: %v, want ErrConflict", err)
		}
	})
}

// TestConcurrentIncrements: 50 goroutines × 20 read-modify-write increments on
// one row end at exactly 1000: no update is lost, none is applied twice. The
// settings it needs: MaxAttempts 10, BaseDelay 1ms, MaxDelay 10ms, a pool of 4
// connections, and a caller that calls Do again when it gives up (with the
// defaults, 5 attempts, some Do calls give up under this load: see
// BenchmarkContention). Giving up costs retries, never an update.
func TestConcurrentIncrements(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		e.insert(1, 0, 0)
		// Each attempt holds one of four connections for its read and its
		// write, like a request handler would: 50 goroutines still race for
		// the row, but fewer attempts are wasted than when every statement
		// queues for the pool separately.
		e.db.SetMaxOpenConns(4)
		const workers, each = 50, 20
		cfg := &optlock.Config{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}
		var succeeded, gaveUp, attempts atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				ctx := context.Background()
				for done := 0; done < each; {
					err := optlock.Do(ctx, cfg, func(ctx context.Context, attempt int) error {
						attempts.Add(1)
						conn, err := e.db.Conn(ctx)
						if err != nil {
							return err
						}
						defer conn.Close()
						a, err := e.read(ctx, conn, 1)
						if err != nil {
							return err
						}
						return e.tbl.Update(ctx, conn, int64(1), a.Version, map[string]any{"balance": a.Balance + 1})
					})
					switch {
					case err == nil:
						done++
						succeeded.Add(1)
					case errors.Is(err, optlock.ErrConflict): // bounded retries ran out: the caller tries again later
						gaveUp.Add(1)
					default:
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		a := e.row(1)
		if a.Balance != workers*each || a.Version != workers*each || succeeded.Load() != workers*each {
			t.Fatalf("balance %d, version %d, successes %d; want all %d", a.Balance, a.Version, succeeded.Load(), workers*each)
		}
		t.Logf("%d attempts for %d increments, %d Do calls gave up", attempts.Load(), workers*each, gaveUp.Load())
	})
}

// TestConflictAfterBoundedRetries forces a conflict on every attempt (another
// writer bumps the version between the read and the write): Do gives up after
// MaxAttempts with ErrConflict, and the row holds only the other writer's work.
func TestConflictAfterBoundedRetries(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		e.insert(1, 100, 0)
		calls := 0
		err := optlock.Do(context.Background(), &optlock.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond},
			func(ctx context.Context, attempt int) error {
				calls++
				a, err := e.read(ctx, e.db, 1)
				if err != nil {
					return err
				}
				e.exec(fmt.Sprintf("UPDATE %s SET owner = 'other', version = version + 1 WHERE id = 1", e.table))
				return e.tbl.Update(ctx, e.db, int64(1), a.Version, map[string]any{"balance": a.Balance - 100})
			})
		if !errors.Is(err, optlock.ErrConflict) || calls != 3 {
			t.Fatalf("Do = %v after %d calls, want ErrConflict after 3", err, calls)
		}
		if a := e.row(1); a.Balance != 100 || a.Version != 3 || a.Owner.String != "other" {
			t.Fatalf("row = %+v, want only the other writer's 3 updates", a)
		}
	})
}

// TestUpdateInTx: the compare-and-set joins the caller's transaction.
func TestUpdateInTx(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.insert(1, 100, 0)
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.tbl.Update(ctx, tx, int64(1), 0, map[string]any{"balance": 1}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if a := e.row(1); a.Balance != 100 || a.Version != 0 {
			t.Fatalf("rolled-back update persisted: %+v", a)
		}
		err = optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			a, err := e.read(ctx, tx, 1)
			if err != nil {
				return err
			}
			if err := e.tbl.Update(ctx, tx, int64(1), a.Version, map[string]any{"balance": a.Balance - 30}); err != nil {
				return err
			}
			return tx.Commit()
		})
		if err != nil {
			t.Fatal(err)
		}
		if a := e.row(1); a.Balance != 70 || a.Version != 1 {
			t.Fatalf("row = %+v", a)
		}
	})
}

var _ optlock.Executor = (*sql.DB)(nil)
var _ optlock.Executor = (*sql.Tx)(nil)
var _ optlock.Executor = (*sql.Conn)(nil)
