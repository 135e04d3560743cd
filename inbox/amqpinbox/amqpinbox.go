package amqpinbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Handler does the business work for one delivery inside the inbox
// transaction. It must not ack the delivery itself.
type Handler func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error

// Headers of a dead-lettered copy, besides the original's own headers and
// properties.
const (
	// ErrorHeader carries the last processing error, at most 1 KiB.
	ErrorHeader = adapter.ErrorHeader // "Idem-Error"
	// FailuresHeader carries how many attempts failed with an ordinary
	// error. The subscriber never reads it back: the failure count of a
	// message is kept in the subscriber's memory, because a header is
	// something any producer can set.
	FailuresHeader = adapter.FailuresHeader // "Idem-Failures"
	// QueueHeader carries the queue the message was consumed from.
	QueueHeader = "Idem-Queue"
)

var (
	// ErrNoMessageID: the delivery carries no message ID, so it cannot be
	// deduplicated; it is dead-lettered.
	ErrNoMessageID = errors.New("amqpinbox: delivery has no message ID")
	// ErrStopped is returned by Start on a subscriber already started or stopped.
	ErrStopped = errors.New("amqpinbox: subscriber already started or stopped")
	// ErrChannelClosed is Err's value when the broker or the connection
	// closed the consuming channel under a running subscriber, or the
	// publishing channel was lost and could not be reopened.
	ErrChannelClosed = errors.New("amqpinbox: channel closed")
)

