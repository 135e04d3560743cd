package step_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/step"
)

// The message handler of these tests runs the rig's four-step operation
// with step.Do under the message's key (inbox.MessageKey), then writes
// "inbox-tx" in the inbox's transaction, as a JetStream consumer through
// natsinbox, on PostgreSQL; its charge step goes through idem proxy to
// the rig's charge service.
const (
	inboxConsumer = "orders"
	idHeader      = "Idem-Message-Id" // not Nats-Msg-Id: the tests publish duplicates on purpose
)

func (r *rig) handler() natsinbox.Handler {
	return func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		key, err := inbox.MessageKey(inboxConsumer, msg.Headers().Get(idHeader))
		if err != nil {
			return inbox.Permanent(err)
		}
		if _, err := step.Do(ctx, r.store, key, &idem.Options{Lease: r.Lease}, r.op); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, r.q("INSERT INTO {eff} (id, step, fence) VALUES (?, 'inbox-tx', 0)"), key.ID())
		return err
	}
}

// subscribe starts a subscriber of js's consumer with r's handler and
// stops it when the test ends.
func (r *rig) subscribe(t *testing.T, p inbox.Processor, js *adaptertest.JetStream, cfg natsinbox.Config) {
	t.Helper()
	cfg.Consumer = inboxConsumer
	cfg.MessageIDFunc = natsinbox.HeaderID(idHeader)
	cfg.Logger = adaptertest.QuietLogger()
	s, err := natsinbox.New(p, js.Cons, r.handler(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adaptertest.Stop(t, s, 10*time.Second) })
}

func newInbox(t testing.TB, db *sql.DB) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: testenv.Name("inbox")})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return ib
}

func publish(t testing.TB, js *adaptertest.JetStream, id string) {
	t.Helper()
	m := nats.NewMsg(js.Stream + ".orders")
	m.Header.Set(idHeader, id)
	m.Data = []byte("order")
	if _, err := js.JS.PublishMsg(ctxT(t), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// TestInboxCrashResumes: a consumer process is SIGKILLed in the middle of
// a message's handler, after the keyed foreign step ("charge") called its
// service and stored its recovery point, before the next step. JetStream
// redelivers the message to another consumer while the dead one's claim
// still has its lease (the redelivery waits for it: idem.ErrInFlight is
// transient, never poison, though two failures would dead-letter the
// message), which resumes at the next step: every step had its effect
// once, the charge step was called once and charged once at its service,
// and the inbox's transaction committed once.
func TestInboxCrashResumes(t *testing.T) {
	t.Parallel()
	js := adaptertest.NewJetStream(t, time.Second)
	dlq := js.DeadLetterStream(t)
	r := newRig(t, backends[1], newChargeService(t))
	r.Lease = 5 * time.Second // outlasts the AckWait: the redelivery finds the claim live
	ib := newInbox(t, r.db)
	id := testenv.Name("msg")
	key, err := inbox.MessageKey(inboxConsumer, id)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, id)

	env := r.inboxChildEnv(ib.Table(), js.Stream, "charge", "after-point")
	if rest := testenv.KillAtLine(t, "READY", time.Minute, env, "-test.run=^$"); rest != "" {
		t.Fatalf("child said READY%s", rest)
	}
	if c := r.countsOf(t, key); c["reserve"] != 1 || c["charge-call"] != 1 || c["charge"] != 1 || c["record"] != 0 || c["inbox-tx"] != 0 {
		t.Fatalf("effects when the child died: %v; want reserve, charge-call and charge once, no record, no inbox-tx", c)
	}
	if js.Settled(t) {
		t.Fatal("the message is settled, though the child never acked it")
	}

	rec := &adaptertest.Recorder{P: ib}
	r.subscribe(t, rec, js, natsinbox.Config{
		MaxFailures: 2, DeadLetterSubject: dlq, JetStream: js.JS,
		BackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
	})
	adaptertest.WaitFor(t, "the redelivery to be processed and acked, or dead-lettered", time.Minute, func() bool {
		return rec.Processed.Load() == 1 && js.Settled(t) || len(js.DeadLettered(t)) > 0
	})
	if dl := js.DeadLettered(t); len(dl) > 0 {
		t.Fatalf("the redelivery was dead-lettered: %s", dl[0].Header.Get(natsinbox.ErrorHeader))
	}
	want := map[string]int{"reserve": 1, "charge-call": 1, "charge": 1, "record": 1, "emit": 1, "inbox-tx": 1}
	c := r.countsOf(t, key)
	if !maps.Equal(c, want) {
		t.Fatalf("effects after the redelivery: %v, want %v", c, want)
	}
	t.Logf("inbox crash after the charge step's point, on PostgreSQL: effects after the redelivery %v (charge: at the service, through idem proxy)", c)
}

// TestInboxConcurrentDuplicates: one message published 12 times, consumed
// by two subscribers of 4 workers each; the first delivery to reach the
// step "record" fails there (its inbox transaction rolls back, its claim
// is released), so another delivery resumes the operation while the
// others wait on the dedup row. Every step had its effect once, the
// charge step was called once and charged once at its service, and
// exactly one delivery was processed; the others are duplicates.
func TestInboxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	js := adaptertest.NewJetStream(t, 30*time.Second)
	r := newRig(t, backends[1], newChargeService(t))
	var failed atomic.Bool
	r.fail = func(name string) error {
		if name == "record" && failed.CompareAndSwap(false, true) {
			return errors.New("record: the ledger timed out")
		}
		return nil
	}
	ib := newInbox(t, r.db)
	id := testenv.Name("msg")
	key, err := inbox.MessageKey(inboxConsumer, id)
	if err != nil {
		t.Fatal(err)
	}
	const copies = 12
	for range copies {
		publish(t, js, id)
	}
	rec := &adaptertest.Recorder{P: ib}
	for range 2 {
		r.subscribe(t, rec, js, natsinbox.Config{
			Concurrency: 4, BackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
		})
	}
	adaptertest.WaitFor(t, "every copy to be acked", time.Minute, func() bool {
		return rec.Processed.Load()+rec.Duplicates.Load() == copies && js.Settled(t)
	})
	if !failed.Load() || rec.Failures.Load() < 1 {
		t.Fatalf("the step record never failed (failures %d): the hand-over was not tested", rec.Failures.Load())
	}
	if rec.Processed.Load() != 1 {
		t.Errorf("%d deliveries processed, want 1", rec.Processed.Load())
	}
	want := map[string]int{"reserve": 1, "charge-call": 1, "charge": 1, "record": 1, "emit": 1, "inbox-tx": 1}
	c := r.countsOf(t, key)
	if !maps.Equal(c, want) {
		t.Fatalf("effects: %v, want %v", c, want)
	}
	t.Logf("inbox concurrent duplicates on PostgreSQL: %d copies, %d processed, %d duplicates, %d failed deliveries; effects %v (charge: at the service, through idem proxy)",
		copies, rec.Processed.Load(), rec.Duplicates.Load(), rec.Failures.Load(), c)
}

