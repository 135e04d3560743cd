package natsinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

func newSub(t testing.TB, p inbox.Processor, cons jetstream.Consumer, h natsinbox.Handler, cfg natsinbox.Config) *natsinbox.Subscriber {
	t.Helper()
	if cfg.MessageIDFunc == nil {
		cfg.MessageIDFunc = natsinbox.HeaderID(idHeader)
	}
	if cfg.Logger == nil {
		cfg.Logger = adaptertest.QuietLogger()
	}
	s, err := natsinbox.New(p, cons, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func stop(t testing.TB, s *natsinbox.Subscriber) {
	t.Helper()
	adaptertest.Stop(t, s, 10*time.Second)
}

// The same message published 100 times (the stream's own dedup is not in
// play: the ID travels in our header) and consumed by two subscribers with
// 8 workers each → exactly one effect, and every copy is acked.
func TestConcurrentDuplicatesOneEffect(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	edb, _ := newPostgresInbox(t)
	rec := &adaptertest.Recorder{P: edb.Inbox}
	for range 100 {
		env.publish(t, "order-1", "pay 10")
	}
	var subs []*natsinbox.Subscriber
	for range 2 {
		s := newSub(t, rec, env.cons, effect, natsinbox.Config{Concurrency: 8})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	adaptertest.WaitFor(t, "all 100 copies acked", 30*time.Second, func() bool {
		return rec.Processed.Load()+rec.Duplicates.Load() == 100 && env.settled(t)
	})
	for _, s := range subs {
		stop(t, s)
	}
	rows, distinct := edb.Counts(t)
	if rows != 1 || distinct != 1 || rec.Processed.Load() != 1 || rec.Duplicates.Load() != 99 {
		t.Fatalf("effects rows=%d distinct=%d processed=%d duplicates=%d; want 1 1 1 99",
			rows, distinct, rec.Processed.Load(), rec.Duplicates.Load())
	}
}

// The first delivery fails: the dedup row rolls back with the business
// change, the message is naked with the backoff, and the redelivery is
// processed once.
func TestHandlerFailureRedeliveredOnce(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	var delays []uint64
	var mu sync.Mutex
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		if err := effect(ctx, tx, msg); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			return errors.New("downstream timeout")
		}
		return nil
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		BackoffFunc: func(n int) time.Duration {
			mu.Lock()
			delays = append(delays, uint64(n))
			mu.Unlock()
			return 50 * time.Millisecond
		},
	})
	env.publish(t, "order-2", "pay 20")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "the redelivery to be acked", 20*time.Second, func() bool { return calls.Load() >= 2 && env.settled(t) })
	stop(t, s)
	rows, _ := edb.Counts(t)
	mu.Lock()
	defer mu.Unlock()
	if rows != 1 || calls.Load() != 2 || len(delays) != 1 || delays[0] != 1 {
		t.Fatalf("rows=%d calls=%d backoff calls=%v; want 1 effect, 2 calls, one backoff after delivery 1", rows, calls.Load(), delays)
	}
}

