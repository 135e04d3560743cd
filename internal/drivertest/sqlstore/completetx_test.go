package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// bizTable creates a business table (id, fence) and returns its name.
func bizTable(t testing.TB, db *sql.DB) string {
	t.Helper()
	name := testenv.Name("biz")
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+name+" (id VARCHAR(100) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return name
}

func insertBiz(d sqlstore.Dialect, table string) string {
	if d == sqlstore.Postgres {
		return "INSERT INTO " + table + " (id, fence) VALUES ($1, $2)"
	}
	return "INSERT INTO " + table + " (id, fence) VALUES (?, ?)"
}

func countBiz(t testing.TB, d sqlstore.Dialect, db *sql.DB, table, id string) int {
	t.Helper()
	q := "SELECT count(*) FROM " + table + " WHERE id = ?"
	if d == sqlstore.Postgres {
		q = "SELECT count(*) FROM " + table + " WHERE id = $1"
	}
	var n int
	if err := db.QueryRowContext(ctxT(t), q, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// txFixture is a migrated store, a business table and a claimed key.
type txFixture struct {
	b     backend
	db    *sql.DB
	s     *sqlstore.Store
	biz   string
	req   idem.BeginRequest
	owner idem.Owner
}

func newTxFixture(t *testing.T, b backend, lease time.Duration) *txFixture {
	db, _ := b.open(t)
	f := &txFixture{b: b, db: db, s: newStore(t, b, db), biz: bizTable(t, db)}
	f.req = idem.BeginRequest{Key: idem.MustKey("shop", testenv.Name("order")), Fingerprint: idem.FingerprintOf([]byte("charge 100")), Lease: lease, Retention: time.Hour}
	c, err := f.s.Begin(ctxT(t), f.req)
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %v, %v", c.Outcome, err)
	}
	f.owner = c.Owner
	return f
}

// work runs the business insert and CompleteTx in one transaction, and
// leaves it open.
func (f *txFixture) work(t *testing.T, owner idem.Owner) (*sql.Tx, error) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, insertBiz(f.b.dialect, f.biz), f.req.Key.ID(), int64(owner.Fence)); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	return tx, f.s.CompleteTx(ctx, tx, owner, []byte("receipt"))
}

func TestCompleteTxCommit(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newTxFixture(t, b, time.Minute)
			tx, err := f.work(t, f.owner)
			if err != nil {
				t.Fatalf("CompleteTx: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			c, err := f.s.Begin(ctxT(t), f.req)
			if err != nil || c.Outcome != idem.Replay || string(c.Result) != "receipt" {
				t.Fatalf("Begin after commit = %v %q, %v; want Replay of the receipt", c.Outcome, c.Result, err)
			}
			if n := countBiz(t, b.dialect, f.db, f.biz, f.req.Key.ID()); n != 1 {
				t.Fatalf("%d business rows, want 1", n)
			}
		})
	}
}

func TestCompleteTxRollback(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newTxFixture(t, b, time.Minute)
			tx, err := f.work(t, f.owner)
			if err != nil {
				t.Fatalf("CompleteTx: %v", err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n := countBiz(t, b.dialect, f.db, f.biz, f.req.Key.ID()); n != 0 {
				t.Fatalf("%d business rows after rollback, want 0", n)
			}
			rec, err := f.s.Get(ctxT(t), f.req.Key)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != idem.StateInProgress || rec.Fence != f.owner.Fence || len(rec.Result) != 0 {
				t.Fatalf("record after rollback = %+v, want in progress with fence %d", rec, f.owner.Fence)
			}
			// Still the owner's: a retry is in flight, and the owner can
			// try again.
			if c, err := f.s.Begin(ctxT(t), f.req); err != nil || c.Outcome != idem.InFlight {
				t.Fatalf("Begin after rollback = %v, %v; want InFlight", c.Outcome, err)
			}
			tx, err = f.work(t, f.owner)
			if err != nil {
				t.Fatalf("second CompleteTx: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if c, err := f.s.Begin(ctxT(t), f.req); err != nil || c.Outcome != idem.Replay {
				t.Fatalf("Begin after the retry's commit = %v, %v; want Replay", c.Outcome, err)
			}
		})
	}
}

