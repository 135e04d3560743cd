package amqpinbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Processor is what the subscriber needs from the inbox: *inbox.Inbox
// implements it. Declared here so tests (and users) can wrap or fake it.
type Processor interface {
	Process(ctx context.Context, consumer, messageID string, h inbox.Handler) (inbox.Outcome, error)
}

var _ Processor = (*inbox.Inbox)(nil)

// Handler does the business work for one delivery inside the inbox
// transaction. It must not ack the delivery itself.
type Handler func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error

// DeliveriesHeader is the header in which the subscriber counts failed
// deliveries of a message it has requeued by republishing.
const DeliveriesHeader = "x-idem-deliveries"

// ErrorHeader carries the last processing error on a dead-lettered copy.
const ErrorHeader = "x-idem-error"

// Action is what the subscriber did with a delivery.
type Action uint8

const (
	Acked        Action = iota + 1 // processed and committed, then acked
	AckedDup                       // already processed before: handler skipped, acked
	Retried                        // failed: a copy with the failure count was queued again, the original acked
	Requeued                       // failed and could not be republished, or we are stopping: nack(requeue)
	DeadLettered                   // poison or no message ID: sent to the dead-letter exchange (or rejected)
)

func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case AckedDup:
		return "acked-duplicate"
	case Retried:
		return "retried"
	case Requeued:
		return "requeued"
	case DeadLettered:
		return "dead-lettered"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

var (
	// ErrNoMessageID: the delivery carries no message ID, so it cannot be
	// deduplicated; it is dead-lettered.
	ErrNoMessageID = errors.New("amqpinbox: delivery has no message ID")
	// ErrStopped is returned by Start on a subscriber already started or stopped.
	ErrStopped = errors.New("amqpinbox: subscriber already started or stopped")
	// ErrChannelClosed is Err's value when the broker or the connection
	// closed the channel under a running subscriber.
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
	// MessageId property. An empty ID or ErrNoMessageID dead-letters it.
	MessageIDFunc func(d *amqp.Delivery) (string, error)

	// MaxDeliveries dead-letters a message whose processing failed this
	// many times. Default 5.
	MaxDeliveries int

	// BackoffFunc is how long a failed delivery is held before it is queued
	// again (the worker waits; RabbitMQ has no delayed requeue). Default:
	// 100ms doubling per failure, at most 5s.
	BackoffFunc func(failures int) time.Duration

	// DeadLetterExchange receives poison messages (with ErrorHeader and
	// DeliveriesHeader) under DeadLetterRoutingKey (default: the original
	// routing key), published with confirms before the original is acked.
	// Empty: the delivery is rejected without requeue, so the queue's own
	// x-dead-letter-exchange (if any) receives it; without one the broker
	// drops it.
	DeadLetterExchange   string
	DeadLetterRoutingKey string

	// Concurrency is the number of deliveries processed at once. Default 1.
	Concurrency int

	// Prefetch is the channel's QoS prefetch count. Default 2×Concurrency.
	Prefetch int

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
	if out.MaxDeliveries == 0 {
		out.MaxDeliveries = 5
	}
	if out.BackoffFunc == nil {
		out.BackoffFunc = DefaultBackoff
	}
	if out.Concurrency == 0 {
		out.Concurrency = 1
	}
	if out.Prefetch == 0 {
		out.Prefetch = 2 * out.Concurrency
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Queue == "":
		return errors.New("amqpinbox: Config.Queue is required")
	case c.MaxDeliveries < 1:
		return fmt.Errorf("amqpinbox: Config.MaxDeliveries must be >= 1, got %d", c.MaxDeliveries)
	case c.Concurrency < 1:
		return fmt.Errorf("amqpinbox: Config.Concurrency must be >= 1, got %d", c.Concurrency)
	case c.Prefetch < 1:
		return fmt.Errorf("amqpinbox: Config.Prefetch must be >= 1, got %d", c.Prefetch)
	}
	return adapter.CheckConsumer("amqpinbox", c.Consumer)
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
	p    Processor
	conn *amqp.Connection
	h    Handler
	cfg  Config
	log  *slog.Logger
	tag  string

	mu      sync.Mutex
	started bool
	stopped bool
	ch, pub *amqp.Channel
	pubMu   sync.Mutex       // one publish at a time, so a return is matched to its publish
	returns chan amqp.Return // unroutable publishes (mandatory)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    chan struct{}
	err     error
}

// New returns a subscriber that feeds cfg.Queue's deliveries to h through
// p, on channels of conn. It does nothing until Start.
func New(p Processor, conn *amqp.Connection, h Handler, cfg *Config) (*Subscriber, error) {
	if p == nil || conn == nil || h == nil {
		return nil, errors.New("amqpinbox: New needs a Processor, a Connection and a Handler")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Subscriber{
		p: p, conn: conn, h: h, cfg: c,
		log:  c.Logger.With("queue", c.Queue, "consumer", c.Consumer),
		tag:  "idem-" + hex.EncodeToString(b[:]),
		done: make(chan struct{}),
	}, nil
}

// Start opens a consuming channel (manual acks, QoS Prefetch) and a
// publishing channel (confirm mode) and starts Concurrency workers. ctx is
// only used for starting. A Subscriber runs once.
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
	pub, err := s.conn.Channel()
	if err != nil {
		return errors.Join(fmt.Errorf("amqpinbox: open channel: %w", err), ch.Close())
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ch.Close(), pub.Close())
		}
	}()
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("amqpinbox: confirm mode: %w", err)
	}
	s.returns = pub.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpinbox: qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := ch.Consume(s.cfg.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpinbox: consume %q: %w", s.cfg.Queue, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.started, s.ch, s.pub, s.cancel = true, ch, pub, cancel
	for range s.cfg.Concurrency {
		s.wg.Add(1)
		go s.work(runCtx, deliveries)
	}
	go func() {
		s.wg.Wait()
		// Deliveries ended: either Stop cancelled the consumer or the
		// channel died under us.
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
			s.log.Error("amqpinbox: subscriber ended", "err", err)
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
		cancel()
		_ = s.ch.Close()
		_ = s.pub.Close()
		close(s.done)
	}()
	return nil
}