// A message that always fails is dead-lettered on its MaxFailures-th
// delivery: republished with the reason and its original metadata, then
// terminated and never delivered again; the next message still flows.
func TestPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	var poisonCalls, goodCalls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		if string(msg.Data()) == "poison" {
			poisonCalls.Add(1)
			return errors.New("cannot parse")
		}
		goodCalls.Add(1)
		return effect(ctx, tx, msg)
	}
	obs := &adaptertest.Observed{}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		MaxFailures: 3, DeadLetterSubject: dlq, JetStream: env.js, Observer: obs,
		BackoffFunc: func(int) time.Duration { return 20 * time.Millisecond },
	})
	env.publish(t, "bad-1", "poison")
	env.publish(t, "good-1", "fine")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "poison dead-lettered and good acked", 20*time.Second, func() bool {
		return len(env.deadLettered(t, dlq)) == 1 && goodCalls.Load() >= 1 && env.settled(t)
	})
	// A terminated message would be redelivered (if it were not terminated)
	// after 20ms; give it ten times that to misbehave.
	time.Sleep(200 * time.Millisecond)
	stop(t, s)
	rows, _ := edb.Counts(t)
	if poisonCalls.Load() != 3 || goodCalls.Load() != 1 || rows != 1 || !env.settled(t) {
		t.Fatalf("poison calls=%d good calls=%d effects=%d; want 3, 1, 1", poisonCalls.Load(), goodCalls.Load(), rows)
	}
	dl := env.deadLettered(t, dlq)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	h0 := dl[0].Header
	if string(dl[0].Data) != "poison" || h0.Get(idHeader) != "bad-1" || h0.Get(natsinbox.DeliveriesHeader) != "3" ||
		!strings.Contains(h0.Get(natsinbox.ErrorHeader), "cannot parse") || h0.Get(natsinbox.StreamHeader) != env.stream ||
		h0.Get(natsinbox.SequenceHeader) != "1" || h0.Get(natsinbox.SubjectHeader) != env.stream+".orders" ||
		h0.Get(natsinbox.ConsumerHeader) != "worker" || h0.Get(natsinbox.TimestampHeader) == "" {
		t.Fatalf("dead letter data=%q headers=%v", dl[0].Data, h0)
	}
	st := s.Stats()
	if st.Processed != 1 || st.DeadLettered != 1 || st.Retried != 2 {
		t.Fatalf("stats %+v; want 1 processed, 2 retried, 1 dead-lettered", st)
	}
	for outcome, want := range map[inbox.DeliveryOutcome]int{inbox.DeliveryProcessed: 1, inbox.DeliveryDuplicate: 0, inbox.DeliveryRetried: 2, inbox.DeliveryDeadLettered: 1} {
		if got := obs.Of(inbox.Delivery{Adapter: "nats", Consumer: env.stream + "/worker", Outcome: outcome}); got != want {
			t.Errorf("observed %v %d times, want %d", outcome, got, want)
		}
	}
}

// A handler that returns inbox.Permanent dead-letters the message on its
// first delivery: no further attempts.
func TestPermanentDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		return inbox.Permanent(errors.New("unknown account"))
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{DeadLetterSubject: dlq, JetStream: env.js})
	env.publish(t, "perm-1", "x")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "the dead letter", 20*time.Second, func() bool { return len(env.deadLettered(t, dlq)) == 1 && env.settled(t) })
	stop(t, s)
	if calls.Load() != 1 || s.Stats().DeadLettered != 1 || s.Stats().Retried != 0 {
		t.Fatalf("handler calls=%d stats=%+v; want one call, dead-lettered at once", calls.Load(), s.Stats())
	}
}

// Without a dead-letter subject a poison message is never dropped: it is
// naked with the backoff again and again and stays in the stream.
func TestPoisonKeptWithoutDeadLetterSubject(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		return errors.New("cannot parse")
	}
	var mu sync.Mutex
	var backoffs []uint64
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		MaxFailures: 2,
		BackoffFunc: func(n int) time.Duration {
			mu.Lock()
			backoffs = append(backoffs, uint64(n))
			mu.Unlock()
			return 20 * time.Millisecond
		},
	})
	env.publish(t, "bad-2", "poison")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "five deliveries", 20*time.Second, func() bool { return calls.Load() >= 5 })
	stop(t, s)
	mu.Lock()
	defer mu.Unlock()
	for i, n := range backoffs {
		if n != uint64(i+1) {
			t.Fatalf("backoff asked for deliveries %v; want 1, 2, 3, … (every failure naked with its backoff)", backoffs)
		}
	}
	if st := s.Stats(); st.DeadLettered != 0 || env.settled(t) {
		t.Fatalf("stats %+v settled=%v; the poison message must stay in the stream", st, env.settled(t))
	}
}

