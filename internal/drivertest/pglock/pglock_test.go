package pglock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/locktest"
	"github.com/idemkit/idem/lock/pglock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if crashChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

// setup returns a pool limited to maxConns connections in a fresh schema (the
// shared server allows 100 connections for every helper's tests), a Locker
// in a namespace of its own (advisory locks are per database, not per
// schema) with its fence sequence created, and the DSN.
func setup(t *testing.T, maxConns int, cfg *pglock.Config) (*pglock.Locker, *sql.DB, string) {
	t.Helper()
	db, dsn := testenv.PostgresDB(t)
	db.SetMaxOpenConns(maxConns)
	c := pglock.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Namespace = testenv.Name("ns")
	l, err := pglock.New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	setups.Store(l, setupOf{cfg: c, db: db})
	if err := l.Migrate(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l, db, dsn
}

// setups remembers the Config (with its fresh Namespace) and the pool
// setup gave each Locker, for tests that build a second Locker like it (a
// crash child must use the same namespace).
var setups sync.Map // *pglock.Locker → setupOf

type setupOf struct {
	cfg pglock.Config
	db  *sql.DB
}

func setupFor(l *pglock.Locker) setupOf {
	v, _ := setups.Load(l)
	return v.(setupOf)
}

func namespaceOf(l *pglock.Locker) string { return setupFor(l).cfg.Namespace }

// configOf is a copy of the Config l was made with.
func configOf(l *pglock.Locker) pglock.Config { return setupFor(l).cfg }

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, l *pglock.Locker, ctx context.Context, name string) *pglock.Lease {
	t.Helper()
	ls, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return ls.(*pglock.Lease)
}

func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("lease context was never cancelled")
		return nil
	}
}

