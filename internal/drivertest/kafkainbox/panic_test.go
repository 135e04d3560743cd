package kafkainbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// A handler that panics is a failure of that record, not a dead process:
// the panic is recovered and the record retried (its partition paused,
// the other partition flowing); without a dead-letter topic it stays
// failing, reported by Failing with the panic as the error.
func TestHandlerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2, "orders")
	edb, _ := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "bad", "x"), record("orders", 1, "good", "x"))
	var panics atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if recordID(r) == "bad" {
			panics.Add(1)
			panic("nil map in the handler")
		}
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"},
		BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond }})
	adaptertest.WaitFor(t, "the panicking record retried, the other partition applied", 30*time.Second, func() bool {
		r, _ := edb.Counts(t)
		return r == 1 && panics.Load() >= 3 && len(s.Failing()) == 1
	})
	f := s.Failing()[0]
	if f.Partition != 0 || !strings.Contains(f.Err.Error(), "the handler panicked: nil map in the handler") {
		t.Fatalf("Failing = %+v", f)
	}
	stop(t, s)
}