// Config tunes a Subscriber. Only Queue is required.
type Config struct {
	// Queue to consume. Required.
	Queue string

	// Consumer is the inbox consumer name: the scope of the dedup rows.
	// Default: Queue.
	Consumer string

	// MessageIDFunc extracts the business message ID. Default: the
	// MessageId property. An empty ID or ErrNoMessageID dead-letters it;
	// another error is a failed attempt, judged like a handler's.
	MessageIDFunc func(d *amqp.Delivery) (string, error)

	// MaxFailures dead-letters a message whose processing failed this
	// many times with an ordinary error. Infrastructure failures
	// (inbox.IsTransient) are retried in place and do not count. The count
	// is kept in this subscriber's memory (never read from a header): a
	// restart starts it again. Default 5.
	MaxFailures int

	// BackoffFunc is how long a failed delivery waits before it is
	// delivered again, after its failures-th failure. Default
	// DefaultBackoff: 100ms doubling per failure, at most 5s. The wait is
	// spent in RetryQueue, not in a worker: the queue behind a failing
	// message keeps flowing, also at Concurrency 1.
	BackoffFunc func(failures int) time.Duration

	// RetryQueue holds failed and early deliveries for their backoff: a
	// durable queue the subscriber declares at Start, whose messages
	// expire (per-message TTL: the backoff) into the default exchange with
	// Queue as the routing key, back to the tail of Queue. The copy is
	// confirmed before the original is acked (a crash in between leaves
	// two copies of one message ID; the inbox makes the second a
	// Duplicate). RabbitMQ expires messages only at the head of a queue,
	// so a copy may wait up to the longest backoff in front of it.
	// Default Queue + ".retry". "-": no retry queue; the worker holds the
	// delivery for its backoff, then nacks it (which stalls the queue
	// behind it at Concurrency 1).
	RetryQueue string

	// TransientBackoffFunc gives the wait before the attempt-th in-place
	// retry of an infrastructure failure; the delivery stays unacked with
	// the worker meanwhile. Default: 100ms doubling, at most 5s.
	TransientBackoffFunc func(attempt int) time.Duration

	// ProcessTimeout bounds one attempt (MessageIDFunc, Process and the
	// handler); its expiry counts as an infrastructure failure. Default
	// 30s; negative: no bound.
	ProcessTimeout time.Duration

	// DeadLetterExchange receives poison messages (with ErrorHeader,
	// FailuresHeader and QueueHeader) under DeadLetterRoutingKey
	// (default: the original routing key), published mandatory and with
	// confirms before the original is acked.
	DeadLetterExchange   string
	DeadLetterRoutingKey string

	// DeadLetterQueue is used when DeadLetterExchange is empty: a durable
	// queue the subscriber declares at Start and publishes poison to
	// (through the default exchange, with confirms). Default Queue +
	// ".dead-letter".
	DeadLetterQueue string

	// RejectToQueueDLX rejects poison (requeue=false) instead of
	// publishing it, for a queue whose own x-dead-letter-exchange (argument
	// or policy) takes it. Only set it when the queue has one: without, the
	// broker drops the message. DeadLetterExchange and DeadLetterQueue are
	// then unused.
	RejectToQueueDLX bool

	// Concurrency is the number of deliveries processed at once. Default 1.
	Concurrency int

	// Prefetch is the channel's QoS prefetch count for the deliveries being
	// worked on. Default 2×Concurrency. The channel's QoS is Prefetch +
	// MaxParked, so that parked deliveries never starve the workers.
	Prefetch int

	// MaxParked is how many early deliveries (inbox.ErrNotYet, such as
	// watermark.ErrGap in Strict mode) the subscriber keeps aside at once:
	// a parked delivery stays unacked and runs again as soon as another
	// message was applied, so that a gap fills in one pass. Beyond it, and
	// for deliveries parked longer than ParkTimeout, an early delivery goes
	// to the back of the queue after TransientBackoffFunc's wait. Default
	// 100; negative: park nothing.
	MaxParked int

	// ParkTimeout is how long a delivery stays parked. Default 30s.
	ParkTimeout time.Duration

	// Observer, when set, is told every delivery's outcome (Adapter
	// "amqp"); promidem.NewInboxObserver counts them as
	// idem_inbox_messages_total. Stats counts them either way.
	Observer inbox.Observer

	// Logger receives one record per failure (and Debug per message).
	// Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Consumer == "" {
		out.Consumer = out.Queue
	}
	if out.MessageIDFunc == nil {
		out.MessageIDFunc = func(d *amqp.Delivery) (string, error) { return d.MessageId, nil }
	}
	if out.RetryQueue == "" && out.Queue != "" {
		out.RetryQueue = out.Queue + ".retry"
	}
	if out.DeadLetterExchange == "" && out.DeadLetterQueue == "" && out.Queue != "" {
		out.DeadLetterQueue = out.Queue + ".dead-letter"
	}
	adapter.Knobs{
		MaxFailures: &out.MaxFailures, BackoffFunc: &out.BackoffFunc, TransientBackoffFunc: &out.TransientBackoffFunc,
		ProcessTimeout: &out.ProcessTimeout, MaxParked: &out.MaxParked, Logger: &out.Logger,
		Concurrency: &out.Concurrency, ParkTimeout: &out.ParkTimeout,
	}.Defaults(DefaultBackoff)
	if out.Prefetch == 0 {
		out.Prefetch = 2 * out.Concurrency
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Queue == "":
		return configError("Config.Queue", "empty: it is required")
	case c.Concurrency < 1:
		return configError("Config.Concurrency", fmt.Sprintf("must be at least 1, got %d", c.Concurrency))
	case c.Prefetch < 1:
		return configError("Config.Prefetch", fmt.Sprintf("must be at least 1, got %d", c.Prefetch))
	case c.DeadLetterQueue == c.Queue:
		return configError("Config.DeadLetterQueue", fmt.Sprintf("%q is the consumed queue", c.Queue))
	case c.RetryQueue == c.Queue || (c.RetryQueue == c.DeadLetterQueue && c.RetryQueue != ""):
		return configError("Config.RetryQueue", fmt.Sprintf("%q is the consumed or the dead-letter queue", c.RetryQueue))
	}
	return adapter.Check("amqpinbox", c.Consumer, c.MaxFailures)
}

// DefaultBackoff holds a failed delivery 100ms after the first failure,
// doubling each time, at most 5s.
func DefaultBackoff(failures int) time.Duration {
	return adapter.Doubling(100*time.Millisecond, 5*time.Second, uint64(max(failures, 0)))
}

// Subscriber consumes a RabbitMQ queue through an inbox: each delivery is
// processed in one database transaction and acked only after that
// transaction committed.
type Subscriber struct {
	p    inbox.Processor
	conn *amqp.Connection
	h    Handler
	cfg  Config
	log  *slog.Logger
	tag  string
	m    *adapter.Metrics

	mu      sync.Mutex
	started bool
	stopped bool
	ch      *amqp.Channel
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    chan struct{}
	err     error

	pubMu   sync.Mutex       // one publish at a time, so a return is matched to its publish
	pub     *amqp.Channel    // confirm mode; reopened when lost
	returns chan amqp.Return // unroutable publishes (mandatory), of pub

	// quit is closed by the first Stop: in-place retries end, and after the
	// first infrastructure failure seen while stopping the prefetched
	// deliveries are requeued without an attempt (adapter.Engine).
	quit chan struct{}

	park *adapter.Parking[*amqp.Delivery] // early deliveries, by failure key
	// e decides what becomes of each delivery; its poison budget is
	// counted per message ID (failureKey) in memory, never read from a
	// header.
	e *adapter.Engine[*amqp.Delivery]
}

