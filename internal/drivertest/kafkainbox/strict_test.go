package kafkainbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/inbox/watermark"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// strictAccount is a Strict watermark over an account table and a handler
// applying a record's value as the account's version.
func strictAccount(t *testing.T, edb *effectDB, calls *atomic.Int64) (*watermark.Table, kafkainbox.Handler) {
	t.Helper()
	if _, err := edb.DB.ExecContext(adaptertest.Ctx(t), `CREATE TABLE account (id VARCHAR(64) PRIMARY KEY, version BIGINT NOT NULL, deleted BOOLEAN NOT NULL DEFAULT FALSE, balance BIGINT)`); err != nil {
		t.Fatal(err)
	}
	wm, err := watermark.New("account", &watermark.Config{Dialect: edb.Inbox.Dialect(), Mode: watermark.Strict})
	if err != nil {
		t.Fatal(err)
	}
	return wm, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		calls.Add(1)
		v, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil {
			return err
		}
		_, err = wm.Upsert(ctx, tx, "acc-1", v, map[string]any{"balance": v * 10})
		return err
	}
}

// Ten versions of one entity (one key, so one partition) arrive reversed
// (v10 first) in Strict mode: each early one is parked, the partition
// moves on, and once v1 is applied the parked ones run again newest first,
// so the gap fills in one pass: 19 handler runs in all. Without parking v10
// would hold the partition for good (v9 can never overtake it). The
// committed offset then passes all ten.
func TestStrictReversedVersionsOnePass(t *testing.T) {
	t.Parallel()
	const n = 10
	brokers := newCluster(t, 1, "accounts")
	edb, _ := newPostgresInbox(t)
	ctx := adaptertest.Ctx(t)
	var calls atomic.Int64
	wm, h := strictAccount(t, edb, &calls)
	var recs []*kgo.Record
	for v := n; v >= 1; v-- {
		recs = append(recs, record("accounts", 0, "evt-v"+strconv.Itoa(v), strconv.Itoa(v)))
	}
	produce(t, brokers, recs...)
	start := time.Now()
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"accounts"}})
	adaptertest.WaitFor(t, "v10 applied", 3*time.Minute, func() bool {
		v, _, _, err := wm.State(ctx, edb.DB, "acc-1")
		return err == nil && v == n
	})
	elapsed := time.Since(start)
	adaptertest.WaitFor(t, "nothing parked", 20*time.Second, func() bool { return s.Stats().Parked == 0 })
	stop(t, s)
	t.Logf("%d reversed versions: v%d after %v, %d handler runs, stats %+v", n, n, elapsed.Round(time.Millisecond), calls.Load(), s.Stats())
	if calls.Load() != 2*n-1 {
		t.Fatalf("%d handler runs, want %d (one pass)", calls.Load(), 2*n-1)
	}
	if st := s.Stats(); st.DeadLettered != 0 || st.Processed != n {
		t.Fatalf("stats %+v", st)
	}
	// Everything was committed: a new member reads nothing again.
	var again atomic.Int64
	s2 := newSub(t, edb.Inbox, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error { again.Add(1); return nil },
		kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"accounts"}})
	produce(t, brokers, record("accounts", 0, "marker", "0"))
	adaptertest.WaitFor(t, "the marker", 30*time.Second, func() bool { return s2.Stats().Processed == 1 })
	stop(t, s2)
	if st := s2.Stats(); st.Duplicates != 0 || again.Load() != 1 {
		t.Fatalf("second member: stats %+v, handler runs %d; want only the marker", st, again.Load())
	}
}
