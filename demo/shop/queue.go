package shop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one delivery of a message: at least once, maybe more.
type Delivery struct {
	ID   string
	Body []byte
	ack  func(context.Context) error
	nack func(context.Context) error
}

// Ack confirms the delivery: the broker will not deliver it again.
func (d *Delivery) Ack(ctx context.Context) error { return d.ack(ctx) }

// Nack asks for the message to be delivered again.
func (d *Delivery) Nack(ctx context.Context) error { return d.nack(ctx) }

// publisher sends messages to the shipping queue.
type publisher interface {
	Publish(ctx context.Context, id string, body []byte) error
}

// receiver receives the shipping queue's deliveries.
type receiver interface {
	Receive(ctx context.Context) (*Delivery, error)
	Close() error
}

// errNoMessage: nothing arrived within the wait; ask again.
var errNoMessage = errors.New("shop: no message")

// MemQueue is the embedded backend's broker: an at-least-once queue with
// real redelivery. A delivery that is not acked within the visibility
// timeout (its consumer died, or nacked it) is delivered again. It serves
// consumers in other processes over loopback HTTP, so that a consumer can be
// killed for real while the queue lives on in the shop's process.
type MemQueue struct {
	visibility time.Duration

	mu       sync.Mutex
	ready    []*memMsg
	inflight map[string]*memMsg // by receipt
	signal   chan struct{}
	seq      atomic.Int64

	srv *http.Server
	ln  net.Listener

	Published, Delivered, Redelivered atomic.Int64
}

type memMsg struct {
	ID       string `json:"id"`
	Body     []byte `json:"body"`
	Receipt  string `json:"receipt"`
	attempts int
	deadline time.Time
}

// NewMemQueue starts a queue and its loopback HTTP endpoint.
func NewMemQueue(visibility time.Duration) (*MemQueue, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	q := &MemQueue{visibility: visibility, inflight: map[string]*memMsg{}, signal: make(chan struct{}), ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /publish", func(w http.ResponseWriter, r *http.Request) {
		var m memMsg
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = q.Publish(r.Context(), m.ID, m.Body)
	})
	mux.HandleFunc("POST /pull", func(w http.ResponseWriter, r *http.Request) {
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		m, ok := q.pull(r.Context(), wait)
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, m)
	})
	mux.HandleFunc("POST /ack/{receipt}", func(w http.ResponseWriter, r *http.Request) { q.settle(r.PathValue("receipt"), true) })
	mux.HandleFunc("POST /nack/{receipt}", func(w http.ResponseWriter, r *http.Request) { q.settle(r.PathValue("receipt"), false) })
	q.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = q.srv.Serve(ln) }()
	return q, nil
}

// URL is the queue's loopback endpoint.
func (q *MemQueue) URL() string { return "http://" + q.ln.Addr().String() }

// Close stops the HTTP endpoint.
func (q *MemQueue) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return q.srv.Shutdown(ctx)
}

// Publish enqueues a message.
func (q *MemQueue) Publish(_ context.Context, id string, body []byte) error {
	q.mu.Lock()
	q.ready = append(q.ready, &memMsg{ID: id, Body: body})
	q.wakeLocked()
	q.mu.Unlock()
	q.Published.Add(1)
	return nil
}

// Pending is the number of messages not yet acked.
func (q *MemQueue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) + len(q.inflight)
}

func (q *MemQueue) wakeLocked() {
	close(q.signal)
	q.signal = make(chan struct{})
}

func (q *MemQueue) pull(ctx context.Context, wait time.Duration) (memMsg, bool) {
	deadline := time.Now().Add(wait)
	for {
		q.mu.Lock()
		now := time.Now()
		for r, m := range q.inflight { // visibility timeout: deliver again
			if now.After(m.deadline) {
				delete(q.inflight, r)
				q.ready = append(q.ready, m)
			}
		}
		if len(q.ready) > 0 {
			m := q.ready[0]
			q.ready = q.ready[1:]
			m.attempts++
			m.Receipt = strconv.FormatInt(q.seq.Add(1), 10)
			m.deadline = now.Add(q.visibility)
			q.inflight[m.Receipt] = m
			q.mu.Unlock()
			q.Delivered.Add(1)
			if m.attempts > 1 {
				q.Redelivered.Add(1)
			}
			return memMsg{ID: m.ID, Body: m.Body, Receipt: m.Receipt}, true
		}
		sig := q.signal
		q.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return memMsg{}, false
		}
		t := time.NewTimer(min(left, q.visibility/4+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return memMsg{}, false
		case <-sig:
		case <-t.C:
		}
		t.Stop()
	}
}

