package amqpinbox_test

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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// The same message (one MessageId) published 100 times, consumed by two
// subscribers with 8 workers each → one effect, every copy acked.
func TestConcurrentDuplicatesOneEffect(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	rec := &adaptertest.Recorder{P: edb.Inbox}
	for range 100 {
		env.publish(t, "order-1", "pay 10")
	}
	a := newSub(t, rec, env.conn, effect, amqpinbox.Config{Queue: env.queue, Concurrency: 8})
	b := newSub(t, rec, env.conn, effect, amqpinbox.Config{Queue: env.queue, Concurrency: 8})
	adaptertest.WaitFor(t, "100 deliveries", 30*time.Second, func() bool { return rec.Processed.Load()+rec.Duplicates.Load() == 100 })
	stop(t, a)
	stop(t, b)
	rows, _ := edb.Counts(t)
	if rows != 1 || rec.Processed.Load() != 1 || rec.Duplicates.Load() != 99 || env.ready(t, env.queue) != 0 {
		t.Fatalf("effects=%d processed=%d duplicates=%d ready=%d; want 1 1 99 0",
			rows, rec.Processed.Load(), rec.Duplicates.Load(), env.ready(t, env.queue))
	}
}

// The first delivery fails: the transaction (dedup row included) rolls
// back, a copy waits out the backoff in the retry queue and comes back
// (a new publish: Redelivered is false), and it is processed once.
func TestHandlerFailureRetriedOnce(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	var mu sync.Mutex
	var redelivered []bool
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		mu.Lock()
		redelivered = append(redelivered, d.Redelivered)
		n := len(redelivered)
		mu.Unlock()
		if err := effect(ctx, tx, d); err != nil {
			return err
		}
		if n == 1 {
			return errors.New("downstream timeout")
		}
		return nil
	}
	var backoffs atomic.Int64
	env.publish(t, "order-2", "pay 20")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{Queue: env.queue, BackoffFunc: func(n int) time.Duration {
		backoffs.Add(1)
		return 10 * time.Millisecond
	}})
	adaptertest.WaitFor(t, "the retry to commit", 20*time.Second, func() bool { r, _ := edb.Counts(t); return r == 1 })
	stop(t, s)
	rows, _ := edb.Counts(t)
	mu.Lock()
	defer mu.Unlock()
	if rows != 1 || len(redelivered) != 2 || backoffs.Load() != 1 || env.ready(t, env.queue) != 0 || env.ready(t, env.queue+".retry") != 0 {
		t.Fatalf("effects=%d handler saw %d deliveries, backoffs=%d; want 1 effect, 2, 1", rows, len(redelivered), backoffs.Load())
	}
	if st := s.Stats(); st.Processed != 1 || st.Retried != 1 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A producer cannot spend (or refill) the poison budget: a delivery
// count in the headers is ignored. With MaxFailures 2, a message that
// claims 1000 earlier failures and fails once is still retried, and one
// that fails twice is dead-lettered although it claims -1000.
func TestDeliveryCountHeaderIgnored(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	var calls sync.Map
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		n, _ := calls.LoadOrStore(d.MessageId, new(atomic.Int64))
		c := n.(*atomic.Int64).Add(1)
		if d.MessageId == "forged-high" && c == 1 || d.MessageId == "forged-low" {
			return errors.New("fails")
		}
		return effect(ctx, tx, d)
	}
	for id, n := range map[string]int32{"forged-high": 1000, "forged-low": -1000} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conf, err := env.ch.PublishWithDeferredConfirmWithContext(ctx, "", env.queue, true, false, amqp.Publishing{
			MessageId: id, Body: []byte(id),
			Headers: amqp.Table{amqpinbox.FailuresHeader: n, "x-delivery-count": int64(n)},
		})
		if err != nil || !conf.Wait() {
			t.Fatalf("publish: %v", err)
		}
		cancel()
	}
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 2, DeadLetterExchange: dlx,
		BackoffFunc: func(int) time.Duration { return time.Millisecond },
	})
	adaptertest.WaitFor(t, "one processed, one dead-lettered", 20*time.Second, func() bool {
		r, _ := edb.Counts(t)
		return r == 1 && env.ready(t, dlq) == 1
	})
	stop(t, s)
	d, ok, err := env.ch.Get(dlq, true)
	if err != nil || !ok || d.MessageId != "forged-low" || d.Headers[amqpinbox.FailuresHeader] != int32(2) {
		t.Fatalf("dead letter %q headers %v (%v %v); want forged-low after 2 failures", d.MessageId, d.Headers, ok, err)
	}
}