// An owner whose claim was taken over gets ErrLeaseLost inside its
// transaction, and must roll its business change back.
func TestCompleteTxStaleOwner(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newTxFixture(t, b, 200*time.Millisecond)
			var next idem.Claim
			for deadline := time.Now().Add(15 * time.Second); ; {
				c, err := f.s.Begin(ctxT(t), f.req)
				if err != nil {
					t.Fatal(err)
				}
				if c.Outcome == idem.Acquired {
					next = c
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("lease never expired")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !next.Takeover {
				t.Errorf("claim after lease expiry not a takeover")
			}
			tx, err := f.work(t, f.owner)
			if !errors.Is(err, idem.ErrLeaseLost) {
				_ = tx.Rollback()
				t.Fatalf("stale CompleteTx = %v, want ErrLeaseLost", err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := f.s.CompleteTx(ctxT(t), f.db, idem.Owner{}, nil); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("CompleteTx(zero owner) = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// A retry that arrives after the lease ran out, while the owner's
// transaction with CompleteTx is still open, waits for it and replays; it
// never takes over a claim whose completion is about to commit.
func TestCompleteTxRetryWaitsForCommit(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newTxFixture(t, b, 200*time.Millisecond)
			tx, err := f.work(t, f.owner)
			if err != nil {
				t.Fatalf("CompleteTx: %v", err)
			}
			time.Sleep(400 * time.Millisecond) // the lease runs out while tx is open
			got := make(chan idem.Claim, 1)
			errc := make(chan error, 1)
			go func() {
				c, err := f.s.Begin(context.Background(), f.req)
				got <- c
				errc <- err
			}()
			time.Sleep(100 * time.Millisecond) // let the retry reach the row lock
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			c := <-got
			if err := <-errc; err != nil {
				t.Fatalf("retry Begin: %v", err)
			}
			if c.Outcome != idem.Replay || string(c.Result) != "receipt" {
				t.Fatalf("retry during the owner's commit = %v (takeover %v), want Replay", c.Outcome, c.Takeover)
			}
		})
	}
}

// A retry that waits on the row lock of a CompleteTx transaction for longer
// than a lease, and takes the claim over when that transaction rolls back,
// gets a whole lease measured after its wait: a third caller that comes
// right after finds the claim in flight. A lease computed when the
// statement started would already be spent, and the third caller would
// acquire too: two executors.
func TestCompleteTxRollbackNeverHandsOutSpentLease(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const lease = 500 * time.Millisecond
			f := newTxFixture(t, b, lease)
			tx, err := f.work(t, f.owner)
			if err != nil {
				t.Fatalf("CompleteTx: %v", err)
			}
			time.Sleep(2 * lease) // the owner's lease runs out while tx is open
			type result struct {
				c   idem.Claim
				err error
			}
			got := make(chan result, 1)
			go func() {
				c, err := f.s.Begin(context.Background(), f.req)
				got <- result{c, err}
			}()
			// The retry waits on the row lock for longer than a lease.
			select {
			case r := <-got:
				_ = tx.Rollback()
				t.Fatalf("retry returned %v, %v while the owner's transaction held the record", r.c.Outcome, r.err)
			case <-time.After(3 * lease):
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil || r.c.Outcome != idem.Acquired || !r.c.Takeover {
				t.Fatalf("retry after the rollback = %v (takeover %v), %v; want Acquired by takeover", r.c.Outcome, r.c.Takeover, r.err)
			}
			third, err := f.s.Begin(ctxT(t), f.req)
			if err != nil {
				t.Fatal(err)
			}
			if third.Outcome != idem.InFlight {
				t.Fatalf("third caller right after the takeover = %v, want InFlight: the takeover was handed a spent lease", third.Outcome)
			}
			if err := f.s.Complete(ctxT(t), r.c.Owner, []byte("after takeover")); err != nil {
				t.Fatalf("Complete by the taker: %v", err)
			}
		})
	}
}
