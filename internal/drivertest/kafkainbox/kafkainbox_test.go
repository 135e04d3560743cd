package kafkainbox_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// Records of one partition are handled one at a time in offset order;
// different partitions run concurrently (the first records of partitions
// 0 and 1 wait for each other: run serially, they would time out).
func TestPerPartitionOrderAndConcurrency(t *testing.T) {
	t.Parallel()
	const parts, perPart = 4, 150
	brokers := newCluster(t, parts, "orders")
	edb, _ := newPostgresInbox(t)
	var recs []*kgo.Record
	for i := range perPart {
		for p := range int32(parts) {
			recs = append(recs, record("orders", p, "p"+strconv.Itoa(int(p))+"-"+strconv.Itoa(i), strconv.Itoa(i)))
		}
	}
	produce(t, brokers, recs...)

	var mu sync.Mutex
	seen := map[int32][]int64{}
	inFlight := map[int32]int{}
	arrived := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	var total atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		mu.Lock()
		inFlight[r.Partition]++
		if inFlight[r.Partition] > 1 {
			t.Errorf("partition %d: two records in flight", r.Partition)
		}
		mu.Unlock()
		defer func() { mu.Lock(); inFlight[r.Partition]--; mu.Unlock() }()
		if r.Partition < 2 && r.Offset == 0 {
			once[r.Partition].Do(func() { close(arrived[r.Partition]) })
			select {
			case <-arrived[1-r.Partition]:
			case <-time.After(15 * time.Second):
				return errors.New("partitions 0 and 1 did not run concurrently")
			}
		}
		mu.Lock()
		seen[r.Partition] = append(seen[r.Partition], r.Offset)
		mu.Unlock()
		total.Add(1)
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	adaptertest.WaitFor(t, "all records", 30*time.Second, func() bool { return total.Load() >= parts*perPart })
	stop(t, s)
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(parts) {
		offs := seen[p]
		if len(offs) != perPart {
			t.Fatalf("partition %d: %d records handled, want %d", p, len(offs), perPart)
		}
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d: out of order", p, i, o)
			}
		}
	}
	if rows, distinct := edb.Counts(t); rows != parts*perPart || distinct != rows {
		t.Fatalf("effects=%d distinct=%d", rows, distinct)
	}
}

// Offsets are committed only after processing: a record that keeps
// failing is never committed past, and a restarted group resumes exactly
// there (no Duplicate outcomes: nothing before it is read again; no loss).
func TestCommitAfterProcessingResume(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, _ := newPostgresInbox(t)
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, record("orders", 0, "m-"+strconv.Itoa(i), strconv.Itoa(i)))
	}
	produce(t, brokers, recs...)
	cfg := kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}, BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond }}

	var failedTries atomic.Int64
	broken := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if r.Offset == 60 {
			failedTries.Add(1)
			return errors.New("downstream down")
		}
		return effect(ctx, tx, r)
	}
	a := newSub(t, edb.Inbox, broken, cfg)
	adaptertest.WaitFor(t, "offset 60 to fail repeatedly", 20*time.Second, func() bool { return failedTries.Load() >= 3 })
	stop(t, a)
	if rows, _ := edb.Counts(t); rows != 60 {
		t.Fatalf("effects after the first run = %d, want 60 (offsets 0..59)", rows)
	}

	rec := &adaptertest.Recorder{P: edb.Inbox}
	var runs atomic.Int64
	var firstOffset atomic.Int64
	firstOffset.Store(-1)
	good := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		firstOffset.CompareAndSwap(-1, r.Offset)
		runs.Add(1)
		return effect(ctx, tx, r)
	}
	b := newSub(t, rec, good, cfg)
	adaptertest.WaitFor(t, "the rest", 20*time.Second, func() bool { return runs.Load() >= 40 })
	stop(t, b)
	rows, distinct := edb.Counts(t)
	if rows != 100 || distinct != 100 || runs.Load() != 40 || firstOffset.Load() != 60 || rec.Duplicates.Load() != 0 {
		t.Fatalf("effects=%d distinct=%d second run handled %d from offset %d with %d duplicates; want 100 100 40 60 0",
			rows, distinct, runs.Load(), firstOffset.Load(), rec.Duplicates.Load())
	}
}

// The same message twice in one poll (same ID header): one effect; both
// committed, so a restart reads nothing again.
func TestSameMessageTwiceInOnePoll(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, _ := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "order-9", "a"), record("orders", 0, "order-9", "a"), record("orders", 0, "order-10", "b"))
	rec := &adaptertest.Recorder{P: edb.Inbox}
	cfg := kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}}
	s := newSub(t, rec, effect, cfg)
	adaptertest.WaitFor(t, "three records", 20*time.Second, func() bool { return rec.Processed.Load()+rec.Duplicates.Load() == 3 })
	stop(t, s)
	if rows, _ := edb.Counts(t); rows != 2 || rec.Processed.Load() != 2 || rec.Duplicates.Load() != 1 {
		t.Fatalf("effects=%d processed=%d duplicates=%d; want 2 2 1", rows, rec.Processed.Load(), rec.Duplicates.Load())
	}
	produce(t, brokers, record("orders", 0, "order-11", "c"))
	rec2 := &adaptertest.Recorder{P: edb.Inbox}
	s = newSub(t, rec2, effect, cfg)
	adaptertest.WaitFor(t, "the new record", 20*time.Second, func() bool { return rec2.Processed.Load() == 1 })
	stop(t, s)
	if rec2.Duplicates.Load() != 0 {
		t.Fatalf("restart re-read %d committed records", rec2.Duplicates.Load())
	}
}