// A message that always fails goes to the dead-letter exchange after
// MaxFailures attempts, with the error and the count; the next message
// still flows.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	var poison, good atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if string(d.Body) == "poison" {
			poison.Add(1)
			return errors.New("cannot parse")
		}
		good.Add(1)
		return effect(ctx, tx, d)
	}
	env.publish(t, "bad-1", "poison")
	env.publish(t, "good-1", "fine")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 3, DeadLetterExchange: dlx,
		BackoffFunc: func(int) time.Duration { return time.Millisecond },
	})
	adaptertest.WaitFor(t, "the poison message in the DLQ", 20*time.Second, func() bool { return env.ready(t, dlq) == 1 })
	stop(t, s)
	d, ok, err := env.ch.Get(dlq, true)
	if err != nil || !ok {
		t.Fatalf("get from DLQ: %v %v", ok, err)
	}
	if d.MessageId != "bad-1" || d.Headers[amqpinbox.FailuresHeader] != int32(3) || d.Headers[amqpinbox.ErrorHeader] == nil ||
		d.Headers[amqpinbox.QueueHeader] != env.queue || string(d.Body) != "poison" {
		t.Fatalf("dead letter id=%q headers=%v", d.MessageId, d.Headers)
	}
	rows, _ := edb.Counts(t)
	if poison.Load() != 3 || good.Load() != 1 || rows != 1 || env.ready(t, env.queue) != 0 {
		t.Fatalf("poison calls=%d good calls=%d effects=%d ready=%d; want 3 1 1 0", poison.Load(), good.Load(), rows, env.ready(t, env.queue))
	}
}

// With RejectToQueueDLX, a delivery without a message ID is rejected (no
// requeue), so the queue's own x-dead-letter-exchange receives it; the
// handler never runs.
func TestNoMessageIDRejectedToQueueDLX(t *testing.T) {
	t.Parallel()
	probe := newAMQP(t, nil) // a connection to declare the DLX before the queue
	dlx, dlq := probe.deadLetterQueue(t)
	env := newAMQP(t, amqp.Table{"x-dead-letter-exchange": dlx})
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error { calls.Add(1); return effect(ctx, tx, d) }
	env.publish(t, "", "anonymous")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{Queue: env.queue, RejectToQueueDLX: true})
	adaptertest.WaitFor(t, "the rejected delivery in the queue's DLX", 20*time.Second, func() bool { return env.ready(t, dlq) == 1 })
	stop(t, s)
	if calls.Load() != 0 || env.ready(t, env.queue) != 0 || s.Stats().DeadLettered != 1 {
		t.Fatalf("handler ran %d times; queue ready=%d; stats %+v", calls.Load(), env.ready(t, env.queue), s.Stats())
	}
}

// With no dead-letter exchange configured, the subscriber declares a
// dead-letter queue and publishes poison there: nothing is dropped. A
// handler's inbox.Permanent goes there at once.
func TestPoisonToDeclaredDeadLetterQueue(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	dlq := env.queue + ".dead-letter"
	t.Cleanup(func() {
		if c, err := env.conn.Channel(); err == nil {
			_, _ = c.QueueDelete(dlq, false, false, false)
			_ = c.Close()
		}
	})
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		calls.Add(1)
		return inbox.Permanent(errors.New("unknown account"))
	}
	env.publish(t, "perm-1", "x")
	env.publish(t, "", "no id")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{Queue: env.queue})
	adaptertest.WaitFor(t, "both in the declared dead-letter queue", 20*time.Second, func() bool { return env.ready(t, dlq) == 2 })
	stop(t, s)
	if calls.Load() != 1 || env.ready(t, env.queue) != 0 || s.Stats().DeadLettered != 2 || s.Stats().Retried != 0 {
		t.Fatalf("handler calls=%d ready=%d stats %+v; want 1 call, both dead-lettered at once", calls.Load(), env.ready(t, env.queue), s.Stats())
	}
}

// A MessageIDFunc that keeps failing spends the poison budget like a
// handler (counted by the delivery's content, as it has no ID): the
// delivery is dead-lettered after MaxFailures attempts, not retried
// forever, and never processed under another key.
func TestMessageIDFuncErrorSpendsBudget(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	dlq := env.queue + ".dead-letter"
	t.Cleanup(func() {
		if c, err := env.conn.Channel(); err == nil {
			_, _ = c.QueueDelete(dlq, false, false, false)
			_ = c.Close()
		}
	})
	var lookups, calls atomic.Int64
	idFunc := func(d *amqp.Delivery) (string, error) {
		lookups.Add(1)
		return "", errors.New("no ID field in the payload")
	}
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error { calls.Add(1); return effect(ctx, tx, d) }
	env.publish(t, "", "opaque")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{Queue: env.queue, MaxFailures: 3, MessageIDFunc: idFunc,
		BackoffFunc: func(int) time.Duration { return time.Millisecond }})
	adaptertest.WaitFor(t, "the dead letter", 20*time.Second, func() bool { return env.ready(t, dlq) == 1 })
	stop(t, s)
	if lookups.Load() != 3 || calls.Load() != 0 || s.Stats().DeadLettered != 1 || s.Stats().Retried != 2 {
		t.Fatalf("lookups=%d handler calls=%d stats %+v; want 3, 0, dead-lettered after 2 retries", lookups.Load(), calls.Load(), s.Stats())
	}
}

