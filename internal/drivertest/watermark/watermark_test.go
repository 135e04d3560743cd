package watermark_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/watermark"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
)

type backend struct {
	name    string
	dialect inbox.Dialect
	open    func(t *testing.T) *sql.DB
}

func backends() []backend {
	return []backend{
		{"postgres", inbox.Postgres, func(t *testing.T) *sql.DB { db, _ := testenv.PostgresDB(t); db.SetMaxOpenConns(10); return db }},
		{"mysql", inbox.MySQL, func(t *testing.T) *sql.DB { db, _ := testenv.MySQLDB(t); db.SetMaxOpenConns(10); return db }},
		{"sqlite", inbox.SQLite, func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
			if err != nil {
				t.Fatal(err)
			}
			// WAL on one connection first (concurrent first opens race on it).
			if err := db.PingContext(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(2)
			t.Cleanup(func() { db.Close() })
			return db
		}},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T, b backend, mode watermark.Mode) (*sql.DB, *watermark.Table, string) {
	db := b.open(t)
	name := testenv.Name("account")
	if _, err := db.ExecContext(ctxT(t), `CREATE TABLE `+name+` (id VARCHAR(64) PRIMARY KEY, version BIGINT NOT NULL, deleted BOOLEAN NOT NULL DEFAULT FALSE, balance BIGINT, owner VARCHAR(100))`); err != nil {
		t.Fatal(err)
	}
	wm, err := watermark.New(name, &watermark.Config{Dialect: b.dialect, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return db, wm, name
}

// step is one event and what applying it must report.
type step struct {
	del     bool
	version int64
	balance int64
	want    watermark.Result
	wantErr error
}

func run(t *testing.T, db *sql.DB, wm *watermark.Table, table string, steps []step) {
	t.Helper()
	ctx := ctxT(t)
	for i, s := range steps {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var res watermark.Result
		if s.del {
			res, err = wm.Delete(ctx, tx, "acc-1", s.version)
		} else {
			res, err = wm.Upsert(ctx, tx, "acc-1", s.version, map[string]any{"balance": s.balance, "owner": "ann"})
		}
		if cerr := tx.Commit(); cerr != nil {
			t.Fatal(cerr)
		}
		if res != s.want || !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("step %d (delete=%v v%d): %v, %v; want %v, %v", i, s.del, s.version, res, err, s.want, s.wantErr)
		}
	}
}

func (b backend) state(t *testing.T, db *sql.DB, wm *watermark.Table, table string) (version, balance int64, deleted bool) {
	t.Helper()
	v, d, found, err := wm.State(ctxT(t), db, "acc-1")
	if err != nil || !found {
		t.Fatalf("state: %v found=%v", err, found)
	}
	if err := db.QueryRowContext(ctxT(t), `SELECT balance FROM `+table+` WHERE id = `+b.dialect.Placeholder(1), "acc-1").Scan(&balance); err != nil {
		t.Fatal(err)
	}
	return v, balance, d
}

func TestLastWriterWins(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, wm, table := setup(t, b, watermark.LastWriterWins)
			run(t, db, wm, table, []step{
				{version: 1, balance: 10, want: watermark.Applied},   // first version: inserted
				{version: 1, balance: 10, want: watermark.Duplicate}, // redelivery
				{version: 3, balance: 30, want: watermark.Applied},   // v2 skipped: fine in LWW
				{version: 2, balance: 20, want: watermark.Stale},     // late event: no-op
				{del: true, version: 4, want: watermark.Applied},     // tombstone
				{version: 3, balance: 99, want: watermark.Stale},     // late update cannot resurrect
				{del: true, version: 4, want: watermark.Duplicate},
			})
			if v, bal, del := b.state(t, db, wm, table); v != 4 || bal != 30 || !del {
				t.Fatalf("state v%d balance %d deleted %v; want v4, 30, deleted", v, bal, del)
			}
			run(t, db, wm, table, []step{{version: 5, balance: 50, want: watermark.Applied}}) // newer: re-created
			if v, bal, del := b.state(t, db, wm, table); v != 5 || bal != 50 || del {
				t.Fatalf("state v%d balance %d deleted %v; want v5, 50, live", v, bal, del)
			}
		})
	}
}

func TestStrict(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, wm, table := setup(t, b, watermark.Strict)
			run(t, db, wm, table, []step{
				{version: 2, balance: 20, wantErr: watermark.ErrGap}, // no row yet
				{version: 1, balance: 10, want: watermark.Applied},
				{version: 3, balance: 30, wantErr: watermark.ErrGap}, // v2 missing
				{version: 2, balance: 20, want: watermark.Applied},
				{version: 2, balance: 20, want: watermark.Duplicate},
				{version: 1, balance: 10, want: watermark.Stale},
				{version: 3, balance: 30, want: watermark.Applied},
				{del: true, version: 4, want: watermark.Applied},
				{version: 3, balance: 99, want: watermark.Stale},     // v3 < v4: a late update stays dead
				{version: 4, balance: 99, want: watermark.Duplicate}, // same version as the tombstone
				{del: true, version: 6, wantErr: watermark.ErrGap},
			})
			if v, bal, del := b.state(t, db, wm, table); v != 4 || bal != 30 || !del {
				t.Fatalf("state v%d balance %d deleted %v; want v4, 30, deleted", v, bal, del)
			}
		})
	}
}

