package kafkainbox_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

func runCrashChild(t *testing.T) {
	ib := crash.ChildInbox(t)
	newSub(t, adaptertest.KillAfterCommit{P: ib}, effect, kafkainbox.Config{
		Brokers: strings.Split(os.Getenv("IDEM_CHILD_BROKERS"), ","), Group: "g", Topics: []string{"orders"},
	})
	crash.Linger(t)
}

// A consumer process (talking to this test's in-process kfake over TCP) is
// SIGKILLed after its transaction committed and before the offset commit.
// Once the dead member's session expires, a new member reads the record
// again and the inbox reports it as a duplicate: the effect happened once.
func TestCrashBetweenCommitAndOffsetCommit(t *testing.T) {
	if crash.IsChild() {
		runCrashChild(t)
		return
	}
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, dsn := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "order-crash", "pay 30"))

	crash.KillAfterCommit(t, dsn, "order-crash", "IDEM_CHILD_BROKERS="+strings.Join(brokers, ","))
	if rows, _ := edb.Counts(t); rows != 1 {
		t.Fatalf("after the crash effects = %d, want 1 (the child committed)", rows)
	}

	rec := &adaptertest.Recorder{P: edb.Inbox}
	var handlerRuns int
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error { handlerRuns++; return effect(ctx, tx, r) }
	s := newSub(t, rec, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	adaptertest.WaitFor(t, "the record to be read again as a duplicate", 30*time.Second, func() bool { return rec.Duplicates.Load() == 1 })
	stop(t, s)
	rows, _ := edb.Counts(t)
	if rows != 1 || handlerRuns != 0 || rec.Processed.Load() != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d; want 1, 0, 0", rows, handlerRuns, rec.Processed.Load())
	}
}
