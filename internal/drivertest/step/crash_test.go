package step_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/step"
)

type backend struct {
	name string
	d    sqlstore.Dialect
	open func(t testing.TB) (*sql.DB, string)
}

var backends = []backend{
	{"SQLite", sqlstore.SQLite, func(t testing.TB) (*sql.DB, string) {
		dsn := sqlstore.SQLiteDSN(testenv.SQLitePath(t))
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, dsn
	}},
	{"Postgres", sqlstore.Postgres, func(t testing.TB) (*sql.DB, string) {
		db, dsn := testenv.PostgresDB(t)
		db.SetMaxOpenConns(16)
		return db, dsn
	}},
	{"MySQL", sqlstore.MySQL, func(t testing.TB) (*sql.DB, string) {
		db, dsn := testenv.MySQLDB(t)
		db.SetMaxOpenConns(16)
		return db, dsn
	}},
}

// TestCrashMatrix: a child process runs the four-step operation and is
// SIGKILLed at every boundary of every step (before it, inside it, after
// its effect and before its recovery point, after its recovery point);
// then the operation is retried here. Every local step had its effect
// exactly once, the keyed foreign step once at its service, and the
// unkeyed foreign step once, or the key is held (never twice).
func TestCrashMatrix(t *testing.T) {
	for _, b := range backends {
		for _, name := range steps {
			for _, point := range points {
				t.Run(fmt.Sprintf("%s/%s/%s", b.name, name, point), func(t *testing.T) {
					t.Parallel()
					db, dsn := b.open(t)
					r := newRig(t, b.d, db)
					id := testenv.Name("order")
					if rest := testenv.KillAtLine(t, "READY", time.Minute, r.childEnv(dsn, id, name, point), "-test.run=^$"); rest != "" {
						t.Fatalf("child said READY%s", rest)
					}
					v, err := r.retry(ctxT(t), id)
					held := errors.Is(err, idem.ErrOutcomeUnknown)
					if err != nil && !held {
						t.Fatalf("retry: %v", err)
					}
					c := r.counts(t, id)
					for _, local := range []string{"reserve", "record"} {
						if c[local] != 1 {
							t.Errorf("local step %s had its effect %d times, want once", local, c[local])
						}
					}
					if c["charge"] != 1 {
						t.Errorf("the keyed foreign step charged %d times at its service, want once", c["charge"])
					}
					switch {
					case c["emit"] > 1:
						t.Errorf("the unkeyed foreign step had its effect %d times", c["emit"])
					case held && (name != "emit" || point == "before" || point == "after-point"):
						t.Errorf("held, though the kill was not inside the unkeyed step: %v", err)
					case !held && c["emit"] != 1:
						t.Errorf("completed (%q) with the unkeyed step's effect %d times, want once", v, c["emit"])
					}
					// Every later call gets the same answer.
					again, err2 := r.retry(ctxT(t), id)
					if again != v || (err2 == nil) != (err == nil) {
						t.Errorf("replay = %q, %v; first answer %q, %v", again, err2, v, err)
					}
					var unknown *step.UnknownError
					if held && point != "after-point" && !errors.As(err, &unknown) {
						t.Errorf("held without naming the step: %v", err)
					}
				})
			}
		}
	}
}

// TestConcurrentDuplicates: goroutines and processes run the same
// operation on one PostgreSQL database at once: each step's effect once.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := backends[1]
	db, dsn := b.open(t)
	r := newRig(t, b.d, db)
	const rounds, goroutines, processes = 3, 8, 3
	for round := range rounds {
		id := testenv.Name("order")
		var wg sync.WaitGroup
		results := make(chan string, goroutines+processes)
		for range processes {
			c := testenv.StartChild(t, r.childEnv(dsn, id, "", "none"), "-test.run=^$")
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- c.Line("DONE ", time.Minute)
			}()
		}
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := r.retry(ctxT(t), id)
				if err != nil {
					t.Errorf("Do: %v", err)
				}
				results <- v
			}()
		}
		wg.Wait()
		close(results)
		var first string
		for v := range results {
			if first == "" {
				first = v
			}
			if v != first {
				t.Errorf("round %d: answers %q and %q", round, first, v)
			}
		}
		c := r.counts(t, id)
		for _, name := range []string{"reserve", "record", "emit", "charge", "charge-call"} {
			if c[name] != 1 {
				t.Errorf("round %d: %s had %d effects, want 1", round, name, c[name])
			}
		}
	}
}
