package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// Benchmarks: a first claim plus its completion, and a replay, at 1, 8 and
// 32 concurrent callers. On PostgreSQL the Raw… sub-benchmarks run the
// Store's own statements straight through database/sql (the floor for this
// driver), and bench/sqlstore/run.sh runs the same statements with pgbench.
//
//	go test -run '^$' -bench . -benchtime 5s -count 3 ./internal/drivertest/sqlstore
//	bench/sqlstore/run.sh   # PostgreSQL: this package next to pgbench

var benchResult = []byte(`{"id":"ch_1","amount":100}`)

const replayKeys = 1000

func BenchmarkPostgres(b *testing.B) { benchBackend(b, backends[0], "") }
func BenchmarkMySQL(b *testing.B)    { benchBackend(b, backends[1], "interpolateParams=true") }
func BenchmarkSQLite(b *testing.B)   { benchBackend(b, backends[2], "") }

func benchBackend(b *testing.B, be backend, params string) {
	// One database, table and set of completed records for every
	// sub-benchmark: b.Run calls each function several times to size b.N.
	s, db := benchStore(b, be, params)
	keys := preload(b, s)
	claim, complete := claimSQL(be.dialect, s.Table()), completeSQL(be.dialect, s.Table())
	for _, c := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("BeginComplete/c=%d", c), func(b *testing.B) {
			pool(db, c)
			prefix := testenv.Name("k")
			parallel(b, c, func(ctx context.Context, i int) error {
				cl, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("bench", prefix+strconv.Itoa(i))})
				if err != nil {
					return err
				}
				if cl.Outcome != idem.Acquired {
					return fmt.Errorf("outcome %v", cl.Outcome)
				}
				return s.Complete(ctx, cl.Owner, benchResult)
			})
		})
		// Options.AtMostOnce's cost: the MarkStarted write between the
		// claim and the completion, compared with BeginComplete above.
		b.Run(fmt.Sprintf("BeginMarkComplete/c=%d", c), func(b *testing.B) {
			pool(db, c)
			prefix := testenv.Name("k")
			parallel(b, c, func(ctx context.Context, i int) error {
				cl, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("bench", prefix+strconv.Itoa(i))})
				if err != nil {
					return err
				}
				if cl.Outcome != idem.Acquired {
					return fmt.Errorf("outcome %v", cl.Outcome)
				}
				if err := s.MarkStarted(ctx, cl.Owner); err != nil {
					return err
				}
				return s.Complete(ctx, cl.Owner, benchResult)
			})
		})
		b.Run(fmt.Sprintf("Replay/c=%d", c), func(b *testing.B) {
			pool(db, c)
			parallel(b, c, func(ctx context.Context, i int) error {
				cl, err := s.Begin(ctx, idem.BeginRequest{Key: keys[i%len(keys)]})
				if err != nil {
					return err
				}
				if cl.Outcome != idem.Replay {
					return fmt.Errorf("outcome %v", cl.Outcome)
				}
				return nil
			})
		})
		if be.dialect != sqlstore.Postgres {
			continue
		}
		// The same statements, arguments and pool without the Store.
		b.Run(fmt.Sprintf("RawBeginComplete/c=%d", c), func(b *testing.B) {
			pool(db, c)
			prefix := testenv.Name("k")
			parallel(b, c, func(ctx context.Context, i int) error {
				d := idem.MustKey("bench", prefix+strconv.Itoa(i)).Digest()
				var fp idem.Fingerprint
				tok := idem.NewToken()
				rows, err := db.QueryContext(ctx, claim, d[:], fp[:], tok[:], int64(30e6), int64(86400e6))
				if err != nil {
					return err
				}
				for rows.Next() {
				}
				if err := rows.Close(); err != nil {
					return err
				}
				_, err = db.ExecContext(ctx, complete, d[:], tok[:], benchResult)
				return err
			})
		})
		b.Run(fmt.Sprintf("RawReplay/c=%d", c), func(b *testing.B) {
			pool(db, c)
			parallel(b, c, func(ctx context.Context, i int) error {
				d := keys[i%len(keys)].Digest()
				var fp idem.Fingerprint
				tok := idem.NewToken()
				rows, err := db.QueryContext(ctx, claim, d[:], fp[:], tok[:], int64(30e6), int64(86400e6))
				if err != nil {
					return err
				}
				for rows.Next() {
				}
				return rows.Close()
			})
		})
	}
}