// The inbox child is this test binary re-executed with the rig's
// childEnv (its spec; ID unused) and inboxChildEnv set to the JSON of an
// inboxSpec: a natsinbox subscriber of the stream's consumer "worker"
// with the handler above, which prints READY at the boundary named and
// waits there for the parent's SIGKILL.
const inboxChildEnv = "IDEM_STEP_INBOX_CHILD"

type inboxSpec struct {
	Table  string // the inbox's, on the business database
	NATS   string // the server's URL
	Stream string
}

func (r *rig) inboxChildEnv(inboxTable, stream, name, point string) []string {
	data, err := json.Marshal(inboxSpec{Table: inboxTable, NATS: testenv.NATS.DSN(), Stream: stream})
	if err != nil {
		panic(err) // strings
	}
	return append(r.childEnv("", name, point), inboxChildEnv+"="+string(data))
}

func inboxChild() int {
	r, err := childRig()
	if err != nil {
		return childFailed(err)
	}
	var sp inboxSpec
	if err := json.Unmarshal([]byte(os.Getenv(inboxChildEnv)), &sp); err != nil {
		return childFailed(fmt.Errorf("$%s: %w", inboxChildEnv, err))
	}
	ib, err := inbox.New(r.db, &inbox.Config{Dialect: inbox.Postgres, Table: sp.Table})
	if err != nil {
		return childFailed(err)
	}
	nc, err := nats.Connect(sp.NATS)
	if err != nil {
		return childFailed(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return childFailed(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := js.Consumer(ctx, sp.Stream, "worker")
	if err != nil {
		return childFailed(err)
	}
	s, err := natsinbox.New(ib, cons, r.handler(), &natsinbox.Config{Consumer: inboxConsumer, MessageIDFunc: natsinbox.HeaderID(idHeader)})
	if err != nil {
		return childFailed(err)
	}
	if err := s.Start(ctx); err != nil {
		return childFailed(err)
	}
	<-ctx.Done()
	return childFailed(errors.New("the handler never reached the kill point"))
}
