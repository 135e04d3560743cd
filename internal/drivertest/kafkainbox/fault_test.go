package kafkainbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// §1: an outage is not poison. The database is refused for a minute while
// records keep arriving on four partitions (some repeating an ID); a
// dead-letter topic is configured, so a record given up on would show
// there. Afterwards every record has exactly one effect, nothing was
// dead-lettered, no partition is left failing.
func TestDatabaseOutageIsNotPoison(t *testing.T) {
	t.Parallel()
	const parts = 4
	brokers := newCluster(t, parts, "orders", "orders-dlq")
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, effect, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq"})
	defer stop(t, s)
	before := adaptertest.IDs("before", 20)
	for i, id := range before {
		produce(t, brokers, record("orders", int32(i%parts), id, "x"))
	}
	odb.WaitEffects(t, len(before), 30*time.Second)

	during := odb.Outage(t, testenv.Refuse, time.Second, func(i int) {
		id := "during-" + strconv.Itoa(i)
		recs := []*kgo.Record{record("orders", int32(i%parts), id, "x")}
		if i%3 == 0 {
			recs = append(recs, record("orders", int32((i+1)%parts), id, "x")) // the same event again, elsewhere
		}
		if i%10 == 0 {
			recs = append(recs, record("orders", int32(i%parts), before[i%len(before)], "x"))
		}
		produce(t, brokers, recs...)
	})
	retried := s.Stats().Retried
	odb.WaitEffects(t, len(before)+during, 60*time.Second)
	adaptertest.WaitFor(t, "no partition failing", 30*time.Second, func() bool { return len(s.Failing()) == 0 })

	st := s.Stats()
	if st.DeadLettered != 0 || len(deadLetters(t, brokers, "orders-dlq")) != 0 {
		t.Fatalf("after the outage: stats %+v; want nothing dead-lettered", st)
	}
	if retried == 0 {
		t.Fatal("no attempt failed during the outage: the fault did not reach the consumer")
	}
	t.Logf("outage %v: %d events during it, %d retried attempts, %d duplicates", adaptertest.OutageDuration, during, retried, st.Duplicates)
}

