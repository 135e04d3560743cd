package natsinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adaptertest"
	"github.com/idemkit/idem/inbox/natsinbox"
)

func newSub(t testing.TB, p natsinbox.Processor, cons jetstream.Consumer, h natsinbox.Handler, cfg natsinbox.Config) *natsinbox.Subscriber {
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
		BackoffFunc: func(n uint64) time.Duration {
			mu.Lock()
			delays = append(delays, n)
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

// A message that always fails is terminated on its MaxDeliveries-th
// delivery, and never delivered again; the next message still flows.
func TestPoisonTerminatedAfterMaxDeliveries(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
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
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		MaxDeliveries: 3,
		BackoffFunc:   func(uint64) time.Duration { return 20 * time.Millisecond },
	})
	env.publish(t, "bad-1", "poison")
	env.publish(t, "good-1", "fine")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "poison terminated and good acked", 20*time.Second, func() bool {
		return poisonCalls.Load() >= 3 && goodCalls.Load() >= 1 && env.settled(t)
	})
	// A terminated message would be redelivered (if it were not terminated)
	// after 20ms; give it ten times that to misbehave.
	time.Sleep(200 * time.Millisecond)
	stop(t, s)
	rows, _ := edb.Counts(t)
	if poisonCalls.Load() != 3 || goodCalls.Load() != 1 || rows != 1 || !env.settled(t) {
		t.Fatalf("poison calls=%d good calls=%d effects=%d; want 3, 1, 1", poisonCalls.Load(), goodCalls.Load(), rows)
	}
}