// Stop cancels the consumer, lets the workers finish the deliveries already
// prefetched, closes the channels and returns. If ctx ends first, running
// handlers are cancelled (their transactions roll back and the deliveries
// are requeued) and Stop returns ctx's error once the workers have exited.
// Safe to call twice and before Start.
func (s *Subscriber) Stop(ctx context.Context) error {
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	started := s.started
	s.mu.Unlock()
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

// Done is closed when the subscriber has ended: after Stop, or when its
// channel was closed by the broker or the connection (see Err).
func (s *Subscriber) Done() <-chan struct{} { return s.done }

// Err is nil while running and after Stop; ErrChannelClosed (wrapping the
// broker's error) when the subscriber ended by itself. Create a new
// Subscriber, on a new connection if needed, to resume.
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscriber) work(ctx context.Context, deliveries <-chan amqp.Delivery) {
	defer s.wg.Done()
	for d := range deliveries {
		_, _ = s.handle(ctx, &d)
	}
}

func (s *Subscriber) handle(ctx context.Context, d *amqp.Delivery) (Action, error) {
	id, err := s.cfg.MessageIDFunc(d)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if err != nil {
		// No ID, no dedup: processing could repeat an effect on every
		// redelivery, and redelivering cannot produce an ID.
		s.log.Error("amqpinbox: delivery without usable ID dead-lettered", "routing_key", d.RoutingKey, "err", err)
		return s.deadLetter(ctx, d, 0, err)
	}
	out, err := s.p.Process(ctx, s.cfg.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
		return s.h(ctx, tx, d)
	})
	if err == nil {
		// Committed: only now may the broker forget the message. If this
		// ack is lost, the redelivery is a Duplicate.
		s.settle("ack", d.Ack(false))
		if out == inbox.Duplicate {
			s.log.Debug("amqpinbox: duplicate acked", "id", id)
			return AckedDup, nil
		}
		s.log.Debug("amqpinbox: processed", "id", id)
		return Acked, nil
	}
	if ctx.Err() != nil { // stopping: not the message's fault
		s.settle("nack", d.Nack(false, true))
		return Requeued, err
	}
	failures := failureCount(d) + 1
	if failures >= s.cfg.MaxDeliveries {
		s.log.Error("amqpinbox: poison message dead-lettered", "id", id, "failures", failures, "err", err)
		return s.deadLetter(ctx, d, failures, err)
	}
	delay := s.cfg.BackoffFunc(failures)
	s.log.Warn("amqpinbox: processing failed, retry queued", "id", id, "failures", failures, "delay", delay, "err", err)
	t := time.NewTimer(delay)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		s.settle("nack", d.Nack(false, true))
		return Requeued, err
	}
	// Queue a copy that carries the failure count, then drop the original.
	// A crash in between leaves two copies with one message ID: the inbox
	// turns the second into a Duplicate.
	if perr := s.publish(ctx, "", s.cfg.Queue, d, failures, nil); perr != nil {
		s.log.Warn("amqpinbox: republish failed; requeueing without a count", "id", id, "err", perr)
		s.settle("nack", d.Nack(false, true))
		return Requeued, err
	}
	s.settle("ack", d.Ack(false))
	return Retried, err
}

// deadLetter moves d to the configured dead-letter exchange (confirmed
// before the original is acked), or rejects it for the queue's own DLX.
func (s *Subscriber) deadLetter(ctx context.Context, d *amqp.Delivery, failures int, cause error) (Action, error) {
	if s.cfg.DeadLetterExchange == "" {
		s.settle("reject", d.Reject(false))
		return DeadLettered, cause
	}
	key := s.cfg.DeadLetterRoutingKey
	if key == "" {
		key = d.RoutingKey
	}
	if err := s.publish(ctx, s.cfg.DeadLetterExchange, key, d, failures, cause); err != nil {
		s.log.Error("amqpinbox: dead-letter publish failed; requeueing", "err", err)
		s.settle("nack", d.Nack(false, true))
		return Requeued, errors.Join(cause, err)
	}
	s.settle("ack", d.Ack(false))
	return DeadLettered, cause
}

// publish sends a copy of d and waits for the broker's confirm.
func (s *Subscriber) publish(ctx context.Context, exchange, key string, d *amqp.Delivery, failures int, cause error) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers[DeliveriesHeader] = int32(failures)
	if cause != nil {
		headers[ErrorHeader] = adapter.Truncate(cause.Error(), 1024)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	conf, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("amqpinbox: broker nacked the publish")
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

// failureCount reads the failure count this package maintains in
// DeliveriesHeader (0 when absent).
func failureCount(d *amqp.Delivery) int {
	switch v := d.Headers[DeliveriesHeader].(type) {
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case int:
		return v
	}
	return 0
}

func (s *Subscriber) settle(what string, err error) {
	if err != nil {
		s.log.Warn("amqpinbox: "+what+" failed; the broker will redeliver", "err", err)
	}
}
