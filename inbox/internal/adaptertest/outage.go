package adaptertest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// OutageDuration is how long the outage tests keep the database away: the
// issue's minute, far beyond every default retry budget the adapters had.
const OutageDuration = 60 * time.Second

// OutageDB is an effects database whose Inbox reaches PostgreSQL through a
// FaultProxy, so that a test can take the database away from the consumer;
// DB (for counting effects) connects directly.
type OutageDB struct {
	*EffectDB
	Proxy *testenv.FaultProxy
}

// NewOutageInbox is NewPostgresInbox with the inbox behind a FaultProxy.
func NewOutageInbox(t testing.TB) *OutageDB {
	t.Helper()
	direct, dsn := NewPostgresInbox(t)
	db, p := testenv.PostgresViaProxy(t, dsn)
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return &OutageDB{EffectDB: &EffectDB{DB: direct.DB, Inbox: ib}, Proxy: p}
}

// Outage runs the outage script of the adapters' §1 tests: the database
// goes away with fault (Refuse or BlackHole) for OutageDuration, while
// publish is called every interval with a growing index (the messages that
// arrive during the outage), and then comes back (Pass). It returns how
// many times publish was called.
func (o *OutageDB) Outage(t testing.TB, fault testenv.Fault, interval time.Duration, publish func(i int)) int {
	t.Helper()
	o.Proxy.Set(fault)
	end := time.Now().Add(OutageDuration)
	n := 0
	for time.Now().Before(end) {
		publish(n)
		n++
		time.Sleep(min(interval, time.Until(end)))
	}
	o.Proxy.Set(testenv.Pass)
	return n
}

// IDs returns "prefix-0" … "prefix-<n-1>".
func IDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + "-" + strconv.Itoa(i)
	}
	return ids
}

// Observed is an inbox.Observer that counts the outcomes it is told, for
// tests that assert what an adapter reports.
type Observed struct {
	mu sync.Mutex
	n  map[inbox.Delivery]int
}

// ObserveDelivery counts d.
func (o *Observed) ObserveDelivery(d inbox.Delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[inbox.Delivery]int{}
	}
	o.n[d]++
}

// Count returns how often outcome was observed, for any adapter and
// consumer.
func (o *Observed) Count(outcome inbox.DeliveryOutcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	sum := 0
	for d, n := range o.n {
		if d.Outcome == outcome {
			sum += n
		}
	}
	return sum
}

// Of returns how often d was observed.
func (o *Observed) Of(d inbox.Delivery) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[d]
}

// WaitEffects waits until the effects table holds exactly want distinct
// IDs, and fails if any ID has more than one row.
func (e *EffectDB) WaitEffects(t testing.TB, want int, d time.Duration) {
	t.Helper()
	WaitFor(t, "all effects", d, func() bool {
		rows, distinct := e.Counts(t)
		if rows != distinct {
			t.Fatalf("duplicate effect: %d rows for %d IDs", rows, distinct)
		}
		return distinct == want
	})
}

// Ctx is a context for a test's setup calls.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