// §3: a record that keeps failing pauses its own partition: the member's
// other partitions keep flowing, a second member joining the group gets
// its rebalance through, and once the record can be processed its
// partition resumes in order.
func TestFailingRecordPausesOnlyItsPartition(t *testing.T) {
	t.Parallel()
	const parts, perPart = 4, 50
	brokers := newCluster(t, parts, "orders")
	edb, _ := newPostgresInbox(t)
	var recs []*kgo.Record
	for i := range perPart {
		for p := range int32(parts) {
			recs = append(recs, record("orders", p, "p"+strconv.Itoa(int(p))+"-"+strconv.Itoa(i), strconv.Itoa(i)))
		}
	}
	produce(t, brokers, recs...)
	var healed atomic.Bool
	var stuckTries atomic.Int64
	var mu sync.Mutex
	seen := map[int32][]int64{}
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if r.Partition == 0 && r.Offset == 0 && !healed.Load() {
			stuckTries.Add(1)
			return errors.New("downstream rejects it")
		}
		mu.Lock()
		seen[r.Partition] = append(seen[r.Partition], r.Offset)
		mu.Unlock()
		return effect(ctx, tx, r)
	}
	obs := &adaptertest.Observed{}
	cfg := kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}, Observer: obs,
		BackoffFunc: func(int) time.Duration { return 20 * time.Millisecond }}
	a := newSub(t, edb.Inbox, h, cfg)
	defer stop(t, a)
	adaptertest.WaitFor(t, "partitions 1-3 done while 0 is stuck", 30*time.Second, func() bool {
		r, _ := edb.Counts(t)
		return r == (parts-1)*perPart && stuckTries.Load() >= 6
	})
	f := a.Failing()
	if len(f) != 1 || f[0].Partition != 0 || f[0].Offset != 0 || f[0].Parked || f[0].Err == nil || f[0].Attempts < 5 {
		t.Fatalf("Failing = %+v; want partition 0 at offset 0, retrying", f)
	}

	// Records keep arriving on every partition, the stuck one included, in
	// many small batches (a poll that waited for the stuck partition's
	// worker would block on them). A second member joins: the rebalance
	// must complete although a record of the first member is failing;
	// records produced now are processed by whichever member owns their
	// partition.
	var more []*kgo.Record
	for i := range 20 {
		for p := range int32(parts) {
			r := record("orders", p, "late-p"+strconv.Itoa(int(p))+"-"+strconv.Itoa(i), "late")
			produce(t, brokers, r)
			more = append(more, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := newSub(t, edb.Inbox, h, cfg)
	defer stop(t, b)
	for i := 20; i < 30; i++ {
		for p := range int32(parts) {
			r := record("orders", p, "late-p"+strconv.Itoa(int(p))+"-"+strconv.Itoa(i), "late")
			produce(t, brokers, r)
			more = append(more, r)
		}
	}
	adaptertest.WaitFor(t, "records of the flowing partitions, after the rebalance", 60*time.Second, func() bool {
		r, _ := edb.Counts(t)
		return r == (parts-1)*(perPart+30)
	})
	if r, _ := edb.Counts(t); r != (parts-1)*(perPart+30) {
		t.Fatalf("effects %d: a record behind the failing one was processed", r)
	}
	healed.Store(true)
	// A record's commit is visible before the worker counts it and clears
	// its partition's failure: wait for all three.
	adaptertest.WaitFor(t, "partition 0 resumed", 60*time.Second, func() bool {
		r, _ := edb.Counts(t)
		return r == parts*perPart+len(more) && len(a.Failing())+len(b.Failing()) == 0 &&
			obs.Of(inbox.Delivery{Adapter: "kafka", Consumer: "g", Outcome: inbox.DeliveryProcessed}) >= parts*perPart+len(more)
	})
	if len(a.Failing())+len(b.Failing()) != 0 {
		t.Fatalf("still failing: %+v %+v", a.Failing(), b.Failing())
	}
	mu.Lock()
	defer mu.Unlock()
	for p, offs := range seen {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Fatalf("partition %d handled offset %d after %d", p, offs[i], offs[i-1])
			}
		}
	}
	if seen[0][0] != 0 {
		t.Fatalf("partition 0 moved past its failing record: first processed offset %d", seen[0][0])
	}
	if rows, distinct := edb.Counts(t); rows != distinct {
		t.Fatalf("duplicate effects: %d rows, %d IDs", rows, distinct)
	}
	if got := obs.Count(inbox.DeliveryRetried); got < 5 {
		t.Fatalf("observed %d retried", got)
	}
	// Both members report to the same observer, as the same consumer.
	if got := obs.Of(inbox.Delivery{Adapter: "kafka", Consumer: "g", Outcome: inbox.DeliveryProcessed}); got != parts*perPart+len(more) {
		t.Fatalf("observed %d processed, want %d", got, parts*perPart+len(more))
	}
}

// §2, §3: without a dead-letter topic, inbox.Permanent parks the record's
// partition (one attempt, no more) with a clear error in Failing, while
// the other partitions flow; Stop still completes.
func TestPermanentWithoutDeadLetterTopicParks(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2, "orders")
	edb, _ := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "bad", "x"), record("orders", 0, "after-bad", "x"), record("orders", 1, "good", "x"))
	var badCalls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if recordID(r) == "bad" {
			badCalls.Add(1)
			return inbox.Permanent(errors.New("unknown account"))
		}
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	adaptertest.WaitFor(t, "partition 0 parked, partition 1 done", 30*time.Second, func() bool {
		r, _ := edb.Counts(t)
		f := s.Failing()
		return r == 1 && len(f) == 1 && f[0].Parked
	})
	f := s.Failing()[0]
	if f.Partition != 0 || f.Offset != 0 || f.Attempts != 1 || !inbox.IsPermanent(f.Err) || badCalls.Load() != 1 {
		t.Fatalf("Failing = %+v, bad calls %d", f, badCalls.Load())
	}
	stop(t, s)
	if r, _ := edb.Counts(t); r != 1 || badCalls.Load() != 1 {
		t.Fatalf("effects %d, bad calls %d: nothing may pass a parked record", r, badCalls.Load())
	}
}

