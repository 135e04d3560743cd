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
	d    sqlstore.Dialect // the business database's
	open func(t testing.TB) (*sql.DB, string)
	// redis: the store is a redisstore on the shared Redis (a key prefix
	// per test); otherwise a sqlstore on the business database.
	redis bool
}

func openPostgres(t testing.TB) (*sql.DB, string) {
	db, dsn := testenv.PostgresDB(t)
	db.SetMaxOpenConns(16)
	return db, dsn
}

var backends = []backend{
	{name: "SQLite", d: sqlstore.SQLite, open: func(t testing.TB) (*sql.DB, string) {
		dsn := sqlstore.SQLiteDSN(testenv.SQLitePath(t))
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, dsn
	}},
	{name: "Postgres", d: sqlstore.Postgres, open: openPostgres},
	{name: "MySQL", d: sqlstore.MySQL, open: func(t testing.TB) (*sql.DB, string) {
		db, dsn := testenv.MySQLDB(t)
		db.SetMaxOpenConns(16)
		return db, dsn
	}},
	// The recovery points in Redis, the business rows in PostgreSQL.
	{name: "Redis", d: sqlstore.Postgres, open: openPostgres, redis: true},
}

// wantLocal is how many times the local step name has its effect after a
// child was killed at point of step killed and the operation was
// retried. On a SQL store, once: its writes and its recovery point commit
// together. On Redis they cannot: the point is a store write of its own
// after the commit, so a kill between the two runs the step again (at
// least once, docs/steps.md), unless its write is idempotent: reserve, a
// plain INSERT, has its effect twice then; record, which writes under its
// derived key, once.
func (b backend) wantLocal(name, killed, point string) int {
	if b.redis && name != keyedLocal && name == killed && point == "after-effect" {
		return 2
	}
	return 1
}

// tally adds up the cells of one backend's matrix, for its summary line.
type tally struct {
	mu                                          sync.Mutex
	kills                                       int
	locals, localOnce, localTwice               int
	keyedOnce, keyedCalls                       int // at the service; the step's calls through the proxy
	unkeyedOnce, held, heldEffect, unkeyedTwice int
}

func (y *tally) add(c map[string]int, held bool) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.kills++
	for _, local := range []string{"reserve", "record"} {
		y.locals++
		switch {
		case c[local] == 1:
			y.localOnce++
		case c[local] > 1:
			y.localTwice++
		}
	}
	if c["charge"] == 1 {
		y.keyedOnce++
	}
	y.keyedCalls += c["charge-call"]
	switch {
	case c["emit"] > 1:
		y.unkeyedTwice++
	case held:
		y.held++
		y.heldEffect += c["emit"]
	case c["emit"] == 1:
		y.unkeyedOnce++
	}
}

func (y *tally) String() string {
	y.mu.Lock()
	defer y.mu.Unlock()
	return fmt.Sprintf("%d kills, local once %d/%d twice %d, keyed once %d/%d at the service (%d calls through the proxy), unkeyed once %d held %d (%d of them after the effect) twice %d",
		y.kills, y.localOnce, y.locals, y.localTwice, y.keyedOnce, y.kills, y.keyedCalls, y.unkeyedOnce, y.held, y.heldEffect, y.unkeyedTwice)
}

// TestCrashMatrix: a child process runs the four-step operation and is
// SIGKILLed at every boundary of every step (before it, inside it, after
// its effect and before its recovery point, after its recovery point);
// then the operation is retried here. On a SQL store every local step had
// its effect exactly once; on Redis as wantLocal says. The keyed foreign
// step reached its service once, through a real idem proxy; the unkeyed
// foreign step had its effect once, or the key is held (never twice).
// Each backend logs its counts in one line.
func TestCrashMatrix(t *testing.T) {
	svc := newChargeService(t) // one proxy for every cell: the orders are distinct
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			y := new(tally)
			t.Cleanup(func() { t.Logf("matrix %s: %v", b.name, y) }) // after every cell
			for _, name := range steps {
				for _, point := range points {
					t.Run(name+"/"+point, func(t *testing.T) {
						t.Parallel()
						crashCell(t, b, svc, y, name, point)
					})
				}
			}
		})
	}
}

// crashCell is the cell of b's matrix that kills at point of step name.
func crashCell(t *testing.T, b backend, svc *chargeService, y *tally, name, point string) {
	r := newRig(t, b, svc)
	id := testenv.Name("order")
	if rest := testenv.KillAtLine(t, "READY", time.Minute, r.childEnv(id, name, point), "-test.run=^$"); rest != "" {
		t.Fatalf("child said READY%s", rest)
	}
	v, err := r.retry(ctxT(t), id)
	held := errors.Is(err, idem.ErrOutcomeUnknown)
	if err != nil && !held {
		t.Fatalf("retry: %v", err)
	}
	c := r.counts(t, id)
	y.add(c, held)
	for _, local := range []string{"reserve", "record"} {
		if want := b.wantLocal(local, name, point); c[local] != want {
			t.Errorf("local step %s had its effect %d times, want %d", local, c[local], want)
		}
	}
	if c["charge"] != 1 {
		t.Errorf("the keyed foreign step charged %d times at its service (%d calls through the proxy), want once", c["charge"], c["charge-call"])
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
}

// TestConcurrentDuplicates: goroutines and processes run the same
// operation on one PostgreSQL database at once: each step's effect once,
// the charge step called once and charged once at its service.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	r := newRig(t, backends[1], newChargeService(t))
	const rounds, goroutines, processes = 3, 8, 3
	answers, once := 0, 0
	for round := range rounds {
		id := testenv.Name("order")
		var wg sync.WaitGroup
		results := make(chan string, goroutines+processes)
		for range processes {
			c := testenv.StartChild(t, r.childEnv(id, "", "none"), "-test.run=^$")
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
			} else {
				answers++
			}
		}
		c := r.counts(t, id)
		good := true
		for _, name := range []string{"reserve", "record", "emit", "charge", "charge-call"} {
			if c[name] != 1 {
				good = false
				t.Errorf("round %d: %s had %d effects, want 1", round, name, c[name])
			}
		}
		if good {
			once++
		}
	}
	t.Logf("concurrent duplicates on PostgreSQL: %d rounds of %d goroutines and %d processes: every effect once (charge at the service too) in %d/%d rounds, the same answer %d/%d",
		rounds, goroutines, processes, once, rounds, answers, rounds*(goroutines+processes))
}