// A message without an ID is dead-lettered without running the handler.
func TestNoMessageIDDeadLettered(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{DeadLetterSubject: dlq, JetStream: env.js})
	env.publish(t, "", "anonymous")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	batch, err := env.cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for msg := range batch.Messages() {
		n++
		act, err := s.Handle(ctx, msg)
		if act != inbox.DeadLettered || !errors.Is(err, natsinbox.ErrNoMessageID) {
			t.Fatalf("Handle = %v, %v; want dead-lettered, ErrNoMessageID", act, err)
		}
	}
	if n != 1 {
		t.Fatalf("fetched %d messages, want 1", n)
	}
	adaptertest.WaitFor(t, "termination to settle", 10*time.Second, func() bool { return env.settled(t) })
	if calls.Load() != 0 || len(env.deadLettered(t, dlq)) != 1 {
		t.Fatalf("handler ran %d times for a message without ID; dead letters %d", calls.Load(), len(env.deadLettered(t, dlq)))
	}
}

// The same message twice in one fetched batch: handled in order, the
// second is a duplicate; handled concurrently, still one effect.
func TestSameMessageTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	for _, concurrent := range []bool{false, true} {
		t.Run("concurrent="+strconv.FormatBool(concurrent), func(t *testing.T) {
			t.Parallel()
			env := newNATS(t, 5*time.Second)
			edb, _ := newPostgresInbox(t)
			s := newSub(t, edb.Inbox, env.cons, effect, natsinbox.Config{})
			env.publish(t, "order-9", "a")
			env.publish(t, "order-9", "a")
			batch, err := env.cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var msgs []jetstream.Msg
			for m := range batch.Messages() {
				msgs = append(msgs, m)
			}
			if len(msgs) != 2 {
				t.Fatalf("batch has %d messages, want 2", len(msgs))
			}
			acts := make([]inbox.Action, 2)
			var wg sync.WaitGroup
			for i, m := range msgs {
				run := func() {
					var err error
					acts[i], err = s.Handle(context.Background(), m)
					if err != nil {
						t.Error(err)
					}
				}
				if concurrent {
					wg.Go(run)
				} else {
					run()
				}
			}
			wg.Wait()
			if !concurrent && (acts[0] != inbox.Acked || acts[1] != inbox.AckedDuplicate) {
				t.Fatalf("actions %v; want acked, acked-duplicate", acts)
			}
			if concurrent && !(acts[0] == inbox.Acked && acts[1] == inbox.AckedDuplicate || acts[0] == inbox.AckedDuplicate && acts[1] == inbox.Acked) {
				t.Fatalf("actions %v; want one acked and one acked-duplicate", acts)
			}
			if rows, _ := edb.Counts(t); rows != 1 {
				t.Fatalf("effects = %d, want 1", rows)
			}
			adaptertest.WaitFor(t, "both acked", 10*time.Second, func() bool { return env.settled(t) })
		})
	}
}