func (q *MemQueue) settle(receipt string, ack bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, ok := q.inflight[receipt]
	if !ok {
		return // late: it was delivered again already
	}
	delete(q.inflight, receipt)
	if !ack {
		q.ready = append(q.ready, m)
		q.wakeLocked()
	}
}

// memReceiver is a consumer of a MemQueue in another process.
type memReceiver struct {
	base string
	http *http.Client
}

func (r *memReceiver) Receive(ctx context.Context) (*Delivery, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/pull?wait=500ms", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil, errNoMessage
	}
	var m memMsg
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, err
	}
	settle := func(verb string) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/"+verb+"/"+m.Receipt, nil)
			if err != nil {
				return err
			}
			resp, err := r.http.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
	}
	return &Delivery{ID: m.ID, Body: m.Body, ack: settle("ack"), nack: settle("nack")}, nil
}

func (r *memReceiver) Close() error { return nil }

// NATS JetStream.

const msgIDHeader = "Shop-Msg-Id"

type natsQueue struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	cons    jetstream.Consumer
	iter    jetstream.MessagesContext
}

// openNATS connects to stream (created when create is set) and, for a
// consumer, to its durable pull consumer "shipping".
func openNATS(ctx context.Context, url, stream string, create, consume bool) (*natsQueue, error) {
	nc, err := nats.Connect(url, nats.Name("idem-shop"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	q := &natsQueue{nc: nc, js: js, subject: "shop." + stream + ".ship"}
	if create {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{q.subject}, Storage: jetstream.FileStorage}); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats stream: %w", err)
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1000,
		}); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats consumer: %w", err)
		}
	}
	if consume {
		if q.cons, err = js.Consumer(ctx, stream, "shipping"); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats consumer: %w", err)
		}
		if q.iter, err = q.cons.Messages(jetstream.PullMaxMessages(8)); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return q, nil
}

func (q *natsQueue) Publish(ctx context.Context, id string, body []byte) error {
	m := nats.NewMsg(q.subject)
	m.Header.Set(msgIDHeader, id) // not Nats-Msg-Id: duplicates must reach the consumer
	m.Data = body
	_, err := q.js.PublishMsg(ctx, m)
	return err
}

func (q *natsQueue) Receive(ctx context.Context) (*Delivery, error) {
	type res struct {
		m   jetstream.Msg
		err error
	}
	ch := make(chan res, 1)
	go func() { m, err := q.iter.Next(); ch <- res{m, err} }()
	var r res
	select {
	case r = <-ch:
	case <-ctx.Done():
		q.iter.Stop()
		<-ch
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	m := r.m
	return &Delivery{ID: m.Headers().Get(msgIDHeader), Body: m.Data(),
		ack:  func(context.Context) error { return m.Ack() },
		nack: func(context.Context) error { return m.Nak() }}, nil
}

func (q *natsQueue) Close() error {
	if q.iter != nil {
		q.iter.Stop()
	}
	q.nc.Close()
	return nil
}

func deleteNATSStream(ctx context.Context, url, stream string) {
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	if js, err := jetstream.New(nc); err == nil {
		_ = js.DeleteStream(ctx, stream)
	}
}

// RabbitMQ.

type amqpQueue struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
	mu    sync.Mutex
	dels  <-chan amqp.Delivery
}

func openAMQP(url, queue string, create, consume bool) (*amqpQueue, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp: %w", err)
	}
	q := &amqpQueue{conn: conn, ch: ch, queue: queue}
	if create {
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("amqp queue: %w", err)
		}
	}
	if consume {
		if err := ch.Qos(8, 0, false); err != nil {
			conn.Close()
			return nil, err
		}
		if q.dels, err = ch.Consume(queue, "", false, false, false, false, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("amqp consume: %w", err)
		}
	} else if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *amqpQueue) Publish(ctx context.Context, id string, body []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.ch.PublishWithDeferredConfirmWithContext(ctx, "", q.queue, false, false,
		amqp.Publishing{MessageId: id, Body: body, DeliveryMode: amqp.Persistent})
	if err != nil {
		return err
	}
	if ok, err := c.WaitContext(ctx); err != nil || !ok {
		return errors.Join(errors.New("amqp: publish not confirmed"), err)
	}
	return nil
}

func (q *amqpQueue) Receive(ctx context.Context) (*Delivery, error) {
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case d, ok := <-q.dels:
		if !ok {
			return nil, errors.New("amqp: channel closed")
		}
		return &Delivery{ID: d.MessageId, Body: d.Body,
			ack:  func(context.Context) error { return d.Ack(false) },
			nack: func(context.Context) error { return d.Nack(false, true) }}, nil
	case <-t.C:
		return nil, errNoMessage
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *amqpQueue) Close() error { return q.conn.Close() }

func deleteAMQPQueue(url, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(queue, false, false, false)
	}
}