// The same message twice within one prefetch window: one effect, the
// second acked as a duplicate.
func TestSameMessageTwiceInOnePrefetch(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 2} {
		t.Run("workers="+strconv.Itoa(workers), func(t *testing.T) {
			t.Parallel()
			env := newAMQP(t, nil)
			edb, _ := newPostgresInbox(t)
			rec := &adaptertest.Recorder{P: edb.Inbox}
			env.publish(t, "order-9", "a")
			env.publish(t, "order-9", "a")
			s := newSub(t, rec, env.conn, effect, amqpinbox.Config{Queue: env.queue, Concurrency: workers, Prefetch: 10})
			adaptertest.WaitFor(t, "both deliveries", 20*time.Second, func() bool { return rec.Processed.Load()+rec.Duplicates.Load() == 2 })
			stop(t, s)
			if rows, _ := edb.Counts(t); rows != 1 || rec.Processed.Load() != 1 || rec.Duplicates.Load() != 1 || env.ready(t, env.queue) != 0 {
				t.Fatalf("effects=%d processed=%d duplicates=%d", rows, rec.Processed.Load(), rec.Duplicates.Load())
			}
		})
	}
}

// Exactly once under churn: 10,000 messages, 30% repeating an earlier ID,
// three subscribers (4 workers each), one replaced every ~100ms (half of the
// stops hard), 3% handler failures → one effect per unique ID.
func TestExactlyOnceCounterWithRestarts(t *testing.T) {
	t.Parallel()
	const total, unique = 10000, 7000
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ids := adaptertest.DuplicatedIDs(rng, unique, total)
	ctx := context.Background()
	var confs []*amqp.DeferredConfirmation
	for _, id := range ids {
		c, err := env.ch.PublishWithDeferredConfirmWithContext(ctx, "", env.queue, true, false, amqp.Publishing{MessageId: id, Body: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if !c.Wait() {
			t.Fatal("publish nacked")
		}
	}

	var fails atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if err := effect(ctx, tx, d); err != nil {
			return err
		}
		if rand.IntN(100) < 3 {
			fails.Add(1)
			return errors.New("random failure")
		}
		return nil
	}
	cfg := amqpinbox.Config{Queue: env.queue, Concurrency: 4, Prefetch: 32, MaxFailures: 1000, BackoffFunc: func(int) time.Duration { return time.Millisecond }}
	subs := []*amqpinbox.Subscriber{newSub(t, edb.Inbox, env.conn, h, cfg), newSub(t, edb.Inbox, env.conn, h, cfg), newSub(t, edb.Inbox, env.conn, h, cfg)}
	restarts, hard := 0, 0
	// A hang guard, not a timing: 10,000 deliveries under churn can take
	// longer than 90s at load 40 (the inbox chaos run did, at 14,000).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rows, _ := edb.Counts(t)
		if rows >= unique && env.ready(t, env.queue) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: effects=%d ready=%d", rows, env.ready(t, env.queue))
		}
		time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
		if rows >= unique*9/10 {
			continue
		}
		i := rng.IntN(len(subs))
		timeout := 10 * time.Second
		if rng.IntN(2) == 0 {
			timeout, hard = time.Millisecond, hard+1
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		_ = subs[i].Stop(sctx)
		cancel()
		subs[i] = newSub(t, edb.Inbox, env.conn, h, cfg)
		restarts++
	}
	for _, s := range subs {
		stop(t, s)
	}
	rows, distinct := edb.Counts(t)
	t.Logf("restarts=%d (hard %d) handler failures=%d", restarts, hard, fails.Load())
	if rows != unique || distinct != unique || env.ready(t, env.queue) != 0 {
		t.Fatalf("effects rows=%d distinct=%d ready=%d; want %d, %d, 0", rows, distinct, env.ready(t, env.queue), unique, unique)
	}
	if restarts < 3 {
		t.Fatalf("only %d restarts; the test did not exercise churn", restarts)
	}
}