// Exactly once under churn: 10,000 messages of which 30% repeat an earlier
// ID, three subscribers with four workers each, one of them stopped and
// replaced every ~100ms (half of the stops hard: handlers cancelled, the
// prefetched buffer dropped), 3% of handler runs failing → the effects table
// holds exactly one row per unique ID.
func TestExactlyOnceCounterWithRestarts(t *testing.T) {
	t.Parallel()
	const total, unique = 10000, 7000
	env := newNATS(t, time.Second)
	edb, _ := newPostgresInbox(t)
	rec := &adaptertest.Recorder{P: edb.Inbox}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := adaptertest.DuplicatedIDs(rng, unique, total)

	ajs, err := jetstream.New(env.nc, jetstream.WithPublishAsyncMaxPending(512))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		m := nats.NewMsg(env.stream + ".orders")
		m.Header.Set(idHeader, id)
		m.Data = []byte(id)
		// A loaded server acks slowly: wait for room instead of failing
		// after the default 200ms stall.
		if _, err := ajs.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-ajs.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing timed out")
	}

	var fails atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		if err := effect(ctx, tx, msg); err != nil {
			return err
		}
		if rand.IntN(100) < 3 {
			fails.Add(1)
			return errors.New("random failure")
		}
		return nil
	}
	cfg := natsinbox.Config{
		Concurrency:  4,
		MaxFailures:  1000, // failures here are transient: never terminate
		BackoffFunc:  func(int) time.Duration { return 10 * time.Millisecond },
		MessagesOpts: []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(64)},
	}
	start := func() *natsinbox.Subscriber {
		s := newSub(t, rec, env.cons, h, cfg)
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	subs := []*natsinbox.Subscriber{start(), start(), start()}
	restarts, hard := 0, 0
	// A hang guard, not a timing: 10,000 deliveries under churn can take
	// longer than 90s at load 40 (the inbox chaos run did, at 14,000).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rows, _ := edb.Counts(t)
		if rows >= unique && env.settled(t) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: effects=%d processed=%d duplicates=%d", rows, rec.Processed.Load(), rec.Duplicates.Load())
		}
		time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
		if rows >= unique*9/10 {
			continue // let the tail settle without churn
		}
		i := rng.IntN(len(subs))
		timeout := 10 * time.Second
		if rng.IntN(2) == 0 {
			timeout, hard = time.Millisecond, hard+1 // hard stop: cancel in-flight handlers
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_ = subs[i].Stop(ctx)
		cancel()
		subs[i] = start()
		restarts++
	}
	for _, s := range subs {
		stop(t, s)
	}
	rows, distinct := edb.Counts(t)
	// rec.Processed may be a little short of unique: a hard stop that
	// cancels a commit in flight makes Process report an error although the
	// commit happened (an ambiguous commit). The redelivery is then a
	// Duplicate, which is exactly the point; the effects table is the truth.
	t.Logf("restarts=%d (hard %d) handler failures=%d processed=%d duplicates acked=%d", restarts, hard, fails.Load(), rec.Processed.Load(), rec.Duplicates.Load())
	if rows != unique || distinct != unique {
		t.Fatalf("effects rows=%d distinct=%d; want %d each", rows, distinct, unique)
	}
	if restarts < 3 {
		t.Fatalf("only %d restarts happened; the test did not exercise churn", restarts)
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	env := newNATS(t, time.Second)
	edb, _ := newPostgresInbox(t)
	s := newSub(t, edb.Inbox, env.cons, effect, natsinbox.Config{})
	if err := s.Stop(context.Background()); err != nil { // before Start: no-op
		t.Fatal(err)
	}
	s = newSub(t, edb.Inbox, env.cons, effect, natsinbox.Config{Concurrency: 3})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, natsinbox.ErrStopped) {
		t.Fatalf("second Start = %v, want ErrStopped", err)
	}
	stop(t, s)
	stop(t, s) // double Stop is safe
	if _, err := natsinbox.New(nil, env.cons, effect, nil); err == nil {
		t.Fatal("New(nil processor) succeeded")
	}
	if _, err := natsinbox.New(edb.Inbox, env.cons, effect, &natsinbox.Config{MaxFailures: -1}); err == nil {
		t.Fatal("New with MaxFailures -1 succeeded")
	}
	if _, err := natsinbox.New(edb.Inbox, env.cons, effect, &natsinbox.Config{Concurrency: -2}); err == nil {
		t.Fatal("New with Concurrency -2 succeeded")
	}
	if _, err := natsinbox.New(edb.Inbox, env.cons, effect, &natsinbox.Config{DeadLetterSubject: "DLQ.x"}); err == nil {
		t.Fatal("New with a DeadLetterSubject and no JetStream succeeded")
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		if got := natsinbox.DefaultBackoff(n); got != want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// fakeMsg records how it was settled; the decisions are checked without a
// server so each branch is exercised exactly.
type fakeMsg struct {
	jetstream.Msg // nil: any unexpected call panics
	id            string
	delivered     uint64
	settled       string
	delay         time.Duration
	reason        string
	inProgress    int
}

func (m *fakeMsg) Headers() nats.Header {
	h := nats.Header{}
	if m.id != "" {
		h.Set(idHeader, m.id)
	}
	return h
}
func (m *fakeMsg) Subject() string { return "orders" }
func (m *fakeMsg) Data() []byte    { return nil }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md := &jetstream.MsgMetadata{NumDelivered: m.delivered, Stream: "S"}
	md.Sequence.Stream = 7
	return md, nil
}
func (m *fakeMsg) Ack() error                         { m.settled = "ack"; return nil }
func (m *fakeMsg) Nak() error                         { m.settled = "nak"; return nil }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { m.settled, m.delay = "nak", d; return nil }
func (m *fakeMsg) InProgress() error                  { m.inProgress++; return nil }
func (m *fakeMsg) TermWithReason(reason string) error {
	m.settled, m.reason = "term-reason", reason
	return nil
}
func (m *fakeMsg) Term() error                         { m.settled = "term"; return nil }
func (m *fakeMsg) DoubleAck(ctx context.Context) error { m.settled = "ack"; return nil }