// §3: records of an aborted transaction are never applied (ReadCommitted).
func TestAbortedTransactionNotApplied(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, _ := newPostgresInbox(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("idem-test-tx"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := adaptertest.Ctx(t)
	for _, tx := range []struct {
		ids    []string
		commit bool
	}{{[]string{"aborted-1", "aborted-2"}, false}, {[]string{"committed-1"}, true}, {[]string{"aborted-3"}, false}, {[]string{"committed-2"}, true}} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, id := range tx.ids {
			if err := cl.ProduceSync(ctx, record("orders", 0, id, "x")).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(tx.commit)); err != nil {
			t.Fatal(err)
		}
	}
	produce(t, brokers, record("orders", 0, "last", "x")) // non-transactional, after everything
	var mu sync.Mutex
	var ids []string
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		mu.Lock()
		ids = append(ids, recordID(r))
		mu.Unlock()
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	adaptertest.WaitFor(t, "the last record", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) > 0 && ids[len(ids)-1] == "last" })
	stop(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 3 || ids[0] != "committed-1" || ids[1] != "committed-2" {
		t.Fatalf("handled %v; want committed-1, committed-2, last", ids)
	}
}

// §3: an error from MessageIDFunc fails the attempt and the record is
// retried with the same function; it never falls back to the record's
// position. The same business event produced twice (two offsets) whose
// first ID lookup fails is applied once.
func TestMessageIDFuncErrorRetried(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, _ := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "", "payment-7"), record("orders", 0, "", "payment-7"))
	var lookups atomic.Int64
	idFunc := func(r *kgo.Record) (string, error) {
		if lookups.Add(1) == 1 {
			return "", errors.New("schema registry unavailable")
		}
		return string(r.Value), nil
	}
	rec := &adaptertest.Recorder{P: edb.Inbox}
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		return adaptertest.InsertEffect(ctx, tx, string(r.Value), "x")
	}
	s := newSub(t, rec, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}, MessageIDFunc: idFunc,
		BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond }})
	adaptertest.WaitFor(t, "both records", 30*time.Second, func() bool { return rec.Processed.Load()+rec.Duplicates.Load() == 2 })
	stop(t, s)
	if rows, _ := edb.Counts(t); rows != 1 || rec.Processed.Load() != 1 || rec.Duplicates.Load() != 1 || lookups.Load() != 3 {
		t.Fatalf("effects=%d processed=%d duplicates=%d lookups=%d; want 1 1 1 3", rows, rec.Processed.Load(), rec.Duplicates.Load(), lookups.Load())
	}
	if st := s.Stats(); st.Retried != 1 || st.Processed != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// deadLetters reads every record of topic.
func deadLetters(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []*kgo.Record
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out
		}
		out = append(out, fs.Records()...)
	}
}

