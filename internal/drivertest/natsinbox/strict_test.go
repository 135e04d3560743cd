package natsinbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/inbox/watermark"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// Ten versions of one entity arrive reversed (v10 first) in Strict mode:
// each early one is parked and runs again as soon as another is applied,
// so the gap fills in one pass: v1 applies, then v2 … v10 from the parking
// lot, 19 handler runs in all (not a redelivery round per version).
func TestStrictReversedVersionsOnePass(t *testing.T) {
	t.Parallel()
	const n = 10
	env := newNATS(t, 5*time.Second)
	edb, _ := newPostgresInbox(t)
	ctx := adaptertest.Ctx(t)
	if _, err := edb.DB.ExecContext(ctx, `CREATE TABLE account (id VARCHAR(64) PRIMARY KEY, version BIGINT NOT NULL, deleted BOOLEAN NOT NULL DEFAULT FALSE, balance BIGINT)`); err != nil {
		t.Fatal(err)
	}
	wm, err := watermark.New("account", &watermark.Config{Dialect: edb.Inbox.Dialect(), Mode: watermark.Strict})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		v, err := strconv.ParseInt(string(msg.Data()), 10, 64)
		if err != nil {
			return err
		}
		_, err = wm.Upsert(ctx, tx, "acc-1", v, map[string]any{"balance": v * 10})
		return err
	}
	cfg := natsinbox.Config{}
	s := newSub(t, edb.Inbox, env.cons, h, cfg)
	for v := n; v >= 1; v-- {
		env.publish(t, "evt-v"+strconv.Itoa(v), strconv.Itoa(v))
	}
	start := time.Now()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	adaptertest.WaitFor(t, "v10 applied", 3*time.Minute, func() bool {
		v, _, _, err := wm.State(ctx, edb.DB, "acc-1")
		return err == nil && v == n
	})
	elapsed := time.Since(start)
	// v10's commit is visible before its message is acked and counted,
	// and the server may record the ack before the count: wait for both.
	adaptertest.WaitFor(t, "the stream fully acked and every version counted", 20*time.Second, func() bool {
		return env.settled(t) && s.Stats().Processed >= n
	})
	t.Logf("%d reversed versions: v%d after %v, %d handler runs, stats %+v", n, n, elapsed.Round(time.Millisecond), calls.Load(), s.Stats())
	if calls.Load() != 2*n-1 {
		t.Fatalf("%d handler runs, want %d (one pass)", calls.Load(), 2*n-1)
	}
	if st := s.Stats(); st.DeadLettered != 0 || st.Processed != n {
		t.Fatalf("stats %+v", st)
	}
}
