package natsoutbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// advisories records the server's advisories about a consumer's messages
// that were terminated or ran out of deliveries: either means the
// consumer will never see that stream sequence again.
type advisories struct {
	sub  *nats.Subscription
	mu   sync.Mutex
	seen []string // "MSG_TERMINATED #12", "MAX_DELIVERIES #40"
}

func watchAdvisories(nc *nats.Conn, stream, consumer string) (*advisories, error) {
	a := &advisories{}
	var err error
	a.sub, err = nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.*."+stream+"."+consumer, func(m *nats.Msg) {
		kind := strings.Split(m.Subject, ".")[4]
		if kind != "MSG_TERMINATED" && kind != "MAX_DELIVERIES" {
			return
		}
		var body struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		_ = json.Unmarshal(m.Data, &body)
		a.mu.Lock()
		a.seen = append(a.seen, fmt.Sprintf("%s #%d", kind, body.StreamSeq))
		a.mu.Unlock()
	})
	return a, err
}

func (a *advisories) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func (a *advisories) stop() { _ = a.sub.Unsubscribe() }

// explainMissing reports, for a stalled pipeline, each message of
// m-0 … m-(n-1) with no effect (the first 20): its outbox state and the
// stream sequences that hold its Nats-Msg-Id; then the consumer's state,
// the subscriber's counts, and any message the server terminated or gave
// up redelivering.
func (p *pipeline) explainMissing(t *testing.T, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	missing := adaptertest.MissingEffects(t, ctx, p.db, p.effects, n)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d messages not applied\n", len(missing), n)
	copies, scanErr := p.streamCopies(ctx)
	for i, id := range missing {
		if i == 20 {
			fmt.Fprintf(&b, "  … and %d more\n", len(missing)-i)
			break
		}
		in, err := p.ob.Get(ctx, id)
		fmt.Fprintf(&b, "  %s: outbox state %v, %d attempts, reason %q (%v); stream sequences %v\n", id, in.State, in.Attempts, in.Reason, err, copies[id])
	}
	if scanErr != nil {
		fmt.Fprintf(&b, "  reading the stream: %v\n", scanErr)
	}
	b.WriteString(p.consumerState(ctx))
	return b.String()
}

// streamCopies maps each Nats-Msg-Id in the stream to the sequences that
// hold it (a repeat outside the duplicate window is stored again).
func (p *pipeline) streamCopies(ctx context.Context) (map[string][]uint64, error) {
	copies := map[string][]uint64{}
	st, err := p.js.Stream(ctx, p.stream)
	if err != nil {
		return copies, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return copies, err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			return copies, fmt.Errorf("sequence %d: %w", seq, err)
		}
		id := m.Header.Get(nats.MsgIdHdr)
		copies[id] = append(copies[id], seq)
	}
	return copies, nil
}

// consumerState describes the JetStream consumer and the subscriber's
// counts: how many deliveries were repeats, and of what.
func (p *pipeline) consumerState(ctx context.Context) string {
	var b strings.Builder
	if st, err := p.js.Stream(ctx, p.stream); err != nil {
		fmt.Fprintf(&b, "stream: %v", err)
	} else if c, err := st.Consumer(ctx, "worker"); err != nil {
		fmt.Fprintf(&b, "consumer: %v", err)
	} else if ci, err := c.Info(ctx); err != nil {
		fmt.Fprintf(&b, "consumer info: %v", err)
	} else {
		fmt.Fprintf(&b, "consumer: NumPending %d, NumAckPending %d, NumRedelivered %d, NumWaiting %d, delivered #%d, ack floor #%d",
			ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
	}
	if p.sub != nil {
		s := p.sub.Stats()
		fmt.Fprintf(&b, "; subscriber: %d processed, %d duplicates, %d retried, %d dead-lettered, %d parked", s.Processed, s.Duplicates, s.Retried, s.DeadLettered, s.Parked)
	}
	if p.events != nil {
		fmt.Fprintf(&b, "; terminated or out of deliveries: %v", p.events.list())
	}
	return b.String()
}

// TestStallReportNamesMissingMessages checks the report a stalled
// checkEffects gives: a message whose effect is gone is named with its
// outbox state and the stream sequence holding it, beside the consumer's
// state.
func TestStallReportNamesMissingMessages(t *testing.T) {
	t.Parallel()
	url := testenv.NATS.Need(t)
	p := newPipeline(t, url, jetstream.MemoryStorage, time.Minute, outbox.Postgres)
	p.enqueue(t, 0, 10, 2)
	np, err := natsoutbox.New(p.js, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.ob.NewRelay(np, nil)
	if err != nil {
		t.Fatal(err)
	}
	for sent := 0; sent < 10; {
		n, err := r.RunOnce(ctxT(t))
		if err != nil || n == 0 {
			t.Fatalf("RunOnce: %d, %v after %d sent", n, err, sent)
		}
		sent += n
	}
	p.consume(t)
	p.checkEffects(t, 10)
	// The effect of m-3 vanishes, as if it had never been applied.
	if _, err := p.db.ExecContext(ctxT(t), `DELETE FROM `+p.effects+` WHERE message_id = 'm-3'`); err != nil {
		t.Fatal(err)
	}
	got := p.explainMissing(t, 10)
	for _, want := range []string{"1 of 10 messages not applied", "m-3: outbox state sent", "stream sequences [4]", "NumPending 0", "10 processed", "terminated or out of deliveries: []"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
}