// A record that arrives before its predecessor (inbox.ErrNotYet, as
// watermark.ErrGap) waits and is never counted: with MaxFailures 1 and a
// dead-letter topic any counting would dead-letter it. Its predecessor
// arrives later on another partition. Parked (the default), it runs again
// every ParkRetry and as soon as v1 is applied; without parking
// (MaxParked < 0) it waits in place with its partition paused, Process
// trying 5 times per attempt.
func TestEarlyRecordWaitsNotPoison(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		maxParked int
		early     int64
	}{{"parked", 0, 3}, {"in place", -1, 2 * 5}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 2, "orders", "orders-dlq")
			edb, _ := newPostgresInbox(t)
			var early atomic.Int64
			h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
				if recordID(r) == "v2" {
					var n int
					if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = 'v1'`).Scan(&n); err != nil {
						return err
					}
					if n == 0 {
						early.Add(1)
						return fmt.Errorf("%w: v1 not applied", inbox.ErrNotYet)
					}
				}
				return effect(ctx, tx, r)
			}
			s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"},
				MaxFailures: 1, DeadLetterTopic: "orders-dlq", MaxParked: tc.maxParked, ParkRetry: 100 * time.Millisecond})
			defer stop(t, s)
			produce(t, brokers, record("orders", 0, "v2", "second"))
			adaptertest.WaitFor(t, "v2 to come early repeatedly", 30*time.Second, func() bool { return early.Load() >= tc.early })
			want := 1
			if tc.maxParked < 0 {
				want = 0
			}
			if got := s.Stats().Parked; got != want {
				t.Fatalf("Parked() = %d, want %d", got, want)
			}
			produce(t, brokers, record("orders", 1, "v1", "first"))
			edb.WaitEffects(t, 2, 30*time.Second)
			if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 {
				t.Fatalf("stats %+v; want v2 retried, nothing dead-lettered", st)
			}
			adaptertest.WaitFor(t, "nothing parked", 10*time.Second, func() bool { return s.Stats().Parked == 0 })
		})
	}
}

// A migration locks the effects table while the statement timeout is
// short: the server cancels every waiting handler (57014, MariaDB 1969).
// With MaxFailures 1 any verdict but "infrastructure" would dead-letter at
// once; afterwards every record is applied exactly once.
func TestMigrationLockIsNotPoison(t *testing.T) {
	t.Parallel()
	for _, d := range adaptertest.LockDialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			const parts = 2
			brokers := newCluster(t, parts, "orders", "orders-dlq")
			ldb := adaptertest.NewLockInbox(t, d)
			h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
				return ldb.Insert(ctx, tx, recordID(r), string(r.Value))
			}
			s := newSub(t, ldb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"},
				DeadLetterTopic: "orders-dlq", MaxFailures: 1})
			defer stop(t, s)
			released := ldb.Migration(t)
			ids := adaptertest.IDs("m", 10)
			for i, id := range ids {
				produce(t, brokers, record("orders", int32(i%parts), id, "x"))
			}
			<-released
			ldb.WaitEffects(t, len(ids), 30*time.Second)
			adaptertest.WaitFor(t, "no partition failing", 20*time.Second, func() bool { return len(s.Failing()) == 0 })
			if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 || len(deadLetters(t, brokers, "orders-dlq")) != 0 {
				t.Fatalf("stats %+v; want retries and no dead letter", st)
			}
		})
	}
}

// A body that does not decode (empty, or truncated JSON) makes the handler
// return io.EOF or io.ErrUnexpectedEOF: poison, dead-lettered after
// MaxFailures, and the valid records behind it on the same partition are
// applied. An "infrastructure" verdict would have paused the partition
// forever.
func TestMalformedBodyIsPoison(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders", "orders-dlq")
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		var v struct{ Order int }
		if err := json.NewDecoder(bytes.NewReader(r.Value)).Decode(&v); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"},
		DeadLetterTopic: "orders-dlq", MaxFailures: 2, BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond }})
	defer stop(t, s)
	produce(t, brokers, record("orders", 0, "empty", ""), record("orders", 0, "truncated", `{"Order": 4`))
	for _, id := range adaptertest.IDs("good", 5) {
		produce(t, brokers, record("orders", 0, id, `{"Order": 1}`))
	}
	edb.WaitEffects(t, 5, 30*time.Second)
	if st := s.Stats(); st.DeadLettered != 2 || len(deadLetters(t, brokers, "orders-dlq")) != 2 {
		t.Fatalf("stats %+v; want 2 dead-lettered", st)
	}
}
