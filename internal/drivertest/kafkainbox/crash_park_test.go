package kafkainbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

var parkCrash = adaptertest.Crash{Env: "IDEM_KAFKAINBOX_PARK_CHILD", Test: "TestCrashWithParkedRecord"}

// announce tells the parent on stdout ("APPLIED <id>") that a record's
// transaction committed.
type announce struct{ P inbox.Processor }

func (a announce) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := a.P.Process(ctx, consumer, id, h)
	if err == nil && out == inbox.Processed {
		fmt.Printf("APPLIED %s\n", id)
	}
	return out, err
}

// afterV1 is the handler of the parked record's test: v2 is early until v1
// was applied.
func afterV1(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
	if recordID(r) == "v2" {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = 'v1'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: v1 not applied", inbox.ErrNotYet)
		}
	}
	return effect(ctx, tx, r)
}

// A consumer process parks v2 (its predecessor v1 is not produced yet),
// applies the records behind it, commits, and is SIGKILLed. No offset it
// committed passes v2 (the parent watches every OffsetCommit on the
// broker), so the group member that replaces it reads v2 again, and once
// v1 arrives both are applied: the parked record was not lost.
func TestCrashWithParkedRecord(t *testing.T) {
	if parkCrash.IsChild() {
		ib := parkCrash.ChildInbox(t)
		newSub(t, announce{ib}, afterV1, kafkainbox.Config{
			Brokers: strings.Split(os.Getenv("IDEM_CHILD_BROKERS"), ","), Group: "g", Topics: []string{"orders"},
		})
		parkCrash.Linger(t)
		return
	}
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var commits []int64 // offsets committed for orders/0 (the only topic), in order
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				// The cluster has one topic; newer requests name it by ID only.
				if p.Partition == 0 {
					mu.Lock()
					commits = append(commits, p.Offset)
					mu.Unlock()
				}
			}
		}
		return nil, nil, false // observed only; the cluster handles it
	})
	brokers := c.ListenAddrs()
	edb, dsn := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "v2", "second"), record("orders", 0, "x1", "a"), record("orders", 0, "x2", "b"))

	child := parkCrash.Start(t, dsn, "IDEM_CHILD_BROKERS="+strings.Join(brokers, ","))
	child.Line("APPLIED x2", 60*time.Second)
	// The child commits synchronously once x2 is done (its queue ran
	// empty), before it takes x3: when x3 is applied, that commit is made.
	produce(t, brokers, record("orders", 0, "x3", "c"))
	child.Line("APPLIED x3", 60*time.Second)
	child.Kill()
	mu.Lock()
	childCommits := append([]int64(nil), commits...)
	mu.Unlock()
	if len(childCommits) == 0 {
		t.Fatal("the child committed no offset")
	}
	for _, o := range childCommits {
		if o > 0 {
			t.Fatalf("the child committed offset %d past the parked v2 (offset 0): %v", o, childCommits)
		}
	}
	if rows, _ := edb.Counts(t); rows != 3 {
		t.Fatalf("after the kill effects = %d, want 3 (x1, x2, x3)", rows)
	}

	produce(t, brokers, record("orders", 0, "v1", "first"))
	rec := &adaptertest.Recorder{P: edb.Inbox}
	s := newSub(t, rec, afterV1, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	edb.WaitEffects(t, 5, 60*time.Second)
	stop(t, s)
	mu.Lock()
	t.Logf("commits: child %v, all %v", childCommits, commits)
	mu.Unlock()
	rows, distinct := edb.Counts(t)
	if rows != 5 || distinct != 5 || rec.Processed.Load() != 2 || rec.Duplicates.Load() != 3 {
		t.Fatalf("effects %d (%d distinct), processed %d, duplicates %d; want 5, 5, 2 (v1, v2), 3 (x1-x3 read again)",
			rows, distinct, rec.Processed.Load(), rec.Duplicates.Load())
	}
}
