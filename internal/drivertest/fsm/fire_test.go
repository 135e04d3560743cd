package fsm_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/idemkit/idem/fsm"
	"strings"
	"sync"
	"testing"
)

func TestFireApplied(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		res, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Set: map[string]any{"paid_at": "2026-01-02T03:04:05Z"}})
		if err != nil {
			t.Fatal(err)
		}
		if res != (fsm.Result{Outcome: fsm.Applied, State: "PAID", Version: 1}) {
			t.Fatalf("Fire = %+v, want applied PAID v1", res)
		}
		if r := e.row(1); r.State != "PAID" || r.Version != 1 || r.PaidAt.String != "2026-01-02T03:04:05Z" {
			t.Fatalf("row = %+v", r)
		}
		// The version handed back is the row's, whatever it was before.
		e.insert(2, "CREATED", 41)
		res, err = m.Fire(ctx, e.db, int64(2), "cancel", nil)
		if err != nil || res != (fsm.Result{Outcome: fsm.Applied, State: "CANCELLED", Version: 42}) {
			t.Fatalf("Fire = %+v, %v; want applied CANCELLED v42", res, err)
		}
	})
}

func TestFireDuplicate(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		if _, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Set: map[string]any{"paid_at": "first"}}); err != nil {
			t.Fatal(err)
		}

		// Same target: the retry is answered with the current row and writes nothing.
		res, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Set: map[string]any{"paid_at": "second"}})
		if err != nil || res != (fsm.Result{Outcome: fsm.Duplicate, State: "PAID", Version: 1}) {
			t.Fatalf("second pay = %+v, %v; want duplicate PAID v1", res, err)
		}
		if r := e.row(1); r.PaidAt.String != "first" || r.Version != 1 {
			t.Fatalf("duplicate wrote: %+v", r)
		}

		// Beyond the target: pay arrives again after shipping and delivery.
		for _, tr := range []string{"ship", "deliver"} {
			if _, err := m.Fire(ctx, e.db, int64(1), tr, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, tr := range []string{"pay", "ship", "deliver"} {
			res, err = m.Fire(ctx, e.db, int64(1), tr, nil)
			if err != nil || res != (fsm.Result{Outcome: fsm.Duplicate, State: "DELIVERED", Version: 3}) {
				t.Fatalf("%s on DELIVERED = %+v, %v; want duplicate DELIVERED v3", tr, res, err)
			}
		}
		// With a version guard from an old read, a duplicate is still a duplicate.
		res, err = m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Version: ptr[int64](0)})
		if err != nil || res.Outcome != fsm.Duplicate {
			t.Fatalf("guarded pay on DELIVERED = %+v, %v; want duplicate", res, err)
		}
	})
}

func TestFireIllegal(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		var alerts []*fsm.IllegalTransitionError
		m := e.machine(&fsm.Config{OnIllegalFunc: func(_ context.Context, err *fsm.IllegalTransitionError) {
			mu.Lock()
			alerts = append(alerts, err)
			mu.Unlock()
		}})
		e.insert(1, "CREATED", 0)
		e.insert(2, "CREATED", 0)
		e.insert(3, "CREATED", 0)

		cases := []struct {
			id         int64
			prepare    func()
			transition string
			current    string
			version    int64
		}{
			// No jump path: ship needs PAID.
			{1, func() {}, "ship", "CREATED", 0},
			// CANCELLED is reachable from PAID, but this order was cancelled unpaid:
			// a late payment is an anomaly (refund!), not a duplicate.
			{2, func() { mustFire(t, m, e.db, 2, "cancel") }, "pay", "CANCELLED", 1},
			// Data that no transition produced.
			{3, func() { e.force(3, "LOST") }, "pay", "LOST", 1},
		}
		for i, c := range cases {
			c.prepare()
			before := e.row(c.id)
			res, err := m.Fire(ctx, e.db, c.id, c.transition, &fsm.Options{Set: map[string]any{"note": "must not be written"}})
			if !errors.Is(err, fsm.ErrIllegalTransition) {
				t.Fatalf("%s on %s = %+v, %v; want ErrIllegalTransition", c.transition, c.current, res, err)
			}
			var ie *fsm.IllegalTransitionError
			if !errors.As(err, &ie) {
				t.Fatalf("error %T is not *IllegalTransitionError", err)
			}
			tr, _ := m.Transition(c.transition)
			if ie.Transition != c.transition || ie.To != tr.To || strings.Join(ie.From, ",") != strings.Join(tr.From, ",") ||
				ie.Current != c.current || ie.Version != c.version || ie.ID != c.id || ie.Table != e.table {
				t.Fatalf("error fields = %+v", ie)
			}
			if errors.Is(err, fsm.ErrStaleVersion) || errors.Is(err, fsm.ErrNotFound) {
				t.Fatalf("illegal error matches other sentinels: %v", err)
			}
			mu.Lock()
			if len(alerts) != i+1 || alerts[i] != ie {
				t.Fatalf("OnIllegalFunc calls = %v, want the returned error once", alerts)
			}
			mu.Unlock()
			if after := e.row(c.id); after != before {
				t.Fatalf("illegal transition wrote: %+v → %+v", before, after)
			}
		}
	})
}

