package adaptertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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

// Counter reads idem_inbox_messages_total{outcome} from reg (0 when the
// series does not exist).
func Counter(t testing.TB, reg prometheus.Gatherer, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "idem_inbox_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "outcome") == outcome {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
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
