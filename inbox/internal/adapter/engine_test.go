package adapter

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
)

// msg is a fake broker message: its ID, and what the fake broker did.
type msg struct {
	id string

	mu      sync.Mutex
	settled []string // "ack", "hand-back", "redeliver", "dead-letter", "discard"
}

func (m *msg) did(what string) {
	m.mu.Lock()
	m.settled = append(m.settled, what)
	m.mu.Unlock()
}

type fakeBroker struct {
	quit  <-chan struct{}
	waits atomic.Int64
	dead  atomic.Int64
	last  Envelope // of the last dead letter
}

func (*fakeBroker) MessageID(m *msg) (string, error) { return m.id, nil }
func (*fakeBroker) Key(m *msg, _ string) string      { return m.id }
func (*fakeBroker) Ack(m *msg, _ bool) error         { m.did("ack"); return nil }
func (*fakeBroker) HandBack(_ context.Context, m *msg, _ time.Duration) error {
	m.did("hand-back")
	return nil
}
func (*fakeBroker) Redeliver(_ context.Context, m *msg, _ time.Duration) error {
	m.did("redeliver")
	return nil
}
func (b *fakeBroker) Wait(ctx context.Context, _ *msg, d time.Duration, _ Failure) bool {
	b.waits.Add(1)
	return Sleep(ctx, d, b.quit)
}
func (b *fakeBroker) DeadLetter(_ context.Context, m *msg, e Envelope) error {
	b.dead.Add(1)
	b.last = e
	m.did("dead-letter")
	return nil
}
func (*fakeBroker) Discard(m *msg, _ string) error { m.did("discard"); return nil }

// procFunc is a function that is an inbox.Processor; it runs h without a
// transaction.
type procFunc func(ctx context.Context, id string, h inbox.Handler) (inbox.Outcome, error)

func (f procFunc) Process(ctx context.Context, _, id string, h inbox.Handler) (inbox.Outcome, error) {
	return f(ctx, id, h)
}

func newEngine(p inbox.Processor, h func(context.Context, *sql.Tx, *msg) error, quit chan struct{}) (*Engine[*msg], *fakeBroker) {
	b := &fakeBroker{quit: quit}
	return &Engine[*msg]{
		Package: "enginetest", Processor: p, Consumer: "c", Handler: h, Broker: b,
		Metrics: NewMetrics(nil, "fake", "c"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxFailures: 3, Backoff: func(int) time.Duration { return 0 }, TransientBackoff: func(int) time.Duration { return time.Millisecond },
		DeadLetters: true, Quit: quit,
	}, b
}

var runHandler = procFunc(func(ctx context.Context, _ string, h inbox.Handler) (inbox.Outcome, error) {
	return inbox.Processed, h(ctx, nil)
})

// Deliveries of one failing message handled at once by many workers (a
// broker that redelivers while an earlier delivery is still failing):
// every failure spends the budget exactly once, and the failure that
// spends the last unit dead-letters, under -race.
func TestEnginePoisonBudgetConcurrent(t *testing.T) {
	boom := errors.New("boom")
	e, b := newEngine(runHandler, func(context.Context, *sql.Tx, *msg) error { return boom }, make(chan struct{}))
	const workers = 16
	e.MaxFailures = workers + 1
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			if act, err := e.Handle(context.Background(), &msg{id: "poison"}); act != inbox.HandedBack || !errors.Is(err, boom) {
				t.Errorf("failure below the budget: %v, %v", act, err)
			}
		})
	}
	wg.Wait()
	if st := e.Metrics.Stats(0); st.Retried != workers || st.DeadLettered != 0 || b.dead.Load() != 0 {
		t.Fatalf("after %d failures: stats %+v, %d dead letters", workers, st, b.dead.Load())
	}
	m := &msg{id: "poison"}
	if act, _ := e.Handle(context.Background(), m); act != inbox.DeadLettered || b.last.Failures != workers+1 {
		t.Fatalf("failure %d: %v, envelope %+v", workers+1, act, b.last)
	}
	if e.fails.Get("poison") != 0 {
		t.Fatal("the budget of a dead-lettered message is still counted")
	}
}

// The Stop bound: once Quit is closed, a message held through an outage is
// handed back, the next infrastructure failure hands its message back,
// and every later message is handed back without an attempt.
func TestEngineStopDuringOutage(t *testing.T) {
	var attempts atomic.Int64
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	p := procFunc(func(context.Context, string, inbox.Handler) (inbox.Outcome, error) {
		attempts.Add(1)
		return 0, refused
	})
	quit := make(chan struct{})
	e, _ := newEngine(p, nil, quit)
	held := &msg{id: "held"}
	done := make(chan inbox.Action)
	go func() {
		act, _ := e.Handle(context.Background(), held)
		done <- act
	}()
	for attempts.Load() < 2 { // retried in place while the outage lasts
		time.Sleep(time.Millisecond)
	}
	close(quit)
	if act := <-done; act != inbox.HandedBack {
		t.Fatalf("held message: %v", act)
	}
	if act, _ := e.Handle(context.Background(), &msg{id: "next"}); act != inbox.HandedBack {
		t.Fatalf("first message after Stop: %v", act)
	}
	before := attempts.Load()
	var wg sync.WaitGroup
	msgs := make([]*msg, 8)
	for i := range msgs {
		msgs[i] = &msg{id: "m" + strconv.Itoa(i)}
		wg.Go(func() {
			if act, err := e.Handle(context.Background(), msgs[i]); act != inbox.HandedBack || err == nil {
				t.Errorf("after stop: %v, %v", act, err)
			}
		})
	}
	wg.Wait()
	if n := attempts.Load() - before; n != 0 {
		t.Fatalf("%d attempts after the outage was seen while stopping; want none", n)
	}
	for _, m := range msgs {
		if len(m.settled) != 1 || m.settled[0] != "hand-back" {
			t.Fatalf("%s settled %v", m.id, m.settled)
		}
	}
}

// An in-place engine (Kafka) never hands a failing message back: it
// waits and tries again until the budget is spent, then dead-letters.
func TestEngineInPlace(t *testing.T) {
	calls := 0
	e, b := newEngine(runHandler, func(context.Context, *sql.Tx, *msg) error {
		calls++
		return errors.New("bad")
	}, make(chan struct{}))
	e.InPlace = true
	m := &msg{id: "r"}
	act, err := e.Handle(context.Background(), m)
	if act != inbox.DeadLettered || err == nil || calls != 3 || b.waits.Load() != 2 {
		t.Fatalf("%v %v after %d calls, %d waits", act, err, calls, b.waits.Load())
	}
	if len(m.settled) != 2 || m.settled[0] != "dead-letter" || m.settled[1] != "discard" {
		t.Fatalf("settled %v", m.settled)
	}
}