func mustFire(t testing.TB, m *fsm.Machine, db fsm.Executor, id int64, tr string) fsm.Result {
	t.Helper()
	res, err := m.Fire(context.Background(), db, id, tr, nil)
	if err != nil {
		t.Fatalf("Fire(%d, %s): %v", id, tr, err)
	}
	return res
}

func TestFireStaleVersion(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		e.exec("UPDATE " + e.table + " SET note = 'edited', version = version + 1 WHERE id = 1") // someone else, v1

		res, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Version: ptr[int64](0)})
		var se *fsm.StaleVersionError
		if !errors.Is(err, fsm.ErrStaleVersion) || !errors.As(err, &se) {
			t.Fatalf("Fire with old version = %+v, %v; want ErrStaleVersion", res, err)
		}
		if se.Expected != 0 || se.Actual != 1 || se.Current != "CREATED" || se.Transition != "pay" {
			t.Fatalf("error fields = %+v", se)
		}
		if r := e.row(1); r.State != "CREATED" || r.Version != 1 {
			t.Fatalf("stale call wrote: %+v", r)
		}
		res, err = m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Version: ptr[int64](1)})
		if err != nil || res != (fsm.Result{Outcome: fsm.Applied, State: "PAID", Version: 2}) {
			t.Fatalf("Fire with current version = %+v, %v", res, err)
		}
	})
}

// TestFireZeroVersion: version 0 is a version, never "skip the check".
func TestFireZeroVersion(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 5)
		_, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Version: ptr[int64](0)})
		if !errors.Is(err, fsm.ErrStaleVersion) {
			t.Fatalf("Fire with version 0 on a v5 row: %v, want ErrStaleVersion", err)
		}
		e.insert(2, "CREATED", 0)
		res, err := m.Fire(ctx, e.db, int64(2), "pay", &fsm.Options{Version: ptr[int64](0)})
		if err != nil || res != (fsm.Result{Outcome: fsm.Applied, State: "PAID", Version: 1}) {
			t.Fatalf("Fire with version 0 on a v0 row = %+v, %v", res, err)
		}
	})
}

func TestFireNotFoundAndUnknown(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		_, err := m.Fire(ctx, e.db, int64(404), "pay", nil)
		if !errors.Is(err, fsm.ErrNotFound) || errors.Is(err, fsm.ErrIllegalTransition) {
			t.Fatalf("missing row: %v, want ErrNotFound", err)
		}
		ce := &countingExec{Executor: e.db}
		e.insert(1, "CREATED", 0)
		for _, c := range []struct {
			tr   string
			opts *fsm.Options
			want string
		}{
			{"refund", nil, "unknown transition"},
			{"pay", &fsm.Options{Set: map[string]any{"status": "PAID"}}, `must not write the "status" column`},
			{"pay", &fsm.Options{Set: map[string]any{"version": 9}}, `must not write the "version" column`},
			{"pay", &fsm.Options{Set: map[string]any{"id": 9}}, `must not write the "id" column`},
			// Unquoted identifiers are case-insensitive: on MySQL and SQLite
			// "STATUS = 'DELIVERED'" after Fire's own assignment would win.
			{"pay", &fsm.Options{Set: map[string]any{"STATUS": "DELIVERED"}}, `must not write the "STATUS" column`},
			{"pay", &fsm.Options{Set: map[string]any{"Status": "DELIVERED"}}, `must not write the "Status" column`},
			{"pay", &fsm.Options{Set: map[string]any{"VERSION": 0}}, `must not write the "VERSION" column`},
			{"pay", &fsm.Options{Set: map[string]any{"Id": 2}}, `must not write the "Id" column`},
			{"pay", &fsm.Options{Set: map[string]any{"paid_at": "a", "PAID_AT": "b"}}, "names one column twice"},
			{"pay", &fsm.Options{Fence: 5}, "needs Config.FenceColumn"},
			{"pay", &fsm.Options{Set: map[string]any{"note = 'x', status": "x"}}, "not a plain identifier"},
		} {
			_, err := m.Fire(ctx, ce, int64(1), c.tr, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Fire(%s, %+v) = %v, want error containing %q", c.tr, c.opts, err, c.want)
			}
		}
		if _, err := m.Fire(ctx, ce, int64(1), "refund", nil); !errors.Is(err, fsm.ErrUnknownTransition) {
			t.Fatalf("unknown transition: %v", err)
		}
		if n := ce.n.Load(); n != 0 {
			t.Fatalf("bad input reached the database: %d statements", n)
		}
		if r := e.row(1); r.State != "CREATED" || r.Version != 0 {
			t.Fatalf("row changed: %+v", r)
		}
	})
}

