package natsoutbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

func newRelay(t testing.TB, p *pipeline, pub outbox.Publisher, cfg *outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	if pub == nil {
		np, err := natsoutbox.New(p.js, nil)
		if err != nil {
			t.Fatal(err)
		}
		pub = np
	}
	r, err := p.ob.NewRelay(pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOutboxToInbox: two relays publish 400 messages over 20 keys; the
// inbox applies each once, per key in commit order, with no adapter
// configuration (Nats-Msg-Id is the message ID on both sides).
func TestOutboxToInbox(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, testenv.NATS.Need(t), jetstream.MemoryStorage, 0, outbox.Postgres)
	const n, keys = 400, 20
	p.consume(t)
	ctx := ctxT(t)
	for range 2 {
		r := newRelay(t, p, nil, &outbox.RelayConfig{BatchSize: 32, PollInterval: 10 * time.Millisecond})
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(context.Background()) })
	}
	p.enqueue(t, 0, n, keys)
	p.checkEffects(t, n)
}

// TestRefusedMessageParked: a payload over max_payload is parked with its
// reason; the messages of other keys are published.
func TestRefusedMessageParked(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, testenv.NATS.Need(t), jetstream.MemoryStorage, 0, outbox.Postgres)
	ctx := ctxT(t)
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := outbox.Message{ID: "big", Destination: p.stream + ".orders", OrderingKey: "A", Payload: make([]byte, 8<<20)}
	small := outbox.Message{ID: "small", Destination: p.stream + ".orders", OrderingKey: "B", Payload: []byte("1")}
	for _, m := range []outbox.Message{big, small} {
		if err := p.ob.Enqueue(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, p, nil, nil)
	for range 3 {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	in, err := p.ob.Get(ctx, "big")
	if err != nil || in.State != outbox.Parked || !strings.Contains(in.Reason, "maximum payload") {
		t.Fatalf("big: %+v, %v; want parked with the reason", in, err)
	}
	if in, err := p.ob.Get(ctx, "small"); err != nil || in.State != outbox.Sent {
		t.Fatalf("small: %+v, %v; want sent", in, err)
	}
}

// countingPublisher counts Publish calls.
type countingPublisher struct {
	outbox.Publisher
	calls atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, b []outbox.Message) []error {
	c.calls.Add(1)
	return c.Publisher.Publish(ctx, b)
}

// TestBrokerAway: a private nats-server is killed while messages keep
// being committed, and restarted 3 s later on the same port and store. The
// relay backs off (a bounded number of publish attempts), nothing is lost,
// and the inbox applies each message once.
//
// Sized at 3 s rather than the 60 s: the backoff reaches its cap
// (1 s here) within the first seconds, so a longer outage only repeats
// the same capped wait, and CI has 20 minutes for everything.
func TestBrokerAway(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	p := newPipeline(t, srv.url(), jetstream.FileStorage, 0, outbox.Postgres)
	ctx := ctxT(t)
	np, err := natsoutbox.New(p.js, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := &countingPublisher{Publisher: np}
	r := newRelay(t, p, cp, &outbox.RelayConfig{PublishTimeout: 500 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 10 * time.Millisecond})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	p.consume(t)
	p.enqueue(t, 0, 100, 10)
	waitFor(t, "the first messages sent", func() bool { in, err := p.ob.Get(ctx, "m-99"); return err == nil && in.State == outbox.Sent })
	srv.stop()
	before := cp.calls.Load()
	p.enqueue(t, 100, 200, 10) // the business goes on while the broker is away
	time.Sleep(3 * time.Second)
	during := cp.calls.Load() - before
	srv.start()
	p.checkEffects(t, 200)
	// Spinning would be thousands of calls; with waits doubling from 50 ms
	// to 1 s (each call waiting up to 500 ms for its PubAck) it is a handful.
	if during > 40 {
		t.Fatalf("%d publish attempts in a 3 s outage: the relay spins", during)
	}
	t.Logf("%d publish attempts during the 3 s outage", during)
}