// New returns a subscriber that feeds cfg.Queue's deliveries to h through
// p, on channels of conn. It does nothing until Start.
func New(p inbox.Processor, conn *amqp.Connection, h Handler, cfg *Config) (*Subscriber, error) {
	switch {
	case p == nil:
		return nil, configError("p", "nil inbox.Processor")
	case conn == nil:
		return nil, configError("conn", "nil *amqp.Connection")
	case h == nil:
		return nil, configError("h", "nil Handler")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := adapter.NewMetrics(c.Observer, "amqp", c.Consumer)
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &Subscriber{
		p: p, conn: conn, h: h, cfg: c, m: m,
		log:  c.Logger.With("queue", c.Queue, "consumer", c.Consumer),
		tag:  "idem-" + hex.EncodeToString(b[:]),
		done: make(chan struct{}),
		quit: make(chan struct{}),
		park: adapter.NewParking[*amqp.Delivery](c.MaxParked),
	}
	s.e = &adapter.Engine[*amqp.Delivery]{
		Package: "amqpinbox", Processor: p, Consumer: c.Consumer, Handler: h,
		Broker: broker{s}, Lot: s.park, Metrics: m, Log: s.log,
		MaxFailures: c.MaxFailures, Backoff: c.BackoffFunc, TransientBackoff: c.TransientBackoffFunc,
		ProcessTimeout: c.ProcessTimeout, DeadLetters: true, Quit: s.quit,
	}
	return s, nil
}

// Stats returns a snapshot of the subscriber's counters.
func (s *Subscriber) Stats() inbox.DeliveryStats { return s.m.Stats(s.park.Len()) }

// Start opens a consuming channel (manual acks, QoS Prefetch) and a
// publishing channel (confirm mode), declares the dead-letter queue when
// one is used, and starts Concurrency workers. ctx is only used for
// starting. A Subscriber runs once.
func (s *Subscriber) Start(ctx context.Context) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return ErrStopped
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpinbox: open channel: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ch.Close())
		}
	}()
	if err := s.openPub(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.pub.Close())
		}
	}()
	if s.usesDLQ() {
		if _, err := s.pub.QueueDeclare(s.cfg.DeadLetterQueue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("amqpinbox: declare dead-letter queue %q: %w", s.cfg.DeadLetterQueue, err)
		}
	}
	if s.usesRetryQueue() {
		if _, err := s.pub.QueueDeclare(s.cfg.RetryQueue, true, false, false, false, amqp.Table{
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": s.cfg.Queue,
		}); err != nil {
			return fmt.Errorf("amqpinbox: declare retry queue %q: %w", s.cfg.RetryQueue, err)
		}
	}
	if err := ch.Qos(s.cfg.Prefetch+max(s.cfg.MaxParked, 0), 0, false); err != nil {
		return fmt.Errorf("amqpinbox: qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := ch.Consume(s.cfg.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpinbox: consume %q: %w", s.cfg.Queue, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.started, s.ch, s.cancel = true, ch, cancel
	for range s.cfg.Concurrency {
		s.wg.Add(1)
		go s.work(runCtx, deliveries)
	}
	workersDone, keeperDone := make(chan struct{}), make(chan struct{})
	if s.cfg.MaxParked > 0 {
		s.park.Open()
		go func() {
			// Deliveries parked longer than ParkTimeout go to the back of
			// the queue; on Stop every parked delivery is requeued at once.
			defer close(keeperDone)
			tick := max(min(s.cfg.ParkTimeout/4, time.Second), 10*time.Millisecond)
			s.e.KeepParked(runCtx, s.park, tick, s.cfg.ParkTimeout, nil, workersDone)
		}()
	} else {
		close(keeperDone)
	}
	go func() {
		s.wg.Wait()
		close(workersDone)
		<-keeperDone
		// Deliveries ended: either Stop cancelled the consumer, or the
		// channel died under us, or fail closed it.
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if !stopped {
			err := ErrChannelClosed
			select { // the reason follows the closed deliveries closely
			case e := <-closed:
				if e != nil {
					err = fmt.Errorf("%w: %w", ErrChannelClosed, e)
				}
			case <-time.After(time.Second):
			}
			s.setErr(err)
			s.log.Error("amqpinbox: subscriber ended", "err", s.Err())
		}
		cancel()
		_ = s.ch.Close()
		s.pubMu.Lock()
		_ = s.pub.Close()
		s.pubMu.Unlock()
		close(s.done)
	}()
	return nil
}

func (s *Subscriber) usesRetryQueue() bool { return s.cfg.RetryQueue != "-" }

func (s *Subscriber) usesDLQ() bool {
	return !s.cfg.RejectToQueueDLX && s.cfg.DeadLetterExchange == ""
}

// openPub opens the publishing channel in confirm mode. Called by Start
// and, under pubMu, when the channel was lost.
func (s *Subscriber) openPub() error {
	pub, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpinbox: open publishing channel: %w", err)
	}
	if err := pub.Confirm(false); err != nil {
		return errors.Join(fmt.Errorf("amqpinbox: confirm mode: %w", err), pub.Close())
	}
	s.pub, s.returns = pub, pub.NotifyReturn(make(chan amqp.Return, 1))
	return nil
}

