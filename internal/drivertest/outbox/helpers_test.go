package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
)

func TestMain(m *testing.M) {
	testenv.RunSQLChild(vanishingRelay) // TestVanishedRelayHost's child
	goleak.VerifyTestMain(m)
}

type backend struct {
	name    string
	dialect outbox.Dialect
	open    func(t testing.TB) (*sql.DB, string)
}

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

func backends() []backend {
	return []backend{
		{"postgres", outbox.Postgres, func(t testing.TB) (*sql.DB, string) {
			db, dsn := testenv.PostgresDB(t)
			db.SetMaxOpenConns(16)
			return db, dsn
		}},
		{"mysql", outbox.MySQL, func(t testing.TB) (*sql.DB, string) {
			db, dsn := testenv.MySQLDB(t)
			db.SetMaxOpenConns(16)
			return db, dsn
		}},
		{"sqlite", outbox.SQLite, func(t testing.TB) (*sql.DB, string) {
			dsn := sqliteDSN(testenv.SQLitePath(t))
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.PingContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(2)
			t.Cleanup(func() { db.Close() })
			return db, dsn
		}},
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type fixture struct {
	db    *sql.DB
	ob    *outbox.Outbox
	b     backend
	table string
}

func newFixture(t testing.TB, b backend) *fixture {
	t.Helper()
	db, _ := b.open(t)
	table := testenv.Name("ob")
	ob, err := outbox.New(db, &outbox.Config{Dialect: b.dialect, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return &fixture{db: db, ob: ob, b: b, table: table}
}

// enqueue commits one transaction holding ms.
func (f *fixture) enqueue(t testing.TB, ms ...outbox.Message) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := f.ob.Enqueue(ctx, tx, m); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func msg(id, key string) outbox.Message {
	return outbox.Message{ID: id, Destination: "orders", OrderingKey: key, Payload: []byte("p-" + id), Headers: map[string]string{"k": id}}
}

// recorder is an in-memory broker: it confirms every message unless told
// to refuse it (permanently) or to fail everything (transiently, "away").
type recorder struct {
	mu        sync.Mutex
	got       []outbox.Message
	count     map[string]int
	refuse    map[string]bool
	away      bool
	calls     int
	inFlight  map[string]bool // ordering keys being published right now
	violation string
}

func newRecorder() *recorder {
	return &recorder{count: map[string]int{}, refuse: map[string]bool{}, inFlight: map[string]bool{}}
}

var errAway = errors.New("broker away")

func (r *recorder) Publish(ctx context.Context, batch []outbox.Message) []error {
	r.mu.Lock()
	r.calls++
	errs := make([]error, len(batch))
	for i, m := range batch {
		switch {
		case r.away:
			errs[i] = errAway
		case r.refuse[m.ID]:
			errs[i] = outbox.Permanent(errors.New("too large"))
		case m.OrderingKey != "" && r.inFlight[m.OrderingKey]:
			r.violation = "two messages of key " + m.OrderingKey + " in flight at once"
		}
		if errs[i] == nil && m.OrderingKey != "" {
			r.inFlight[m.OrderingKey] = true
		}
	}
	r.mu.Unlock()
	time.Sleep(time.Millisecond) // a broker round trip, so that relays overlap
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range batch {
		if errs[i] != nil {
			continue
		}
		delete(r.inFlight, m.OrderingKey)
		r.got = append(r.got, m)
		r.count[m.ID]++
	}
	return errs
}

func (r *recorder) snapshot() ([]outbox.Message, map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(map[string]int, len(r.count))
	for k, v := range r.count {
		c[k] = v
	}
	return append([]outbox.Message(nil), r.got...), c, r.calls
}

// counter is an Observer that counts.
type counter struct {
	mu                         sync.Mutex
	published, retried, parked int
	lags                       int
}

func (c *counter) Published(n int)               { c.mu.Lock(); c.published += n; c.mu.Unlock() }
func (c *counter) Retried(outbox.Message, error) { c.mu.Lock(); c.retried++; c.mu.Unlock() }
func (c *counter) Parked(outbox.Message, string) { c.mu.Lock(); c.parked++; c.mu.Unlock() }
func (c *counter) Lag(time.Duration)             { c.mu.Lock(); c.lags++; c.mu.Unlock() }
func (c *counter) get() (published, retried, parked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.published, c.retried, c.parked
}

// drain runs passes until one claims nothing.
func drain(t testing.TB, r *outbox.Relay) {
	t.Helper()
	for range 10000 {
		n, err := r.RunOnce(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("relay never ran dry")
}

// waitFor polls cond (a database read) until it holds; the timeout is only
// a guard against a hang (cond false for adaptertest.StallTimeout), never
// the assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	adaptertest.WaitProgress(t, what, adaptertest.StallTimeout, func() (int, bool) { return 0, cond() }, nil)
}

// waitSent waits until want messages are sent; it fails only when none was
// sent for adaptertest.StallTimeout (a slow machine is waited for, a stuck
// relay is reported).
func (f *fixture) waitSent(t testing.TB, what string, want int) {
	t.Helper()
	adaptertest.WaitProgress(t, what, adaptertest.StallTimeout, func() (int, bool) {
		n := f.countState(t, outbox.Sent)
		return n, n == want
	}, func() string {
		return strconv.Itoa(f.countState(t, outbox.Pending)) + " pending, " + strconv.Itoa(f.countState(t, outbox.Parked)) + " parked"
	})
}

func (f *fixture) countState(t testing.TB, state outbox.State) int {
	t.Helper()
	var n int
	q := `SELECT COUNT(*) FROM ` + f.table + ` WHERE state = ` + strconv.Itoa(int(state))
	if err := f.db.QueryRowContext(ctxT(t), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
