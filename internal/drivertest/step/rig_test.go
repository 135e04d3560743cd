package step_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/step"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(inboxChildEnv) != "":
		os.Exit(inboxChild())
	case os.Getenv(childEnv) != "":
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rig is the operation under test, on one database: an order of four
// steps, each counting its effects in the table eff.
//
//  1. reserve: local (its effect and its recovery point commit together)
//  2. charge:  foreign, keyed: a service that deduplicates by the step's
//     derived key (the table svc, whose primary key is that key); every
//     call is counted too ("charge-call")
//  3. record:  local
//  4. emit:    foreign without a key (HoldUnknown): its effect is a row
//     committed on its own before the recovery point
//
// hook is called at every boundary of every step; a crash child dies in
// it.
type rig struct {
	d        sqlstore.Dialect
	db       *sql.DB
	s        *sqlstore.Store
	table    string // the store's
	eff, svc string
	lease    time.Duration
	hook     func(step, point string)
	// fail, when set, is asked first inside each local step: an error
	// fails the step (nothing committed).
	fail func(step string) error
}

// Kill points of a step.
var points = []string{"before", "inside", "after-effect", "after-point"}

var steps = []string{"reserve", "charge", "record", "emit"}

func (r *rig) q(text string) string {
	text = strings.ReplaceAll(text, "{eff}", r.eff)
	text = strings.ReplaceAll(text, "{svc}", r.svc)
	if r.d == sqlstore.Postgres {
		for i := 1; strings.Contains(text, "?"); i++ {
			text = strings.Replace(text, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	return text
}

func (r *rig) effect(ctx context.Context, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, o idem.Owner, name string) error {
	_, err := ex.ExecContext(ctx, r.q("INSERT INTO {eff} (id, step, fence) VALUES (?, ?, ?)"), o.Key.ID(), name, int64(o.Fence))
	return err
}

func (r *rig) local(ctx context.Context, op *step.Op, name string) error {
	r.hook(name, "before")
	_, err := step.Run(ctx, op, name, nil, func(ctx context.Context, s *step.Step) (int, error) {
		if r.fail != nil {
			if err := r.fail(name); err != nil {
				return 0, err
			}
		}
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		if err := r.effect(ctx, tx, s.Owner(), name); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if err := s.SaveWith(ctx, 1, r.s.StepTx(tx)); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		r.hook(name, "inside") // written, not committed
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		r.hook(name, "after-effect") // committed with its recovery point
		return 1, nil
	})
	if err == nil {
		r.hook(name, "after-point")
	}
	return err
}

func (r *rig) op(ctx context.Context, op *step.Op) (string, error) {
	if err := r.local(ctx, op, "reserve"); err != nil {
		return "", err
	}
	r.hook("charge", "before")
	charge, err := step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (string, error) {
		r.hook("charge", "inside")
		if err := r.effect(ctx, r.db, s.Owner(), "charge-call"); err != nil {
			return "", err
		}
		dedup := "INSERT INTO {svc} (k) VALUES (?) ON CONFLICT DO NOTHING"
		if r.d == sqlstore.MySQL {
			dedup = "INSERT IGNORE INTO {svc} (k) VALUES (?)"
		}
		if _, err := r.db.ExecContext(ctx, r.q(dedup), s.Key()); err != nil {
			return "", err
		}
		r.hook("charge", "after-effect")
		return "ch-" + s.Key()[:8], nil
	})
	if err != nil {
		return "", err
	}
	r.hook("charge", "after-point")
	if err := r.local(ctx, op, "record"); err != nil {
		return "", err
	}
	r.hook("emit", "before")
	_, err = step.Run(ctx, op, "emit", &step.Options{Unknown: step.HoldUnknown}, func(ctx context.Context, s *step.Step) (int, error) {
		r.hook("emit", "inside") // the start mark is stored
		if err := r.effect(ctx, r.db, s.Owner(), "emit"); err != nil {
			return 0, err
		}
		r.hook("emit", "after-effect")
		return 1, nil
	})
	if err != nil {
		return "", err
	}
	r.hook("emit", "after-point")
	return "paid " + charge, nil
}

// do runs the operation for key id, waiting while another holds it.
func (r *rig) do(ctx context.Context, id string) (string, error) {
	return step.Do(ctx, r.s, idem.MustKey("shop", id), r.opts(), r.op)
}

// retry is a client's retry of the operation id: Do again while the
// claim is lost under it (a renewal that a loaded machine made too late),
// as a client retries until it gets an answer.
func (r *rig) retry(ctx context.Context, id string) (string, error) {
	for attempt := 1; ; attempt++ {
		v, err := r.do(ctx, id)
		if !errors.Is(err, idem.ErrLeaseLost) || attempt == 5 {
			return v, err
		}
	}
}

func (r *rig) opts() *idem.Options {
	return &idem.Options{Lease: r.lease, Wait: true, PollInterval: 10 * time.Millisecond}
}

// newRig makes the store and the two tables on db.
func newRig(t testing.TB, d sqlstore.Dialect, db *sql.DB) *rig {
	t.Helper()
	r := &rig{d: d, db: db, table: testenv.Name("idem"), eff: testenv.Name("eff"), svc: testenv.Name("svc"), lease: 3 * time.Second, hook: func(string, string) {}}
	var err error
	if r.s, err = sqlstore.New(db, &sqlstore.Config{Dialect: d, Table: r.table}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := r.s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{
		"CREATE TABLE {eff} (id VARCHAR(100) NOT NULL, step VARCHAR(40) NOT NULL, fence BIGINT NOT NULL)",
		"CREATE TABLE {svc} (k VARCHAR(80) NOT NULL PRIMARY KEY)",
	} {
		if _, err := db.ExecContext(ctx, r.q(ddl)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// counts returns how many effects each step of the operation id had, and
// the foreign service's deduplicated charges of it.
func (r *rig) counts(t testing.TB, id string) map[string]int {
	t.Helper()
	return r.countsOf(t, idem.MustKey("shop", id))
}

// countsOf is counts for the operation of key.
func (r *rig) countsOf(t testing.TB, key idem.Key) map[string]int {
	t.Helper()
	ctx := ctxT(t)
	out := map[string]int{}
	rows, err := r.db.QueryContext(ctx, r.q("SELECT step, count(*) FROM {eff} WHERE id = ? GROUP BY step"), key.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	var n int
	if err := r.db.QueryRowContext(ctx, r.q("SELECT count(*) FROM {svc} WHERE k = ?"), step.DerivedKey(key, "charge")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	out["charge"] = n
	return out
}

// The child is this test binary re-executed with childEnv set to
// "dialect|dsn|store table|eff|svc|key id|step|point|lease": it runs the
// operation and, at the boundary named (step and point), prints READY
// and waits for the parent's SIGKILL; with point "none" it runs the
// operation to its end and prints DONE and the result.
const childEnv = "IDEM_STEP_CHILD"

func child() int {
	r, id, err := childRig()
	if err != nil {
		return childFailed(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := r.do(ctx, id)
	if err != nil {
		return childFailed(err)
	}
	fmt.Println("DONE", v)
	return 0
}

// childRig is a child's rig, from childEnv, with the hook that prints
// READY at the boundary named and waits there; id is the key's.
func childRig() (r *rig, id string, err error) {
	parts := strings.Split(os.Getenv(childEnv), "|")
	if len(parts) != 9 {
		return nil, "", fmt.Errorf("bad %s", childEnv)
	}
	d, err := sqlstore.ParseDialect(parts[0])
	if err != nil {
		return nil, "", err
	}
	db, err := sql.Open(testenv.DriverName(d), parts[1])
	if err != nil {
		return nil, "", err
	}
	lease, err := time.ParseDuration(parts[8])
	if err != nil {
		return nil, "", err
	}
	r = &rig{d: d, db: db, table: parts[2], eff: parts[3], svc: parts[4], lease: lease}
	if r.s, err = sqlstore.New(db, &sqlstore.Config{Dialect: d, Table: parts[2]}); err != nil {
		return nil, "", err
	}
	r.hook = func(name, point string) {
		if name == parts[6] && point == parts[7] {
			fmt.Println("READY")
			time.Sleep(2 * time.Minute) // the parent kills us long before
		}
	}
	return r, parts[5], nil
}

func childFailed(err error) int {
	fmt.Println("ERROR", err)
	return 2
}

func (r *rig) childEnv(dsn, id, name, point string) []string {
	return []string{childEnv + "=" + strings.Join([]string{r.d.String(), dsn, r.table, r.eff, r.svc, id, name, point, r.lease.String()}, "|")}
}
