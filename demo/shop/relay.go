package shop

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/outbox"
)

// The outbox: the PAID transaction enqueues the shipping message with
// package outbox (Shop.writeOutbox), and a relay from package outbox
// publishes it to the shipping queue and marks it sent once the broker has
// confirmed it. In the storm the relay is a child process, like the
// consumer, and is SIGKILLed after the broker confirmed a batch and before
// the batch was marked sent: the next relay publishes it again, with the
// same message ID, and the consumer's inbox drops the copies.

// Child roles (childConfig.Role).
const (
	roleConsumer = "" // the shipping consumer
	roleRelay    = "relay"
)

const (
	outboxTable       = "idem_outbox"
	outboxDestination = "shop.shipping"
)

// relayConfig is the shop's relay: short polls and backoffs, so that the
// storm does not wait for it, and on SQLite a one-second lease, so that a
// relay that was killed is replaced within a second.
func relayConfig() *outbox.RelayConfig {
	return &outbox.RelayConfig{BatchSize: 16, PollInterval: 25 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Lease: time.Second,
		Logger: slog.New(slog.DiscardHandler)}
}

// openOutbox returns the shop's outbox on db.
func openOutbox(db *sql.DB, d Dialect) (*outbox.Outbox, error) {
	return outbox.New(db, &outbox.Config{Dialect: d, Table: outboxTable})
}

// queuePublisher is an outbox.Publisher over the shop's shipping queue.
// Every message whose ID dup selects is published twice (a broker or a
// publisher that repeats itself); after each batch, once crashAt messages
// were published, it calls crash, between the broker's confirm and the
// relay's mark.
type queuePublisher struct {
	pub       publisher
	dup       func(id string) bool
	published func(id string)
	crashAt   int
	crash     func(ctx context.Context)
	n         int
}

func (p *queuePublisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	for i, m := range batch {
		if errs[i] = p.pub.Publish(ctx, m.ID, m.Payload); errs[i] != nil {
			continue
		}
		if p.dup != nil && p.dup(m.ID) {
			_ = p.pub.Publish(ctx, m.ID, m.Payload)
		}
		p.n++
		if p.published != nil {
			p.published(m.ID)
		}
	}
	if p.crashAt > 0 && p.n >= p.crashAt && p.crash != nil {
		p.crash(ctx)
	}
	return errs
}

// memPublisher publishes to a MemQueue in another process.
type memPublisher struct {
	base string
	http *http.Client
}

func (p *memPublisher) Publish(ctx context.Context, id string, body []byte) error {
	b, _ := json.Marshal(memMsg{ID: id, Body: body})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/publish", bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("memory queue: publish: status %d", resp.StatusCode)
	}
	return nil
}

// relay runs package outbox's relay on the shop's database until ctx ends.
// It reports "R" once started, "U id" per message the broker confirmed,
// and "C" when it reaches cfg.CrashAt: the broker has confirmed the batch,
// the relay has not marked it sent, and the parent kills the process.
func relay(ctx context.Context, cfg childConfig, say func(kind, id string)) error {
	db, err := sql.Open(cfg.Driver, cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	d := fsm.SQLite
	if cfg.Postgres {
		d = fsm.Postgres
	}
	ob, err := openOutbox(db, d)
	if err != nil {
		return err
	}
	var pub publisher
	switch cfg.Queue {
	case "memory":
		mp := &memPublisher{base: cfg.QueueURL, http: &http.Client{Timeout: 5 * time.Second}}
		defer mp.http.CloseIdleConnections()
		pub = mp
	case "nats":
		q, err := openNATS(ctx, cfg.QueueURL, cfg.QueueName, false, false)
		if err != nil {
			return err
		}
		defer q.Close()
		pub = q
	case "amqp":
		q, err := openAMQP(cfg.QueueURL, cfg.QueueName, false, false)
		if err != nil {
			return err
		}
		defer q.Close()
		pub = q
	default:
		return fmt.Errorf("unknown queue %q", cfg.Queue)
	}
	qp := &queuePublisher{pub: pub, crashAt: cfg.CrashAt,
		published: func(id string) { say("U", id) },
		crash: func(ctx context.Context) {
			say("C", "-") // confirmed by the broker, not marked: the parent kills us now
			<-ctx.Done()
		}}
	if cfg.DuplicateEvery > 0 {
		qp.dup = func(id string) bool { return hashMod(id, cfg.DuplicateEvery) == 0 }
	}
	r, err := ob.NewRelay(qp, relayConfig())
	if err != nil {
		return err
	}
	if err := r.Start(context.Background()); err != nil {
		return err
	}
	say("R", "-")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Stop(sctx)
}