// A record that fails MaxFailures times goes to the dead-letter topic with
// the error, and the partition moves on in order.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders", "orders-dlq")
	edb, _ := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "a", "ok"), record("orders", 0, "b", "poison"), record("orders", 0, "c", "ok"))
	var poison atomic.Int64
	var mu sync.Mutex
	var order []string
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			poison.Add(1)
			return errors.New("cannot parse")
		}
		mu.Lock()
		order = append(order, recordID(r))
		mu.Unlock()
		return effect(ctx, tx, r)
	}
	s := newSub(t, edb.Inbox, h, kafkainbox.Config{
		Brokers: brokers, Group: "g", Topics: []string{"orders"}, DeadLetterTopic: "orders-dlq",
		MaxFailures: 3, BackoffFunc: func(int) time.Duration { return time.Millisecond },
	})
	adaptertest.WaitFor(t, "c processed", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 })
	stop(t, s)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	dl := fs.Records()
	if len(dl) != 1 || recordID(dl[0]) != "b" {
		t.Fatalf("dead letters = %v", dl)
	}
	hdr := map[string]string{}
	for _, h := range dl[0].Headers {
		hdr[h.Key] = string(h.Value)
	}
	if hdr[kafkainbox.ErrorHeader] == "" || hdr[kafkainbox.SourceHeader] != "orders/0/1" || hdr[kafkainbox.AttemptsHeader] != "3" {
		t.Fatalf("dead-letter headers %v", hdr)
	}
	mu.Lock()
	defer mu.Unlock()
	if poison.Load() != 3 || len(order) != 2 || order[0] != "a" || order[1] != "c" {
		t.Fatalf("poison tries=%d order=%v", poison.Load(), order)
	}
}

// Exactly once under churn: 10,000 records over 4 partitions, 30% repeating
// an earlier ID (on any partition), three group members, one replaced
// every ~150ms (half of the stops hard; at most maxRestarts, as every
// replacement is a rebalance during which the group makes no progress),
// 3% handler failures → one effect per unique ID, and every record
// consumed.
func TestExactlyOnceCounterWithRestarts(t *testing.T) {
	t.Parallel()
	const total, unique, parts, maxRestarts = 10000, 7000, 4, 60
	brokers := newCluster(t, parts, "orders")
	edb, _ := newPostgresInbox(t)
	rng := rand.New(rand.NewPCG(5, 6))
	ids := adaptertest.DuplicatedIDs(rng, unique, total)
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		recs[i] = record("orders", int32(rng.IntN(parts)), id, id)
	}
	produce(t, brokers, recs...)

	var fails atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if err := effect(ctx, tx, r); err != nil {
			return err
		}
		if rand.IntN(100) < 3 {
			fails.Add(1)
			return errors.New("random failure")
		}
		return nil
	}
	rec := &adaptertest.Recorder{P: edb.Inbox}
	cfg := kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}, MaxPollRecords: 100, BackoffFunc: func(int) time.Duration { return time.Millisecond }}
	subs := []*kafkainbox.Subscriber{newSub(t, rec, h, cfg), newSub(t, rec, h, cfg), newSub(t, rec, h, cfg)}
	restarts, hard := 0, 0
	// A hang guard, not a timing: 10,000 records under churn can take
	// longer than 120s at load 40 (the inbox chaos run did, at 14,000).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rows, _ := edb.Counts(t)
		if rows >= unique {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done: effects=%d", rows)
		}
		time.Sleep(time.Duration(100+rng.IntN(100)) * time.Millisecond)
		if rows >= unique*9/10 || restarts >= maxRestarts {
			continue
		}
		i := rng.IntN(len(subs))
		timeout := 20 * time.Second
		if rng.IntN(2) == 0 {
			timeout, hard = time.Millisecond, hard+1
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_ = subs[i].Stop(ctx)
		cancel()
		subs[i] = newSub(t, rec, h, cfg)
		restarts++
	}
	for _, s := range subs {
		stop(t, s)
	}
	rows, distinct := edb.Counts(t)
	t.Logf("restarts=%d (hard %d) handler failures=%d processed=%d duplicates=%d", restarts, hard, fails.Load(), rec.Processed.Load(), rec.Duplicates.Load())
	if rows != unique || distinct != unique {
		t.Fatalf("effects rows=%d distinct=%d; want %d", rows, distinct, unique)
	}
	if restarts < 3 {
		t.Fatalf("only %d restarts; the test did not exercise churn", restarts)
	}
}

func TestLifecycleAndConfig(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, _ := newPostgresInbox(t)
	ok := kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}}
	idle, err := kafkainbox.New(edb.Inbox, effect, &ok)
	if err != nil {
		t.Fatal(err)
	}
	stop(t, idle)
	if err := idle.Start(context.Background()); !errors.Is(err, kafkainbox.ErrStopped) {
		t.Fatalf("Start after Stop = %v", err)
	}
	s := newSub(t, edb.Inbox, effect, ok)
	if err := s.Start(context.Background()); !errors.Is(err, kafkainbox.ErrStopped) {
		t.Fatalf("second Start = %v", err)
	}
	stop(t, s)
	stop(t, s)
	for _, cfg := range []*kafkainbox.Config{
		nil,
		{Group: "g", Topics: []string{"t"}},
		{Brokers: brokers, Topics: []string{"t"}},
		{Brokers: brokers, Group: "g"},
		{Brokers: brokers, Group: "g", Topics: []string{"t"}, MaxFailures: -1},
		{Brokers: brokers, Group: "g", Topics: []string{"t"}, DeadLetterTopic: "t"},
	} {
		if _, err := kafkainbox.New(edb.Inbox, effect, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 5: 1600 * time.Millisecond, 9: 10 * time.Second, 40: 10 * time.Second} {
		if got := kafkainbox.DefaultBackoff(n); got != want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}