// TestFireOneStatement: on the common path a transition is one statement; a
// duplicate costs one more read.
func TestFireOneStatement(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		ce := &countingExec{Executor: e.db}
		res, err := m.Fire(ctx, ce, int64(1), "pay", &fsm.Options{Version: ptr[int64](0), Set: map[string]any{"paid_at": "now"}})
		if err != nil || res.Outcome != fsm.Applied {
			t.Fatalf("Fire = %+v, %v", res, err)
		}
		if n := ce.n.Load(); n != 1 || !strings.HasPrefix(ce.log[0], "UPDATE ") {
			t.Fatalf("applied transition ran %d statements %q, want exactly 1 UPDATE", n, ce.log)
		}
		ce = &countingExec{Executor: e.db}
		if res, err := m.Fire(ctx, ce, int64(1), "pay", nil); err != nil || res.Outcome != fsm.Duplicate {
			t.Fatalf("Fire = %+v, %v", res, err)
		}
		if n := ce.n.Load(); n != 2 || !strings.HasPrefix(ce.log[1], "SELECT ") {
			t.Fatalf("duplicate ran %d statements %q, want UPDATE + SELECT", n, ce.log)
		}
	})
}

// TestFireConcurrentSameTransition: 50 goroutines fire "pay" on one order:
// exactly one applies, the other 49 are duplicates.
func TestFireConcurrentSameTransition(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		const n = 50
		results := make([]fsm.Result, n)
		errs := make([]error, n)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range n {
			wg.Go(func() {
				start.Wait()
				results[i], errs[i] = m.Fire(context.Background(), e.db, int64(1), "pay", nil)
			})
		}
		start.Done()
		wg.Wait()
		applied := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("goroutine %d: %v", i, errs[i])
			}
			switch results[i].Outcome {
			case fsm.Applied:
				applied++
			case fsm.Duplicate:
				if results[i].State != "PAID" || results[i].Version != 1 {
					t.Fatalf("duplicate saw %+v", results[i])
				}
			}
		}
		if applied != 1 {
			t.Fatalf("%d goroutines applied pay, want exactly 1", applied)
		}
		if r := e.row(1); r.State != "PAID" || r.Version != 1 {
			t.Fatalf("row = %+v, want PAID v1", r)
		}
	})
}

// TestFireConcurrentCompeting: pay and cancel race from CREATED, every caller
// guarding with the version it read (0). Exactly one call applies; every
// other outcome follows from which one won.
func TestFireConcurrentCompeting(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		const n = 40
		type out struct {
			tr  string
			res fsm.Result
			err error
		}
		outs := make([]out, n)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range n {
			tr := "pay"
			if i%2 == 1 {
				tr = "cancel"
			}
			wg.Go(func() {
				start.Wait()
				res, err := m.Fire(context.Background(), e.db, int64(1), tr, &fsm.Options{Version: ptr[int64](0)})
				outs[i] = out{tr, res, err}
			})
		}
		start.Done()
		wg.Wait()
		final := e.row(1)
		var winner string
		for _, o := range outs {
			if o.err == nil && o.res.Outcome == fsm.Applied {
				if winner != "" {
					t.Fatalf("two calls applied (%s and %s)", winner, o.tr)
				}
				winner = o.tr
			}
		}
		if final.Version != 1 || (winner == "pay") != (final.State == "PAID") || (winner == "cancel") != (final.State == "CANCELLED") {
			t.Fatalf("winner %q, final row %+v", winner, final)
		}
		for _, o := range outs {
			if o.err == nil && o.res.Outcome == fsm.Applied {
				continue
			}
			switch {
			case o.tr == winner:
				if o.err != nil || o.res.Outcome != fsm.Duplicate {
					t.Fatalf("loser of the same transition: %+v, %v; want duplicate", o.res, o.err)
				}
			case winner == "pay": // cancel is still allowed from PAID, but not from the version read
				if !errors.Is(o.err, fsm.ErrStaleVersion) {
					t.Fatalf("cancel after pay with stale version: %+v, %v; want ErrStaleVersion", o.res, o.err)
				}
			default: // pay on a cancelled, unpaid order
				if !errors.Is(o.err, fsm.ErrIllegalTransition) {
					t.Fatalf("pay after cancel: %+v, %v; want ErrIllegalTransition", o.res, o.err)
				}
			}
		}
	})
}