func TestTombstoneForUnknownRow(t *testing.T) {
	b := backends()[0]
	db, wm, table := setup(t, b, watermark.LastWriterWins)
	run(t, db, wm, table, []step{
		{del: true, version: 7, want: watermark.Applied}, // delete before any create arrives
		{version: 3, balance: 1, want: watermark.Stale},  // the create arrives late: stays deleted
		{version: 7, balance: 1, want: watermark.Duplicate},
	})
	if v, _, del, _ := mustState(t, wm, db); v != 7 || !del {
		t.Fatalf("v%d deleted=%v", v, del)
	}
}

func mustState(t *testing.T, wm *watermark.Table, db *sql.DB) (int64, int64, bool, bool) {
	v, d, found, err := wm.State(ctxT(t), db, "acc-1")
	if err != nil {
		t.Fatal(err)
	}
	return v, 0, d, found
}

// TestConcurrentOutOfOrder applies versions 1..n concurrently in random
// order. LWW: the row ends at n with n's data, whatever the interleaving.
// Strict: workers retry on ErrGap (as a broker redelivery would) and every
// version is applied exactly once.
func TestConcurrentOutOfOrder(t *testing.T) {
	for _, mode := range []watermark.Mode{watermark.LastWriterWins, watermark.Strict} {
		for _, b := range backends() {
			t.Run(fmt.Sprintf("%s/mode=%d", b.name, mode), func(t *testing.T) {
				t.Parallel()
				db, wm, table := setup(t, b, mode)
				ctx := ctxT(t)
				const n = 20
				order := rand.Perm(n)
				var mu sync.Mutex
				var applied []int64
				var wg sync.WaitGroup
				for _, i := range order {
					v := int64(i + 1)
					wg.Go(func() {
						for {
							tx, err := db.BeginTx(ctx, nil)
							if err != nil {
								t.Error(err)
								return
							}
							res, err := wm.Upsert(ctx, tx, "acc-1", v, map[string]any{"balance": v * 10})
							if err != nil {
								_ = tx.Rollback()
								if errors.Is(err, watermark.ErrGap) || inbox.IsRetryable(err) {
									time.Sleep(time.Millisecond)
									continue
								}
								t.Errorf("v%d: %v", v, err)
								return
							}
							if err := tx.Commit(); err != nil {
								if inbox.IsRetryable(err) {
									continue
								}
								t.Errorf("v%d commit: %v", v, err)
								return
							}
							if res == watermark.Applied {
								mu.Lock()
								applied = append(applied, v)
								mu.Unlock()
							}
							return
						}
					})
				}
				wg.Wait()
				if v, bal, _ := b.state(t, db, wm, table); v != n || bal != n*10 {
					t.Fatalf("final v%d balance %d; want v%d, %d", v, bal, n, n*10)
				}
				// Strict: every version applied exactly once (each on top of its
				// predecessor: the UPDATE's WHERE version = v-1). The order in
				// which goroutines append after their commit proves nothing, so
				// only the set is checked.
				seen := map[int64]bool{}
				for _, v := range applied {
					if seen[v] {
						t.Fatalf("v%d applied twice: %v", v, applied)
					}
					seen[v] = true
				}
				if mode == watermark.Strict && len(applied) != n {
					t.Fatalf("strict applied %d of %d versions: %v", len(applied), n, applied)
				}
			})
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		table, field string
		cfg          *watermark.Config
	}{
		{"t", "Config.Dialect", nil},
		{"t", "Config.Dialect", &watermark.Config{}},
		{"t;drop", "table", &watermark.Config{Dialect: inbox.Postgres}},
		{"t", "Config.VersionColumn", &watermark.Config{Dialect: inbox.Postgres, VersionColumn: "v v"}},
		{"t", "Config.Mode", &watermark.Config{Dialect: inbox.Postgres, Mode: 7}},
	} {
		_, err := watermark.New(c.table, c.cfg)
		configtest.Want(t, err, "watermark", c.field)
	}
	wm, _ := watermark.New("t", &watermark.Config{Dialect: inbox.SQLite})
	if _, err := wm.Upsert(context.Background(), nil, "k", 1, map[string]any{"version": 3}); !errors.Is(err, watermark.ErrInvalid) {
		t.Errorf("setting the version column: %v", err)
	}
	if _, err := wm.Upsert(context.Background(), nil, "k", 0, nil); !errors.Is(err, watermark.ErrInvalid) {
		t.Errorf("version 0: %v", err)
	}
}
