package step_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
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
	// The matrix's cells mostly wait: for a child to reach its point, for
	// its lease to lapse.
	testenv.RaiseParallel(4)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	if idemBin.cleanup != nil {
		idemBin.cleanup()
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rig is the operation under test: an order of four steps, each counting
// its effects in the table eff of the business database.
//
//  1. reserve: local (on a SQL store its effect and its recovery point
//     commit together; on Redis the point is a write of its own after the
//     commit)
//  2. charge:  foreign, keyed: a POST through idem's client, with the
//     step's derived key, to a real idem proxy in front of the charge
//     service, which counts the charges that reach it; every call the step
//     makes is counted too ("charge-call")
//  3. record:  local; on Redis it writes under its derived key (a unique
//     column), so a second run of it changes nothing
//  4. emit:    foreign without a key (HoldUnknown): its effect is a row
//     committed on its own before the recovery point
//
// hook is called at every boundary of every step; a crash child dies in
// it.
type rig struct {
	spec
	d      sqlstore.Dialect // the business database's
	db     *sql.DB
	store  step.Store
	sql    *sqlstore.Store // the store, when it keeps its records on the business database; nil on Redis
	client *http.Client    // idemclient's Transport
	svc    *chargeService  // the parent's
	hook   func(step, point string)
	// fail, when set, is asked first inside each local step: an error
	// fails the step (nothing committed).
	fail func(step string) error
}

// spec is what makes a rig, all a crash child needs to rebuild its
// parent's: the business database, the store, the proxy, and the child's
// part.
type spec struct {
	Dialect string // the business database's (sqlstore.ParseDialect)
	DSN     string
	Eff     string // the table of effects
	Table   string // sqlstore's table, on the business database
	Redis   string // or redisstore's server (a redis:// URL)
	Prefix  string // and its key prefix
	Proxy   string // idem proxy's URL, in front of the charge service
	Lease   time.Duration
	// The child runs the operation of key ID and dies at the boundary
	// Point of Step; with Point "none" it runs it to its end.
	ID, Step, Point string
}

// Kill points of a step.
var points = []string{"before", "inside", "after-effect", "after-point"}

var steps = []string{"reserve", "charge", "record", "emit"}

// keyedLocal is the local step that, on a store outside the business
// database, writes under its derived key.
const keyedLocal = "record"

func (r *rig) q(text string) string {
	text = strings.ReplaceAll(text, "{eff}", r.Eff)
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

// localEffect is a local step's write in tx: on a store outside the
// business database, the keyed local step writes under its derived key,
// once whatever the runs.
func (r *rig) localEffect(ctx context.Context, tx *sql.Tx, s *step.Step) error {
	if r.sql != nil || s.Name() != keyedLocal {
		return r.effect(ctx, tx, s.Owner(), s.Name())
	}
	_, err := tx.ExecContext(ctx, r.q("INSERT INTO {eff} (id, step, fence, k) VALUES (?, ?, ?, ?) ON CONFLICT (k) DO NOTHING"),
		s.Owner().Key.ID(), s.Name(), int64(s.Owner().Fence), s.Key())
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
		if err := r.localEffect(ctx, tx, s); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if r.sql != nil { // the recovery point in the step's transaction
			if err := s.SaveWith(ctx, 1, r.sql.StepTx(tx)); err != nil {
				_ = tx.Rollback()
				return 0, err
			}
		}
		r.hook(name, "inside") // written, not committed
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		r.hook(name, "after-effect") // committed (with its recovery point on a SQL store)
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
		id, err := r.charge(ctx, s)
		if err != nil {
			return "", err
		}
		r.hook("charge", "after-effect")
		return id, nil
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

// charge asks the charge service, through idem proxy, to charge the
// order s runs for, with the step's derived key: every attempt and every
// run of the step sends the same key, so the proxy lets one reach the
// service and answers the others with its stored answer.
func (r *rig) charge(ctx context.Context, s *step.Step) (string, error) {
	order := s.Owner().Key.ID()
	body, err := json.Marshal(chargeRequest{Order: order})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(idemclient.WithKey(ctx, s.Key()), http.MethodPost, r.Proxy+"/charges", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer shop") // the proxy's scope
	resp, err := r.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("charge order %s: %w", order, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", fmt.Errorf("charge order %s: %s: %s", order, resp.Status, text)
	}
	var ch chargeAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return "", fmt.Errorf("charge order %s: the answer: %w", order, err)
	}
	return ch.Charge, nil
}

// do runs the operation for key id, waiting while another holds it.
func (r *rig) do(ctx context.Context, id string) (string, error) {
	return step.Do(ctx, r.store, idem.MustKey("shop", id), r.opts(), r.op)
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
	return &idem.Options{Lease: r.Lease, Wait: true, PollInterval: 10 * time.Millisecond}
}

// connect makes the rig of sp on db, the business database: its store
// and its client. done releases their connections.
func connect(sp spec, db *sql.DB) (r *rig, done func(), err error) {
	d, err := sqlstore.ParseDialect(sp.Dialect)
	if err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{}
	it, err := idemclient.New(&idemclient.Config{Transport: tr})
	if err != nil {
		return nil, nil, err
	}
	r = &rig{spec: sp, d: d, db: db, client: &http.Client{Transport: it}, hook: func(string, string) {}}
	if sp.Redis == "" {
		if r.sql, err = sqlstore.New(db, &sqlstore.Config{Dialect: d, Table: sp.Table}); err != nil {
			return nil, nil, err
		}
		r.store = r.sql
		return r, tr.CloseIdleConnections, nil
	}
	opt, err := redis.ParseURL(sp.Redis)
	if err != nil {
		return nil, nil, fmt.Errorf("redis URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true // redisstore refuses a client without
	c := redis.NewClient(opt)
	if r.store, err = redisstore.New(c, &redisstore.Config{Prefix: sp.Prefix}); err != nil {
		c.Close()
		return nil, nil, err
	}
	return r, func() { tr.CloseIdleConnections(); c.Close() }, nil
}

// newRig makes the rig of backend b, with its business database, its
// store (migrated, or a fresh Redis key prefix) and its table of effects;
// the charge step goes to svc (nil: for a rig whose operation never runs).
func newRig(t testing.TB, b backend, svc *chargeService) *rig {
	t.Helper()
	db, dsn := b.open(t)
	sp := spec{Dialect: b.d.String(), DSN: dsn, Eff: testenv.Name("eff"), Lease: 3 * time.Second}
	if svc != nil {
		sp.Proxy = svc.proxy
	}
	if b.redis {
		sp.Prefix = testenv.UseRedis(t).Prefix // deletes the prefix's keys when t ends
		sp.Redis = testenv.Redis.DSN()
	} else {
		sp.Table = testenv.Name("idem")
	}
	r, closeRig, err := connect(sp, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRig)
	r.svc = svc
	ctx := ctxT(t)
	if r.sql != nil {
		if err := r.sql.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, r.q("CREATE TABLE {eff} (id VARCHAR(100) NOT NULL, step VARCHAR(40) NOT NULL, fence BIGINT NOT NULL, k VARCHAR(80) UNIQUE)")); err != nil {
		t.Fatal(err)
	}
	return r
}

// counts returns how many effects each step of the operation id had
// ("charge-call": the charge step's calls through the proxy), and
// "charge": the charges of it that reached the charge service. It fails t
// when one reached the service with another key than the step's.
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
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	id := key.ID()
	keys := r.svc.charges(id)
	want := step.DerivedKey(key, "charge")
	for _, k := range keys {
		if strings.Trim(k, `"`) != want {
			t.Errorf("order %s was charged with the key %q, want the charge step's %q", id, k, want)
		}
	}
	out["charge"] = len(keys)
	return out
}

// The child is this test binary re-executed with childEnv set to the JSON
// of a spec: it runs the operation and, at the boundary named (Step and
// Point), prints READY and waits for the parent's SIGKILL; with Point
// "none" it runs the operation to its end and prints DONE and the result.
const childEnv = "IDEM_STEP_CHILD"

func child() int {
	r, err := childRig()
	if err != nil {
		return childFailed(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := r.do(ctx, r.ID)
	if err != nil {
		return childFailed(err)
	}
	fmt.Println("DONE", v)
	return 0
}

// childRig is a child's rig, from the spec in childEnv, with the hook
// that prints READY at the boundary named and waits there.
func childRig() (*rig, error) {
	var sp spec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &sp); err != nil {
		return nil, fmt.Errorf("$%s: %w", childEnv, err)
	}
	d, err := sqlstore.ParseDialect(sp.Dialect)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(testenv.DriverName(d), sp.DSN)
	if err != nil {
		return nil, err
	}
	r, _, err := connect(sp, db)
	if err != nil {
		return nil, err
	}
	r.hook = func(name, point string) {
		if name == sp.Step && point == sp.Point {
			fmt.Println("READY")
			time.Sleep(2 * time.Minute) // the parent kills us long before
		}
	}
	return r, nil
}

func childFailed(err error) int {
	fmt.Println("ERROR", err)
	return 2
}

func (r *rig) childEnv(id, name, point string) []string {
	sp := r.spec
	sp.ID, sp.Step, sp.Point = id, name, point
	data, err := json.Marshal(sp)
	if err != nil {
		panic(err) // strings and a duration
	}
	return []string{childEnv + "=" + string(data)}
}