// A message without an ID is terminated without running the handler.
func TestNoMessageIDTerminated(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	edb, _ := newPostgresInbox(t)
	var calls atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{})
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
		if act != natsinbox.Terminated || !errors.Is(err, natsinbox.ErrNoMessageID) {
			t.Fatalf("Handle = %v, %v; want terminated, ErrNoMessageID", act, err)
		}
	}
	if n != 1 {
		t.Fatalf("fetched %d messages, want 1", n)
	}
	adaptertest.WaitFor(t, "termination to settle", 10*time.Second, func() bool { return env.settled(t) })
	if calls.Load() != 0 {
		t.Fatalf("handler ran %d times for a message without ID", calls.Load())
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
			acts := make([]natsinbox.Action, 2)
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
			if !concurrent && (acts[0] != natsinbox.Acked || acts[1] != natsinbox.AckedDup) {
				t.Fatalf("actions %v; want acked, acked-duplicate", acts)
			}
			if concurrent && !(acts[0] == natsinbox.Acked && acts[1] == natsinbox.AckedDup || acts[0] == natsinbox.AckedDup && acts[1] == natsinbox.Acked) {
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
		if _, err := ajs.PublishMsgAsync(m); err != nil {
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
		Concurrency:   4,
		MaxDeliveries: 1000, // failures here are transient: never terminate
		BackoffFunc:   func(uint64) time.Duration { return 10 * time.Millisecond },
		MessagesOpts:  []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(64)},
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
	deadline := time.Now().Add(90 * time.Second)
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
	if _, err := natsinbox.New(edb.Inbox, env.cons, effect, &natsinbox.Config{MaxDeliveries: -1}); err == nil {
		t.Fatal("New with MaxDeliveries -1 succeeded")
	}
	if _, err := natsinbox.New(edb.Inbox, env.cons, effect, &natsinbox.Config{Concurrency: -2}); err == nil {
		t.Fatal("New with Concurrency -2 succeeded")
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
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
	return &jetstream.MsgMetadata{NumDelivered: m.delivered}, nil
}
func (m *fakeMsg) Ack() error                         { m.settled = "ack"; return nil }
func (m *fakeMsg) Nak() error                         { m.settled = "nak"; return nil }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { m.settled, m.delay = "nak", d; return nil }
func (m *fakeMsg) TermWithReason(reason string) error {
	m.settled, m.reason = "term-reason", reason
	return nil
}
func (m *fakeMsg) Term() error                         { m.settled = "term"; return nil }
func (m *fakeMsg) DoubleAck(ctx context.Context) error { m.settled = "ack"; return nil }

type fakeProcessor struct {
	out inbox.Outcome
	err error
	ran bool
}

func (p *fakeProcessor) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	p.ran = true
	if p.err != nil {
		return 0, fmt.Errorf("inbox: %w", p.err)
	}
	return p.out, nil
}

type fakeConsumer struct{ jetstream.Consumer }

func (fakeConsumer) CachedInfo() *jetstream.ConsumerInfo {
	return &jetstream.ConsumerInfo{Name: "fake", Config: jetstream.ConsumerConfig{MaxDeliver: -1}}
}

func TestHandleDecisions(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		msg       fakeMsg
		proc      fakeProcessor
		ctx       context.Context
		want      natsinbox.Action
		settled   string
		delay     time.Duration
		processed bool
		reason    bool // Config.TermWithReason
	}{
		{"processed→ack", fakeMsg{id: "a", delivered: 1}, fakeProcessor{out: inbox.Processed}, nil, natsinbox.Acked, "ack", 0, true, false},
		{"duplicate→ack", fakeMsg{id: "a", delivered: 1}, fakeProcessor{out: inbox.Duplicate}, nil, natsinbox.AckedDup, "ack", 0, true, false},
		{"failure→nak with backoff", fakeMsg{id: "a", delivered: 2}, fakeProcessor{err: boom}, nil, natsinbox.Naked, "nak", 2 * time.Second, true, false},
		{"failure on last delivery→term", fakeMsg{id: "a", delivered: 5}, fakeProcessor{err: boom}, nil, natsinbox.Terminated, "term", 0, true, false},
		{"failure past last delivery→term", fakeMsg{id: "a", delivered: 9}, fakeProcessor{err: boom}, nil, natsinbox.Terminated, "term", 0, true, false},
		{"stopping→immediate nak, never term", fakeMsg{id: "a", delivered: 9}, fakeProcessor{err: context.Canceled}, cancelled, natsinbox.Naked, "nak", 0, true, false},
		{"duplicate on last delivery→ack", fakeMsg{id: "a", delivered: 5}, fakeProcessor{out: inbox.Duplicate}, nil, natsinbox.AckedDup, "ack", 0, true, false},
		{"no id→term, no processing", fakeMsg{delivered: 1}, fakeProcessor{out: inbox.Processed}, nil, natsinbox.Terminated, "term", 0, false, false},
		{"poison→term with reason", fakeMsg{id: "a", delivered: 5}, fakeProcessor{err: boom}, nil, natsinbox.Terminated, "term-reason", 0, true, true},
		{"no id→term with reason", fakeMsg{delivered: 1}, fakeProcessor{out: inbox.Processed}, nil, natsinbox.Terminated, "term-reason", 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := natsinbox.New(&tc.proc, fakeConsumer{}, effect, &natsinbox.Config{
				MessageIDFunc: natsinbox.HeaderID(idHeader), Logger: adaptertest.QuietLogger(), TermWithReason: tc.reason,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			act, err := s.Handle(ctx, &tc.msg)
			if act != tc.want || tc.msg.settled != tc.settled || tc.msg.delay != tc.delay || tc.proc.ran != tc.processed {
				t.Fatalf("got %v (err %v) settled=%q delay=%v processed=%v; want %v %q %v %v",
					act, err, tc.msg.settled, tc.msg.delay, tc.proc.ran, tc.want, tc.settled, tc.delay, tc.processed)
			}
			if (err == nil) != (act == natsinbox.Acked || act == natsinbox.AckedDup) {
				t.Fatalf("err = %v for action %v", err, act)
			}
			if tc.reason && !strings.HasPrefix(tc.msg.reason, "idem: ") {
				t.Fatalf("terminated with reason %q", tc.msg.reason)
			}
		})
	}
}