// setErr records the first reason the subscriber ended by itself.
func (s *Subscriber) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// fail ends the subscriber by itself: Err reports err, the consuming
// channel is closed (the broker requeues every unacked delivery), the
// workers exit.
func (s *Subscriber) fail(err error) {
	s.setErr(err)
	s.log.Error("amqpinbox: subscriber failing", "err", err)
	_ = s.ch.Close()
}

// Stop cancels the consumer, lets the workers finish the deliveries already
// prefetched, closes the channels and returns. If ctx ends first, running
// handlers are cancelled (their transactions roll back and the deliveries
// are requeued) and Stop returns ctx's error once the workers have exited.
// Safe to call twice and before Start.
//
// How long it takes (the Stop bound): once Stop is called, no delivery is
// held for an in-place retry any more; the first infrastructure failure
// after that requeues its delivery, and every delivery still prefetched is
// requeued without an attempt. So during a database outage
// Stop(context.Background()) returns after at most about two
// ProcessTimeouts, not when the outage ends. A backoff before a requeue
// (BackoffFunc, an early message's wait) is cut short too. Give ctx a
// deadline for a hard bound.
func (s *Subscriber) Stop(ctx context.Context) error {
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	if first {
		close(s.quit)
	}
	if !started {
		return nil
	}
	if first {
		// The deliveries channel closes once the prefetched deliveries
		// have been handed to the workers.
		_ = s.ch.Cancel(s.tag, false)
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.cancel()
		<-s.done
		return ctx.Err()
	}
}

// Done is closed when the subscriber has ended: after Stop, or when it
// ended by itself (see Err).
func (s *Subscriber) Done() <-chan struct{} { return s.done }

// Err is nil while running and after Stop; ErrChannelClosed (wrapping the
// broker's error) when the subscriber ended by itself: its consuming
// channel or connection was closed, or its publishing channel was lost and
// could not be reopened. Create a new Subscriber, on a new connection if
// needed, to resume.
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscriber) work(ctx context.Context, deliveries <-chan amqp.Delivery) {
	defer s.wg.Done()
	for d := range deliveries {
		_, _ = s.e.Handle(ctx, &d)
	}
}

// broker is the RabbitMQ side of the subscriber's adapter.Engine.
type broker struct{ s *Subscriber }

func (b broker) MessageID(d *amqp.Delivery) (string, error) {
	id, err := b.s.cfg.MessageIDFunc(d)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if errors.Is(err, ErrNoMessageID) {
		return "", inbox.Permanent(err) // no dedup possible: dead-letter it
	}
	return id, err
}

func (broker) Key(d *amqp.Delivery, id string) string { return failureKey(id, d) }

func (broker) Ack(d *amqp.Delivery, _ bool) error { return d.Ack(false) }

// HandBack holds d for after (cut short by Stop), then requeues it: a
// failing message never loops faster than its backoff.
func (b broker) HandBack(ctx context.Context, d *amqp.Delivery, after time.Duration) error {
	if after > 0 {
		adapter.Sleep(ctx, after, b.s.quit)
	}
	return d.Nack(false, true)
}