// fakeProcessor fails with errs (one per call, in order), then succeeds
// with out.
type fakeProcessor struct {
	out   inbox.Outcome
	errs  []error
	calls int
}

func (p *fakeProcessor) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	p.calls++
	if len(p.errs) > 0 {
		err := p.errs[0]
		p.errs = p.errs[1:]
		return 0, fmt.Errorf("inbox: %w", err)
	}
	return p.out, nil
}

type fakeConsumer struct{ jetstream.Consumer }

func (fakeConsumer) CachedInfo() *jetstream.ConsumerInfo {
	return &jetstream.ConsumerInfo{Name: "fake", Config: jetstream.ConsumerConfig{MaxDeliver: -1, AckWait: 30 * time.Millisecond}}
}

// fakeJS records dead-letter publishes, or fails them.
type fakeJS struct {
	jetstream.JetStream
	fail bool
	msgs []*nats.Msg
}

func (j *fakeJS) PublishMsg(ctx context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if j.fail {
		return nil, jetstream.ErrNoStreamResponse
	}
	j.msgs = append(j.msgs, m)
	return &jetstream.PubAck{}, nil
}

func TestHandleDecisions(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	down := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type dlq int
	const (
		noDLQ dlq = iota
		okDLQ
		badDLQ
	)
	for _, tc := range []struct {
		name       string
		msg        fakeMsg
		errs       []error
		out        inbox.Outcome
		ctx        context.Context
		dlq        dlq
		reason     bool // Config.TermWithReason
		want       inbox.Action
		settled    string
		delay      time.Duration
		calls      int
		published  int
		inProgress bool
		prior      int // ordinary failures of the same message before (each its own delivery)
	}{
		{name: "processed→ack", msg: fakeMsg{id: "a", delivered: 1}, out: inbox.Processed, want: inbox.Acked, settled: "ack", calls: 1},
		{name: "duplicate→ack", msg: fakeMsg{id: "a", delivered: 1}, out: inbox.Duplicate, want: inbox.AckedDuplicate, settled: "ack", calls: 1},
		{name: "failure→nak with backoff", msg: fakeMsg{id: "a", delivered: 2}, errs: []error{boom}, want: inbox.HandedBack, settled: "nak", delay: time.Second, calls: 1},
		{name: "failure after many deliveries that never failed→nak, not poison", msg: fakeMsg{id: "a", delivered: 9}, errs: []error{boom}, want: inbox.HandedBack, settled: "nak", delay: time.Second, calls: 1},
		{name: "third failure→nak with the third backoff", msg: fakeMsg{id: "a", delivered: 3}, errs: []error{boom}, prior: 2, want: inbox.HandedBack, settled: "nak", delay: 4 * time.Second, calls: 1},
		{name: "MaxFailures-th failure→dead letter, term", msg: fakeMsg{id: "a", delivered: 5}, errs: []error{boom}, prior: 4, dlq: okDLQ, want: inbox.DeadLettered, settled: "term", calls: 1, published: 1},
		{name: "poison, no dead-letter subject→nak with backoff, never term", msg: fakeMsg{id: "a", delivered: 5}, errs: []error{boom}, prior: 4, want: inbox.HandedBack, settled: "nak", delay: 16 * time.Second, calls: 1},
		{name: "poison, dead-letter publish fails→nak with backoff, never term", msg: fakeMsg{id: "a", delivered: 5}, errs: []error{boom}, prior: 4, dlq: badDLQ, want: inbox.HandedBack, settled: "nak", delay: 16 * time.Second, calls: 1},
		{name: "permanent on first delivery→dead letter", msg: fakeMsg{id: "a", delivered: 1}, errs: []error{inbox.Permanent(boom)}, dlq: okDLQ, want: inbox.DeadLettered, settled: "term", calls: 1, published: 1},
		{name: "stopping→immediate nak, never term", msg: fakeMsg{id: "a", delivered: 9}, errs: []error{context.Canceled}, ctx: cancelled, dlq: okDLQ, want: inbox.HandedBack, settled: "nak", calls: 1},
		{name: "duplicate on last delivery→ack", msg: fakeMsg{id: "a", delivered: 5}, out: inbox.Duplicate, want: inbox.AckedDuplicate, settled: "ack", calls: 1},
		{name: "no id→dead letter, no processing", msg: fakeMsg{delivered: 1}, out: inbox.Processed, dlq: okDLQ, want: inbox.DeadLettered, settled: "term", calls: 0, published: 1},
		{name: "poison→term with reason", msg: fakeMsg{id: "a", delivered: 5}, errs: []error{boom}, prior: 4, dlq: okDLQ, reason: true, want: inbox.DeadLettered, settled: "term-reason", calls: 1, published: 1},
		{name: "outage after four failures→retried in place, acked, budget untouched", msg: fakeMsg{id: "a", delivered: 5}, errs: []error{down, down, down}, prior: 4, out: inbox.Processed, dlq: okDLQ, want: inbox.Acked, settled: "ack", calls: 4, inProgress: true},
		{name: "came early after four failures→nak for later, not poison", msg: fakeMsg{id: "a", delivered: 9}, errs: []error{fmt.Errorf("%w: v1 missing", inbox.ErrNotYet)}, prior: 4, dlq: okDLQ, want: inbox.HandedBack, settled: "nak", delay: 50 * time.Millisecond, calls: 1},
		{name: "outage, stopping while held→immediate nak", msg: fakeMsg{id: "a", delivered: 1}, errs: []error{down}, ctx: cancelled, want: inbox.HandedBack, settled: "nak", calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := &fakeProcessor{out: tc.out, errs: tc.errs}
			cfg := &natsinbox.Config{
				MessageIDFunc: natsinbox.HeaderID(idHeader), Logger: adaptertest.QuietLogger(), TermWithReason: tc.reason,
				TransientBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
			}
			js := &fakeJS{fail: tc.dlq == badDLQ}
			if tc.dlq != noDLQ {
				cfg.DeadLetterSubject, cfg.JetStream = "DLQ.x", js
			}
			s, err := natsinbox.New(proc, fakeConsumer{}, effect, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			for i := range tc.prior {
				prior := fakeMsg{id: tc.msg.id, delivered: uint64(i + 1)}
				proc.errs = append([]error{boom}, proc.errs...)
				if act, _ := s.Handle(context.Background(), &prior); act != inbox.HandedBack {
					t.Fatalf("prior failure %d: %v", i+1, act)
				}
			}
			proc.calls -= tc.prior
			act, err := s.Handle(ctx, &tc.msg)
			if act != tc.want || tc.msg.settled != tc.settled || tc.msg.delay != tc.delay || proc.calls != tc.calls || len(js.msgs) != tc.published {
				t.Fatalf("got %v (err %v) settled=%q delay=%v calls=%d published=%d; want %v %q %v %d %d",
					act, err, tc.msg.settled, tc.msg.delay, proc.calls, len(js.msgs), tc.want, tc.settled, tc.delay, tc.calls, tc.published)
			}
			if (err == nil) != (act == inbox.Acked || act == inbox.AckedDuplicate) {
				t.Fatalf("err = %v for action %v", err, act)
			}
			if tc.reason && !strings.HasPrefix(tc.msg.reason, "idem: ") {
				t.Fatalf("terminated with reason %q", tc.msg.reason)
			}
			if tc.inProgress != (tc.msg.inProgress > 0) {
				t.Fatalf("InProgress sent %d times", tc.msg.inProgress)
			}
			if tc.published == 1 && js.msgs[0].Subject != "DLQ.x" {
				t.Fatalf("dead letter published to %q", js.msgs[0].Subject)
			}
		})
	}
}