// When the connection dies under a running subscriber, it ends by itself
// and says why.
func TestConnectionLossEndsSubscriber(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	conn, err := amqp.Dial(testenv.AMQP.DSN())
	if err != nil {
		t.Fatal(err)
	}
	s := newSub(t, edb.Inbox, conn, effect, amqpinbox.Config{Queue: env.queue})
	if err := s.Err(); err != nil {
		t.Fatalf("Err while running = %v", err)
	}
	_ = conn.Close()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscriber did not end after its connection closed")
	}
	if !errors.Is(s.Err(), amqpinbox.ErrChannelClosed) {
		t.Fatalf("Err = %v, want ErrChannelClosed", s.Err())
	}
	stop(t, s) // still safe
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	idle, err := amqpinbox.New(edb.Inbox, env.conn, effect, &amqpinbox.Config{Queue: env.queue})
	if err != nil {
		t.Fatal(err)
	}
	stop(t, idle) // before Start: no-op
	if err := idle.Start(context.Background()); !errors.Is(err, amqpinbox.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	s := newSub(t, edb.Inbox, env.conn, effect, amqpinbox.Config{Queue: env.queue, Concurrency: 3})
	if err := s.Start(context.Background()); !errors.Is(err, amqpinbox.ErrStopped) {
		t.Fatalf("second Start = %v, want ErrStopped", err)
	}
	stop(t, s)
	stop(t, s)
	if s.Err() != nil {
		t.Fatalf("Err after Stop = %v", s.Err())
	}
	for _, cfg := range []*amqpinbox.Config{nil, {Queue: env.queue, MaxFailures: -1}, {Queue: env.queue, Concurrency: -1}, {Queue: env.queue, Prefetch: -1}} {
		if _, err := amqpinbox.New(edb.Inbox, env.conn, effect, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	bad, err := amqpinbox.New(edb.Inbox, env.conn, effect, &amqpinbox.Config{Queue: testenv.Name("idemt-missing")})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(context.Background()); err == nil {
		t.Fatal("Start on a missing queue succeeded")
		stop(t, bad)
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 7: 5 * time.Second, 50: 5 * time.Second} {
		if got := amqpinbox.DefaultBackoff(n); got != want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// At Concurrency 1, a failing message's backoff is spent in the retry
// queue, not in the worker: with a backoff of an hour, the valid messages
// behind two failing ones are all applied (a worker that slept through the
// backoff would apply none of them), and the failing ones wait in the
// retry queue, not dead-lettered.
func TestBackoffDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if string(d.Body) == "poison" {
			return errors.New("cannot parse")
		}
		return effect(ctx, tx, d)
	}
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, BackoffFunc: func(int) time.Duration { return time.Hour },
	})
	defer stop(t, s)
	start := time.Now()
	env.publish(t, "bad-1", "poison")
	env.publish(t, "bad-2", "poison")
	ids := adaptertest.IDs("good", 51)
	for _, id := range ids {
		env.publish(t, id, "fine")
	}
	edb.WaitEffects(t, len(ids), 30*time.Second)
	t.Logf("%d valid messages behind 2 failing ones applied %v after the first publish", len(ids), time.Since(start).Round(time.Millisecond))
	// Stats count a delivery once it is settled, a moment after its effect
	// or its parked copy is visible: wait for both.
	adaptertest.WaitFor(t, "both failing messages parked in the retry queue", 20*time.Second, func() bool {
		return env.ready(t, env.queue+".retry") == 2 && s.Stats().Processed == uint64(len(ids))
	})
	if st := s.Stats(); st.DeadLettered != 0 || st.Retried != 2 || st.Processed != uint64(len(ids)) {
		t.Fatalf("stats %+v; want %d processed, 2 retried, none dead-lettered", st, len(ids))
	}
}

// A parked copy comes back to the tail of the queue once its backoff has
// expired, with its message ID: the failure count carries on, and after
// MaxFailures the message is dead-lettered.
func TestRetryQueueReturnsTheCopy(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int32
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		calls.Add(1)
		return errors.New("cannot parse")
	}
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 3, BackoffFunc: func(int) time.Duration { return 20 * time.Millisecond },
	})
	defer stop(t, s)
	env.publish(t, "bad-1", "poison")
	// The copy reaches the dead-letter queue before the subscriber, which
	// counts it once the broker has confirmed the publish, updates Stats:
	// wait for both.
	adaptertest.WaitFor(t, "the message dead-lettered and counted", 30*time.Second, func() bool {
		return env.ready(t, env.queue+".dead-letter") == 1 && s.Stats().DeadLettered == 1
	})
	if calls.Load() != 3 || s.Stats().DeadLettered != 1 || s.Stats().Retried != 2 {
		t.Fatalf("%d calls, stats %+v; want 3 calls, 2 retried, 1 dead-lettered", calls.Load(), s.Stats())
	}
}