// Redeliver hands d back to the tail of the queue after delay, through
// RetryQueue (confirmed, then d is acked), so that the worker moves on at
// once. Without a retry queue, or when the copy cannot be published, it
// falls back to HandBack.
func (b broker) Redeliver(ctx context.Context, d *amqp.Delivery, delay time.Duration) error {
	s := b.s
	if !s.usesRetryQueue() {
		return b.HandBack(ctx, d, delay)
	}
	ms := max(delay.Milliseconds(), 0)
	if err := s.publish(ctx, "", s.cfg.RetryQueue, d, nil, strconv.FormatInt(ms, 10)); err != nil {
		s.log.Warn("amqpinbox: could not park the delivery in the retry queue; holding it for its backoff", "message_id", d.MessageId, "err", err)
		return b.HandBack(ctx, d, delay)
	}
	return d.Ack(false)
}

// Wait keeps d unacked with the worker for delay.
func (b broker) Wait(ctx context.Context, _ *amqp.Delivery, delay time.Duration, _ adapter.Failure) bool {
	return adapter.Sleep(ctx, delay, b.s.quit)
}

// DeadLetter publishes d to the dead-letter exchange or queue, confirmed;
// with RejectToQueueDLX there is nothing to publish (Discard rejects it).
func (b broker) DeadLetter(ctx context.Context, d *amqp.Delivery, e adapter.Envelope) error {
	s := b.s
	if s.cfg.RejectToQueueDLX {
		return nil
	}
	exchange, key := s.cfg.DeadLetterExchange, s.cfg.DeadLetterRoutingKey
	if exchange == "" {
		key = s.cfg.DeadLetterQueue
	} else if key == "" {
		key = d.RoutingKey
	}
	return s.publish(ctx, exchange, key, d, amqp.Table{
		FailuresHeader: int32(e.Failures),
		QueueHeader:    s.cfg.Queue,
		ErrorHeader:    e.Reason,
	}, "")
}

// Discard acks d after its copy was confirmed, or rejects it to the
// queue's own dead-letter exchange.
func (b broker) Discard(d *amqp.Delivery, _ string) error {
	if b.s.cfg.RejectToQueueDLX {
		return d.Reject(false)
	}
	return d.Ack(false)
}

// failureKey is what the poison budget of d is counted under: its message
// ID, or, when it has no usable one, its content (a hash of MessageId and
// body), so that a delivery whose ID cannot be read still runs out of
// attempts.
func failureKey(id string, d *amqp.Delivery) string {
	if id != "" {
		return "id:" + id
	}
	h := sha256.New()
	h.Write([]byte(d.MessageId))
	h.Write([]byte{0})
	h.Write(d.Body)
	return "content:" + hex.EncodeToString(h.Sum(nil))
}

// publish sends a copy of d (its headers plus extra; expiration, when set,
// is the per-message TTL in milliseconds) and waits for the broker's
// confirm. A lost
// publishing channel (closed by a channel exception, say) is reopened
// first; if that fails, the subscriber ends (fail) and reports it.
func (s *Subscriber) publish(ctx context.Context, exchange, key string, d *amqp.Delivery, extra amqp.Table, expiration string) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range extra {
		headers[k] = v
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.pub.IsClosed() {
		s.log.Warn("amqpinbox: publishing channel lost; reopening")
		if err := s.openPub(); err != nil {
			err = fmt.Errorf("%w: publishing channel lost and not reopened: %w", ErrChannelClosed, err)
			go s.fail(err)
			return err
		}
	}
	conf, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
		Expiration: expiration,
	})
	if err != nil {
		return fmt.Errorf("amqpinbox: publish to exchange %q key %q: %w", exchange, key, err)
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("amqpinbox: publish to exchange %q key %q: waiting for the confirm: %w", exchange, key, err)
	}
	if !ok {
		if s.pub.IsClosed() {
			return fmt.Errorf("amqpinbox: publish to exchange %q key %q: the channel closed before the confirm", exchange, key)
		}
		return fmt.Errorf("amqpinbox: publish to exchange %q key %q: the broker nacked it", exchange, key)
	}
	// The broker sends basic.return before the confirm, and publishes are
	// serialized: a return for this publish is already in the channel.
	select {
	case r := <-s.returns:
		return fmt.Errorf("amqpinbox: publish to exchange %q key %q unroutable: %s", exchange, key, r.ReplyText)
	default:
		return nil
	}
}

// configError is the *idem.ConfigError of package amqpinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "amqpinbox", Field: field, Reason: reason}
}