// TestFireLostRace injects a concurrent writer between the UPDATE and the
// classifying read: the row reaches a source state just after the UPDATE
// missed it, so Fire runs the UPDATE again, and gives up after MaxAttempts.
func TestFireLostRace(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(&fsm.Config{MaxAttempts: 4})

		// Once: "ship" arrives while the order is CREATED; "pay" lands meanwhile.
		e.insert(1, "CREATED", 0)
		ce := &countingExec{Executor: e.db, before: func(n int64, q string) {
			if n == 2 {
				e.force(1, "PAID")
			}
		}}
		res, err := m.Fire(ctx, ce, int64(1), "ship", nil)
		if err != nil || res != (fsm.Result{Outcome: fsm.Applied, State: "SHIPPED", Version: 2}) {
			t.Fatalf("Fire = %+v, %v; want applied on the second UPDATE", res, err)
		}
		if n := ce.n.Load(); n != 3 {
			t.Fatalf("%d statements, want UPDATE, SELECT, UPDATE", n)
		}

		// Always: the bound holds.
		e.insert(2, "CREATED", 0)
		ce = &countingExec{Executor: e.db, before: func(n int64, q string) {
			if strings.HasPrefix(q, "UPDATE") {
				e.force(2, "CREATED")
			} else {
				e.force(2, "PAID")
			}
		}}
		_, err = m.Fire(ctx, ce, int64(2), "ship", nil)
		if !errors.Is(err, fsm.ErrLostRace) {
			t.Fatalf("Fire = %v, want ErrLostRace", err)
		}
		if n := ce.n.Load(); n != 8 {
			t.Fatalf("%d statements, want 4 × (UPDATE + SELECT)", n)
		}
	})
}

// TestFireInCallerTx: the transition joins the caller's transaction and
// rolls back with it.
func TestFireInCallerTx(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)

		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res := mustFire(t, m, tx, 1, "pay"); res.Outcome != fsm.Applied {
			t.Fatalf("in tx: %+v", res)
		}
		if res := mustFire(t, m, tx, 1, "pay"); res.Outcome != fsm.Duplicate {
			t.Fatalf("in tx, again: %+v", res)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if r := e.row(1); r.State != "CREATED" || r.Version != 0 {
			t.Fatalf("rolled-back transition persisted: %+v", r)
		}

		tx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustFire(t, m, tx, 1, "pay")
		mustFire(t, m, tx, 1, "ship")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := e.row(1); r.State != "SHIPPED" || r.Version != 2 {
			t.Fatalf("committed row = %+v", r)
		}
	})
}

// TestFireInStaleSnapshot: the caller's transaction read the row before a
// concurrent pay committed; its own pay must be classified against the
// latest row (duplicate), not its snapshot. On SQLite the database refuses
// to upgrade a stale read transaction, and Fire surfaces that error.
func TestFireInStaleSnapshot(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var state string
		if err := tx.QueryRowContext(ctx, "SELECT status FROM "+e.table+" WHERE id = 1").Scan(&state); err != nil {
			t.Fatal(err)
		}
		mustFire(t, m, e.db, 1, "pay") // another connection, committed

		res, err := m.Fire(ctx, tx, int64(1), "pay", nil)
		if e.dialect == fsm.SQLite {
			if err == nil || errors.Is(err, fsm.ErrLostRace) || !strings.Contains(err.Error(), "database is locked") {
				t.Fatalf("SQLite stale snapshot: %+v, %v; want the database's busy error", res, err)
			}
			return
		}
		if err != nil || res != (fsm.Result{Outcome: fsm.Duplicate, State: "PAID", Version: 1}) {
			t.Fatalf("Fire in stale snapshot = %+v, %v; want duplicate PAID v1", res, err)
		}
	})
}

func TestFireCancelledContext(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := m.Fire(ctx, e.db, int64(1), "pay", nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Fire with cancelled ctx: %v", err)
		}
		if r := e.row(1); r.State != "CREATED" {
			t.Fatalf("row = %+v", r)
		}
	})
}

var _ fsm.Executor = (*sql.DB)(nil)
var _ fsm.Executor = (*sql.Tx)(nil)
var _ fsm.Executor = (*sql.Conn)(nil)

// TestFireRepeatableReadPostgres: in a PostgreSQL REPEATABLE READ transaction
// whose snapshot predates a concurrent transition, the UPDATE itself fails
// with a serialization error (40001), which Fire returns wrapped.
func TestFireRepeatableReadPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fsm.Postgres)
	ctx := context.Background()
	m := e.machine(nil)
	e.insert(1, "CREATED", 0)
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var state string
	if err := tx.QueryRowContext(ctx, "SELECT status FROM "+e.table+" WHERE id = 1").Scan(&state); err != nil {
		t.Fatal(err)
	}
	mustFire(t, m, e.db, 1, "pay")
	res, err := m.Fire(ctx, tx, int64(1), "pay", nil)
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "40001" {
		t.Fatalf("Fire in a stale REPEATABLE READ snapshot = %+v, %v; want SQLSTATE 40001", res, err)
	}
}