// benchStore opens a fresh database.
func benchStore(b *testing.B, be backend, params string) (*sqlstore.Store, *sql.DB) {
	db, dsn := be.open(b)
	if params != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		db = openDSN(b, be.driver, dsn+sep+params)
	}
	return newStore(b, be, db), db
}

// pool sizes db's pool to the number of callers, as an application would.
func pool(db *sql.DB, c int) {
	db.SetMaxOpenConns(c)
	db.SetMaxIdleConns(c)
}

// preload completes replayKeys records, eight at a time.
func preload(b *testing.B, s *sqlstore.Store) []idem.Key {
	keys := make([]idem.Key, replayKeys)
	for i := range keys {
		keys[i] = idem.MustKey("bench", "replay-"+strconv.Itoa(i))
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 8 {
				cl, err := s.Begin(ctx, idem.BeginRequest{Key: keys[i]})
				if err == nil {
					err = s.Complete(ctx, cl.Owner, benchResult)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return keys
}

// parallel runs op b.N times from c goroutines and reports throughput.
func parallel(b *testing.B, c int, op func(ctx context.Context, i int) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := op(ctx, int(i)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}

// pgbench runs the Store's statements with its own variables for the key
// (:k) and the token (:t); the fingerprint (zero), the lease, the
// retention and the result are the benchmark's constants.
func pgbenchScripts() map[string]string {
	s, err := sqlstore.New(&sql.DB{}, &sqlstore.Config{Dialect: sqlstore.Postgres, Table: "idem_bench"})
	if err != nil {
		panic(err)
	}
	key := `decode(lpad(to_hex(:k::bigint), 64, '0'), 'hex')`
	token := `decode(lpad(to_hex(:t::bigint), 32, '0'), 'hex')`
	fp := `'\x` + strings.Repeat("00", 32) + `'::bytea`
	result := fmt.Sprintf(`'\x%x'::bytea`, benchResult)
	claim := strings.NewReplacer("$1", key, "$2", fp, "$3", token, "$4", "30000000", "$5", "86400000000").Replace(claimSQL(sqlstore.Postgres, s.Table()))
	complete := strings.NewReplacer("$1", key, "$2", token, "$3", result).Replace(completeSQL(sqlstore.Postgres, s.Table()))
	head := "-- Generated by TestPgbenchScripts (sqlstore/bench_test.go) from the Store's statements; do not edit.\n"
	return map[string]string{
		"begin_complete.sql": head + "\\set k random(1, 9223372036854775806)\n\\set t random(1, 9223372036854775806)\n" + claim + ";\n" + complete + ";\n",
		"replay.sql":         head + fmt.Sprintf("\\set k random(1, %d)\n\\set t random(1, 9223372036854775806)\n", replayKeys) + claim + ";\n",
		"preload.sql": head + fmt.Sprintf(`INSERT INTO idem_bench (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at)
SELECT decode(lpad(to_hex(g), 64, '0'), 'hex'), 2, %s, decode(lpad(to_hex(g), 32, '0'), 'hex'), 1, %s, 0, 0, 9000000000000000
FROM generate_series(1, %d) g;
`, fp, result, replayKeys),
	}
}

// The pgbench scripts under bench/sqlstore are the Store's statements
// verbatim. IDEM_UPDATE_PGBENCH=1 rewrites them.
func TestPgbenchScripts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "..", "bench", "sqlstore")
	for name, want := range pgbenchScripts() {
		path := filepath.Join(dir, name)
		if os.Getenv("IDEM_UPDATE_PGBENCH") == "1" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (IDEM_UPDATE_PGBENCH=1 go test -run TestPgbenchScripts ./internal/drivertest/sqlstore writes it)", err)
		}
		if string(got) != want {
			t.Errorf("%s differs from the Store's statements; run IDEM_UPDATE_PGBENCH=1 go test -run TestPgbenchScripts ./internal/drivertest/sqlstore", path)
		}
	}
}
