// Package adaptertest is the test scaffolding the broker adapters of inbox
// (natsinbox, amqpinbox, kafkainbox) share: an effects database behind a real
// Inbox, a Processor that counts outcomes, polling, and the parent and child
// halves of the crash test that SIGKILLs a consumer between its commit and
// its ack. The outbox adapters' tests share its ordered enqueue and its
// waiters (WaitProgress, WaitApplied), which fail when a pipeline stops
// moving, not when a busy machine makes it slow. Only tests import it.
package adaptertest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// ProcessorFunc is a function that is an inbox.Processor.
type ProcessorFunc func(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error)

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	return f(ctx, consumer, id, h)
}

// QuietLogger silences an adapter: the tests provoke failures on purpose and
// assert on outcomes, not on log lines.
func QuietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

// WaitFor polls cond every 20ms until it holds, and fails t when it still
// does not after d.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops s and reports (without stopping the test) a Stop that fails or
// takes longer than timeout.
func Stop(t testing.TB, s interface{ Stop(context.Context) error }, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// EffectDB is an inbox database plus an effects table: one row per handler
// commit, with no unique constraint, so a duplicate effect would show.
type EffectDB struct {
	DB    *sql.DB
	Inbox *inbox.Inbox
}

// NewPostgresInbox opens a private PostgreSQL schema with a migrated inbox
// and an effects table. The DSN reaches the same schema from a child process.
func NewPostgresInbox(t testing.TB) (*EffectDB, string) {
	t.Helper()
	db, dsn := testenv.PostgresDB(t)
	return SetupInbox(t, db, inbox.Postgres), dsn
}

// SetupInbox migrates a default inbox on db and creates the effects table.
func SetupInbox(t testing.TB, db *sql.DB, d inbox.Dialect) *EffectDB {
	t.Helper()
	ib, err := inbox.New(db, &inbox.Config{Dialect: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id VARCHAR(255) NOT NULL, body VARCHAR(255) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &EffectDB{DB: db, Inbox: ib}
}

// InsertEffect is the business change of the tests: one effects row, written
// in the inbox transaction tx (PostgreSQL placeholders).
func InsertEffect(ctx context.Context, tx *sql.Tx, id, body string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, body) VALUES ($1, $2)`, id, body)
	return err
}

// Counts returns the number of effect rows and of distinct IDs among them.
func (e *EffectDB) Counts(t testing.TB) (rows, distinct int) {
	t.Helper()
	if err := e.DB.QueryRow(`SELECT count(*), count(DISTINCT id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// Recorder is an inbox.Processor that forwards to P and counts the outcomes, so
// tests can see Duplicate decisions. It panics on an outcome it does not know.
type Recorder struct {
	P                               inbox.Processor
	Processed, Duplicates, Failures atomic.Int64
}

// Process forwards to r.P and counts the result.
func (r *Recorder) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := r.P.Process(ctx, consumer, id, h)
	switch {
	case err != nil:
		r.Failures.Add(1)
	case out == inbox.Processed:
		r.Processed.Add(1)
	case out == inbox.Duplicate:
		r.Duplicates.Add(1)
	default:
		panic(fmt.Sprintf("unexpected outcome %v", out))
	}
	return out, err
}

// CountDown forwards to p and closes the returned channel when n calls have
// succeeded (Processed or Duplicate).
func CountDown(p inbox.Processor, n int64) (inbox.Processor, <-chan struct{}) {
	var done atomic.Int64
	all := make(chan struct{})
	return ProcessorFunc(func(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
		out, err := p.Process(ctx, consumer, id, h)
		if err == nil && done.Add(1) == n {
			close(all)
		}
		return out, err
	}), all
}

// DuplicatedIDs returns total message IDs "msg-0" … "msg-<unique-1>" in a
// random order, every one of them at least once and the rest repeats of
// random earlier ones: the traffic of an at-least-once broker.
func DuplicatedIDs(rng *rand.Rand, unique, total int) []string {
	ids := make([]string, 0, total)
	for i := range unique {
		ids = append(ids, "msg-"+strconv.Itoa(i))
	}
	for len(ids) < total {
		ids = append(ids, ids[rng.IntN(unique)])
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

// Main is an adapter package's TestMain: goleak checks every run, except a
// crash-test child (see Crash), which is SIGKILLed and never gets to check.
func Main(m *testing.M, c Crash) {
	if c.IsChild() {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
