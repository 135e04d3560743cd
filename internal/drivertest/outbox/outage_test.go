package outbox_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
)

// TestDatabaseAway black-holes the relay's link to PostgreSQL for 3 s
// while the business keeps committing on its own link. The relay's passes
// fail at their deadline and it backs off; afterwards every message is
// published and marked. A batch published just before the cut may be
// published again (its mark was lost): the consumer's inbox absorbs that,
// so the test asserts "each at least once, all sent", not "once".
//
// Sized at 3 s rather than the 60 s: a pass fails at PassTimeout
// (1 s here) and the backoff reaches its cap (1 s) at once, so a longer
// outage only repeats the same capped wait, and CI has 20 minutes overall.
func TestDatabaseAway(t *testing.T) {
	t.Parallel()
	b := backends()[0]
	db, dsn := b.open(t)
	table := testenv.Name("ob")
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: db, ob: ob, b: b, table: table}
	rdb, proxy := testenv.PostgresViaProxy(t, dsn)
	rob, err := outbox.New(rdb, &outbox.Config{Dialect: outbox.Postgres, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	r, err := rob.NewRelay(rec, &outbox.RelayConfig{PassTimeout: time.Second, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 10 * time.Millisecond, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	for i := range 50 {
		f.enqueue(t, msg("a"+strconv.Itoa(i), "k"+strconv.Itoa(i%5)))
	}
	waitFor(t, "the first messages sent", func() bool { return f.countState(t, outbox.Sent) == 50 })
	proxy.Set(testenv.BlackHole)
	_, _, before := rec.snapshot()
	for i := range 50 {
		f.enqueue(t, msg("b"+strconv.Itoa(i), "k"+strconv.Itoa(i%5)))
	}
	time.Sleep(3 * time.Second)
	_, _, after := rec.snapshot()
	proxy.Set(testenv.Pass)
	f.waitSent(t, "every message sent after the outage", 100)
	if _, count, _ := rec.snapshot(); len(count) != 100 {
		t.Fatalf("%d distinct messages published, want 100", len(count))
	}
	// The relay cannot claim through a black hole: at most the passes in
	// hand when the link was cut (Concurrency, 2 by default) reach the
	// broker.
	if after-before > 2 {
		t.Fatalf("%d publish calls while the database was away", after-before)
	}
}