// holderPID finds the backend that holds key, from any connection.
func holderPID(t *testing.T, db *sql.DB, key int64) int {
	t.Helper()
	var pid int
	err := db.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = $1 AND objid::bigint = $2`, int64(uint32(uint64(key)>>32)), int64(uint32(key))).Scan(&pid)
	if err != nil {
		t.Fatalf("holder of key %d: %v", key, err)
	}
	return pid
}

func TestConfigAndNames(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := pglock.New(nil, nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	for _, c := range []pglock.Config{
		{CheckInterval: time.Millisecond},
		{WaitTimeout: -time.Second},
		{FenceSequence: "x; DROP TABLE y"},
		{FenceSequence: "a.b.c"},
		{FenceSequence: "1abc"},
	} {
		if _, err := pglock.New(db, &c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	if _, err := pglock.New(db, &pglock.Config{NoFence: true, FenceSequence: "not valid!"}); err != nil {
		t.Errorf("NoFence ignores FenceSequence: %v", err)
	}
	l, _ := pglock.New(db, nil)
	for _, name := range []string{"", strings.Repeat("n", pglock.MaxNameLen+1)} {
		if _, err := l.TryAcquire(context.Background(), name); err == nil {
			t.Errorf("TryAcquire(%d-byte name) succeeded", len(name))
		}
	}
}

// The key derivation is part of the contract (operators compute it to find
// a holder in pg_locks): pin it. Expected values computed independently:
// python3 -c "import hashlib,struct; print(struct.unpack('>q', hashlib.sha256(b'idem\x00pay:42').digest()[:8])[0])"
func TestKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ns, name string
		want     int64
	}{
		{"idem", "pay:42", -6402204694403096203},
		{"idem", "", -1683416888374521982},
	} {
		if got := pglock.Key(c.ns, c.name); got != c.want {
			t.Errorf("Key(%q, %q) = %d, want %d", c.ns, c.name, got, c.want)
		}
	}
	if pglock.Key("idem", "a") == pglock.Key("other", "a") || pglock.Key("idem", "ab") == pglock.Key("idema", "b") {
		t.Error("namespace does not separate keys")
	}
}

// The behaviour every lock.Locker owes (lock/locktest).
func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.Run(t, func(t *testing.T) lock.Locker {
		l, _, _ := setup(t, 8, nil)
		return l
	})
}

// Migrate runs again harmlessly; released leases give their sessions back;
// NoFence leases carry fence 0 (the rest of acquire and release is
// lock/locktest's, in TestConformance).
func TestAcquireReleaseAndFences(t *testing.T) {
	t.Parallel()
	l, db, _ := setup(t, 4, nil)
	ctx := ctxT(t, 30*time.Second)
	if err := l.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	for range 3 {
		ls := mustAcquire(t, l, ctx, "order:1")
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := db.Stats(); s.InUse != 0 {
		t.Errorf("%d connections still in use after release", s.InUse)
	}

	nf, err := pglock.New(db, &pglock.Config{Namespace: namespaceOf(l), NoFence: true})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := nf.TryAcquire(ctx, "order:1")
	if err != nil || ls.Fence() != 0 {
		t.Fatalf("NoFence TryAcquire: fence %v, %v", ls, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls = mustAcquire(t, nf, ctx, "order:1")
	if ls.Fence() != 0 {
		t.Fatalf("NoFence Acquire: fence %d", ls.Fence())
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMissingSequenceSaysMigrate(t *testing.T) {
	t.Parallel()
	db, _ := testenv.PostgresDB(t)
	db.SetMaxOpenConns(2)
	l, err := pglock.New(db, &pglock.Config{Namespace: testenv.Name("ns")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	for _, try := range []func(context.Context, string) (lock.Lease, error){l.TryAcquire, l.Acquire} {
		if _, err := try(ctx, "x"); err == nil || !strings.Contains(err.Error(), "Migrate") {
			t.Fatalf("acquire without sequence: %v", err)
		}
	}
	if s := db.Stats(); s.OpenConnections != 0 {
		t.Errorf("failed acquires left %d connections in the pool", s.OpenConnections)
	}
}

// The pooling pitfall: pg_advisory_unlock sent through the pool lands on
// whatever connection is free, not the one that locked. It returns false and
// the lock stays held by an idle pooled connection. The package pins the
// connection, so its Release always frees the lock.
func TestNaivePooledUnlockFailsPinnedRelease(t *testing.T) {
	t.Parallel()
	l, db, dsn := setup(t, 4, nil)
	ctx := ctxT(t, 30*time.Second)
	key := l.Key("naive")
	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)
	heldElsewhere := func() bool {
		var got bool
		if err := other.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got {
			if _, err := other.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
				t.Fatal(err)
			}
		}
		return !got
	}

	// Naive: lock and unlock through the pool while other work keeps
	// connections busy, as in any live service.
	busy, err := db.Conn(ctx) // some request holding a connection
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	busy2, err := db.Conn(ctx) // another request takes the now idle connection, the one that locked
	if err != nil {
		t.Fatal(err)
	}
	var unlocked bool
	if err := db.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&unlocked); err != nil {
		t.Fatal(err)
	}
	if unlocked {
		t.Fatal("naive unlock landed on the locking connection; the pitfall did not show")
	}
	if !heldElsewhere() {
		t.Fatal("naive unlock failed, yet the lock is free")
	}
	busy.Close()
	busy2.Close()
	db.SetMaxIdleConns(0) // close the connection that leaked the lock
	db.SetMaxIdleConns(2)
	for heldElsewhere() { // the server frees it when the closed session's backend exits
		if ctx.Err() != nil {
			t.Fatal("lock still held after its connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The package: same contention, Release frees the lock.
	busy, _ = db.Conn(ctx)
	ls := mustAcquire(t, l, ctx, "naive")
	busy2, _ = db.Conn(ctx)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	busy.Close()
	busy2.Close()
	if heldElsewhere() {
		t.Fatal("lock held after Release")
	}
}

// The session that holds the lock dies (pg_terminate_backend). The server
// frees the lock at once, the holder's context is cancelled with
// ErrExpired, Release reports it, and the dead connection is closed, not
// returned to the pool.
func TestKilledBackendFreesLockAndIsNotReused(t *testing.T) {
	t.Parallel()
	l, db, dsn := setup(t, 2, &pglock.Config{CheckInterval: 50 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	cfg := configOf(l)
	otherL, err := pglock.New(admin, &cfg)
	if err != nil {
		t.Fatal(err)
	}

	ls := mustAcquire(t, l, ctx, "victim")
	if err := ls.Valid(); err != nil {
		t.Fatalf("Valid while held: %v", err)
	}
	pid := holderPID(t, admin, ls.Key())
	if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	cause := waitDone(t, ls.Context())
	if !errors.Is(cause, lock.ErrExpired) {
		t.Fatalf("cause %v, want ErrExpired", cause)
	}
	if err := ls.Valid(); !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("Valid after the check found the session dead: %v, want ErrExpired", err)
	}
	next, err := otherL.Acquire(ctx, "victim") // the backend frees its locks as it exits, a moment after the kill
	if err != nil {
		t.Fatalf("lock not freed by the dead session: %v", err)
	}
	if next.Fence() <= ls.Fence() {
		t.Errorf("fence %d after %d", next.Fence(), ls.Fence())
	}
	if err := ls.Release(ctx); !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("release: %v, want ErrExpired", err)
	}
	if s := db.Stats(); s.OpenConnections != 0 {
		t.Fatalf("dead connection kept in the pool: %+v", s)
	}
	for i := 0; i < 3; i++ { // the pool works and never hands out the dead backend
		var p int
		if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil || p == pid {
			t.Fatalf("pool after discard: pid %d (dead %d), %v", p, pid, err)
		}
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// If the unlock reports that the session no longer held the lock, Release
// discards the connection; a successful unlock returns it to the pool.
func TestReleaseDiscardsConnectionInDoubt(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	ss := newSessions(t)
	db := ss.DB
	db.SetMaxOpenConns(2)
	l, err := pglock.New(db, &pglock.Config{Namespace: testenv.Name("ns")})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	ls := mustAcquire(t, l, ctx, "doubt")
	// The lease's session loses its lock behind the Lease's back: only the
	// session that holds an advisory lock can unlock it, so every session
	// of the pool tries, and exactly one (the lease's) succeeds.
	if n, err := ss.execEverywhere(ctx, `SELECT pg_advisory_unlock($1)`, driver.NamedValue{Ordinal: 1, Value: l.Key("doubt")}); err != nil || n != 1 {
		t.Fatalf("unlocked on %d sessions (%v), want the lease's one", n, err)
	}
	if err := ls.Release(ctx); !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("release: %v, want ErrExpired", err)
	}
	if s := db.Stats(); s.OpenConnections != 0 {
		t.Fatalf("connection in doubt went back to the pool: %+v", s)
	}

	ls = mustAcquire(t, l, ctx, "doubt")
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s := db.Stats(); s.OpenConnections != 1 || s.Idle != 1 {
		t.Fatalf("healthy connection not returned to the pool: %+v", s)
	}
}

func TestAcquireWaitsAndGivesUp(t *testing.T) {
	t.Parallel()
	l, _, _ := setup(t, 4, nil)
	ctx := ctxT(t, 30*time.Second)
	holder := mustAcquire(t, l, ctx, "w")

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "w"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with deadline: %v", err)
	}
	cfg := configOf(l)
	cfg.WaitTimeout = 1300 * time.Millisecond // more than one server-side slice
	lw, err := pglock.New(setupFor(l).db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Acquire(ctx, "w"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire with WaitTimeout: %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, ccancel)
	if _, err := l.Acquire(cctx, "w"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled: %v", err)
	}

	got := make(chan *pglock.Lease, 1)
	go func() {
		ls, err := l.Acquire(ctx, "w")
		if err != nil {
			t.Error(err)
		}
		got <- ls.(*pglock.Lease)
	}()
	time.Sleep(50 * time.Millisecond)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next.Fence() <= holder.Fence() {
		t.Errorf("fence %d after %d", next.Fence(), holder.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestParentCancelKeepsLockUntilRelease(t *testing.T) {
	t.Parallel()
	l, _, _ := setup(t, 2, &pglock.Config{CheckInterval: 20 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	parent, cancel := context.WithCancel(ctx)
	ls := mustAcquire(t, l, parent, "p")
	cancel()
	if cause := waitDone(t, ls.Context()); !errors.Is(cause, context.Canceled) {
		t.Fatalf("cause %v", cause)
	}
	if _, err := l.TryAcquire(ctx, "p"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("lock not held until Release: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTransactionLevel(t *testing.T) {
	t.Parallel()
	l, db, _ := setup(t, 4, nil)
	ctx := ctxT(t, 30*time.Second)
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f1, err := l.AcquireTx(ctx, tx1, "tx")
	if err != nil || f1 <= 0 {
		t.Fatalf("AcquireTx: %d, %v", f1, err)
	}
	if again, err := l.TryAcquireTx(ctx, tx1, "tx"); err != nil {
		t.Fatalf("reentrant TryAcquireTx: %d, %v", again, err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireTx(ctx, tx2, "tx"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquireTx while tx1 holds: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "tx"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("session TryAcquire while tx1 holds: %v", err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	f2, err := l.TryAcquireTx(ctx, tx2, "tx")
	if err != nil || f2 <= f1 {
		t.Fatalf("after commit: %d (previous %d), %v", f2, f1, err)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, "tx")
	if err != nil {
		t.Fatalf("after rollback: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// lock_timeout bounds AcquireTx's wait inside the transaction.
	holder := mustAcquire(t, l, ctx, "tx")
	tx3, _ := db.BeginTx(ctx, nil)
	if _, err := tx3.ExecContext(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireTx(ctx, tx3, "tx"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("AcquireTx past lock_timeout: %v", err)
	}
	_ = tx3.Rollback()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(context.Context, pglock.Tx, string) (lock.Fence, error){l.AcquireTx, l.TryAcquireTx} {
		if _, err := f(ctx, nil, "x"); err == nil {
			t.Error("nil Tx accepted")
		}
	}
}

// 100 goroutines contend around a read-sleep-write of a shared counter, with
// session locks (8 pooled connections) and with transaction locks.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	l, db, _ := setup(t, 8, nil)
	for _, mode := range []string{"xact"} { // session-level: lock/locktest's MutualExclusion
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			const n = 100
			var (
				counter   int
				inside    atomic.Int32
				maxInside atomic.Int32
				wg        sync.WaitGroup
			)
			critical := func() {
				in := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); in > m && !maxInside.CompareAndSwap(m, in); m = maxInside.Load() {
				}
				v := counter
				time.Sleep(time.Millisecond)
				counter = v + 1
			}
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Error(err)
						return
					}
					defer tx.Rollback()
					if _, err := l.AcquireTx(ctx, tx, "counter"); err != nil {
						t.Error(err)
						return
					}
					critical()
					if err := tx.Commit(); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if counter != n || maxInside.Load() != 1 {
				t.Fatalf("counter = %d (want %d), max inside = %d (want 1)", counter, n, maxInside.Load())
			}
		})
	}
}

// In a REPEATABLE READ or SERIALIZABLE transaction the snapshot predates
// the lock, so AcquireTx and TryAcquireTx refuse with ErrIsolation, naming
// the level, and take no lock; with fences and without.
func TestTransactionLevelRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*pglock.Config{nil, {NoFence: true}} {
		l, db, _ := setup(t, 4, cfg)
		ctx := ctxT(t, 30*time.Second)
		for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			for name, f := range map[string]func(context.Context, pglock.Tx, string) (lock.Fence, error){
				"AcquireTx": l.AcquireTx, "TryAcquireTx": l.TryAcquireTx,
			} {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
				if err != nil {
					t.Fatal(err)
				}
				_, err = f(ctx, tx, "iso")
				if !errors.Is(err, pglock.ErrIsolation) || !strings.Contains(err.Error(), strings.ToLower(level.String())) {
					t.Errorf("%s in a %v transaction (NoFence %v): %v, want ErrIsolation naming the level", name, level, configOf(l).NoFence, err)
				}
				// Nothing was locked: another session gets the lock while
				// the refused transaction is still open.
				ls, err := l.TryAcquire(ctx, "iso")
				if err != nil {
					t.Fatalf("%s in a %v transaction took the lock: %v", name, level, err)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// READ COMMITTED, explicitly, still works.
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.AcquireTx(ctx, tx, "iso"); err != nil {
			t.Fatalf("AcquireTx in READ COMMITTED: %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}
