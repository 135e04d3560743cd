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
	"sync/atomic"
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

// Action is what the subscriber did with a delivery.
type Action uint8

const (
	Acked        Action = iota + 1 // processed and committed, then acked
	AckedDup                       // already processed before: handler skipped, acked
	Requeued                       // failed or came early: a copy queued at the back after the backoff (RetryQueue); or we are stopping: nack with requeue
	DeadLettered                   // poison or no message ID: published to the dead-letter exchange or queue, then acked (or rejected to the queue's own DLX)
	Parked                         // came early (inbox.ErrNotYet): kept aside, unacked, until another message is applied
)

func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case AckedDup:
		return "acked-duplicate"
	case Requeued:
		return "requeued"
	case DeadLettered:
		return "dead-lettered"
	case Parked:
		return "parked"
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

	// MaxDeliveries dead-letters a message whose processing failed this
	// many times with an ordinary error. Infrastructure failures
	// (inbox.IsTransient) are retried in place and do not count. The count
	// is kept in this subscriber's memory (never read from a header): a
	// restart starts it again. Default 5.
	MaxDeliveries int

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
	if out.MaxDeliveries == 0 {
		out.MaxDeliveries = 5
	}
	if out.BackoffFunc == nil {
		out.BackoffFunc = DefaultBackoff
	}
	if out.TransientBackoffFunc == nil {
		out.TransientBackoffFunc = adapter.TransientBackoff
	}
	if out.ProcessTimeout == 0 {
		out.ProcessTimeout = 30 * time.Second
	}
	if out.RetryQueue == "" && out.Queue != "" {
		out.RetryQueue = out.Queue + ".retry"
	}
	if out.DeadLetterExchange == "" && out.DeadLetterQueue == "" && out.Queue != "" {
		out.DeadLetterQueue = out.Queue + ".dead-letter"
	}
	if out.Concurrency == 0 {
		out.Concurrency = 1
	}
	if out.Prefetch == 0 {
		out.Prefetch = 2 * out.Concurrency
	}
	if out.MaxParked == 0 {
		out.MaxParked = 100
	}
	if out.ParkTimeout <= 0 {
		out.ParkTimeout = 30 * time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Queue == "":
		return configError("Config.Queue", "empty: it is required")
	case c.MaxDeliveries < 1:
		return configError("Config.MaxDeliveries", fmt.Sprintf("must be at least 1, got %d", c.MaxDeliveries))
	case c.Concurrency < 1:
		return configError("Config.Concurrency", fmt.Sprintf("must be at least 1, got %d", c.Concurrency))
	case c.Prefetch < 1:
		return configError("Config.Prefetch", fmt.Sprintf("must be at least 1, got %d", c.Prefetch))
	case c.DeadLetterQueue == c.Queue:
		return configError("Config.DeadLetterQueue", fmt.Sprintf("%q is the consumed queue", c.Queue))
	case c.RetryQueue == c.Queue || (c.RetryQueue == c.DeadLetterQueue && c.RetryQueue != ""):
		return configError("Config.RetryQueue", fmt.Sprintf("%q is the consumed or the dead-letter queue", c.RetryQueue))
	}
	return adapter.CheckConsumer("amqpinbox", c.Consumer)
}

// DefaultBackoff holds a failed delivery 100ms after the first failure,
// doubling each time, at most 5s.
func DefaultBackoff(failures int) time.Duration {
	return adapter.Doubling(100*time.Millisecond, 5*time.Second, uint64(max(failures, 0)))
}

// Stats are a subscriber's counters since New.
type Stats struct {
	Processed    uint64 // handler ran and committed; acked
	Duplicates   uint64 // processed before; acked without running the handler
	Retried      uint64 // attempts that failed and will be tried again (in place or requeued)
	DeadLettered uint64 // poison published to the dead-letter exchange or queue (or rejected to the queue's DLX)
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
	// first infrastructure failure seen while stopping (down is set) the
	// prefetched deliveries are requeued without an attempt.
	quit chan struct{}
	down atomic.Bool

	park  *adapter.Parking[*amqp.Delivery] // early deliveries, by failure key
	fails *adapter.FailureCounts           // message ID → ordinary failures seen here: the poison budget
	early *adapter.FailureCounts           // message ID → times it came too early (inbox.ErrNotYet): its backoff
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
	return &Subscriber{
		p: p, conn: conn, h: h, cfg: c, m: m,
		log:   c.Logger.With("queue", c.Queue, "consumer", c.Consumer),
		tag:   "idem-" + hex.EncodeToString(b[:]),
		done:  make(chan struct{}),
		quit:  make(chan struct{}),
		park:  adapter.NewParking[*amqp.Delivery](c.MaxParked),
		fails: adapter.NewFailureCounts(),
		early: adapter.NewFailureCounts(),
	}, nil
}

// Stats returns a snapshot of the subscriber's counters.
func (s *Subscriber) Stats() Stats {
	return Stats{
		Processed:    s.m.Load(inbox.DeliveryProcessed),
		Duplicates:   s.m.Load(inbox.DeliveryDuplicate),
		Retried:      s.m.Load(inbox.DeliveryRetried),
		DeadLettered: s.m.Load(inbox.DeliveryDeadLettered),
	}
}

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
		go s.keepParked(runCtx, workersDone, keeperDone)
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
		_, _ = s.handle(ctx, &d)
	}
}

func (s *Subscriber) handle(ctx context.Context, d *amqp.Delivery) (Action, error) {
	act, err := s.handleOnce(ctx, d)
	if act == Acked {
		// Applied: a parked delivery may have been waiting for this one.
		s.park.Applied(func(p adapter.Parked[*amqp.Delivery]) bool {
			act, _ := s.handleOnce(ctx, p.Msg)
			return act == Acked
		})
	}
	return act, err
}

func (s *Subscriber) handleOnce(ctx context.Context, d *amqp.Delivery) (Action, error) {
	if s.down.Load() {
		// Stopping during an outage: an attempt would only wait for the
		// database. Hand the delivery back at once.
		s.settle("nack", d.Nack(false, true))
		return Requeued, errStopping
	}
	parking := s.cfg.MaxParked > 0 && !s.stopping()
	rerun := 0
	for outage := 1; ; outage++ {
		gen := s.park.Gen()
		actx, cancel := adapter.AttemptContext(ctx, s.cfg.ProcessTimeout)
		if parking {
			actx = inbox.WithoutEarlyWait(actx) // parked instead, below
		}
		id, out, err := s.attempt(actx, d)
		verdict := adapter.Classify(actx, err)
		cancel()
		key := failureKey(id, d)
		if err == nil {
			// Committed: only now may the broker forget the message. If this
			// ack is lost, the redelivery is a Duplicate.
			s.settle("ack", d.Ack(false))
			s.fails.Forget(key)
			s.early.Forget(key)
			s.park.Forget(key)
			if out == inbox.Duplicate {
				s.m.Inc(inbox.DeliveryDuplicate)
				s.log.Debug("amqpinbox: duplicate acked", "id", id)
				return AckedDup, nil
			}
			s.m.Inc(inbox.DeliveryProcessed)
			s.log.Debug("amqpinbox: processed", "id", id)
			return Acked, nil
		}
		if ctx.Err() != nil { // stopping: not the message's fault
			s.settle("nack", d.Nack(false, true))
			return Requeued, err
		}
		switch {
		case verdict == adapter.Transient:
			// Keep the delivery (unacked) and try again when the
			// infrastructure is back; the poison budget is not touched.
			s.m.Inc(inbox.DeliveryRetried)
			if s.stopping() {
				s.down.Store(true)
				s.log.Warn("amqpinbox: infrastructure failure while stopping: requeued", "id", id, "err", err)
				s.settle("nack", d.Nack(false, true))
				return Requeued, err
			}
			delay := s.cfg.TransientBackoffFunc(outage)
			s.log.Warn("amqpinbox: infrastructure failure, retrying in place", "id", id, "attempt", outage, "delay", delay, "err", err)
			if !adapter.Sleep(ctx, delay, s.quit) {
				s.settle("nack", d.Nack(false, true))
				return Requeued, err
			}
			continue
		case verdict == adapter.NotYet:
			// Its predecessor has not been applied yet and may be behind it
			// in the queue. A requeue would put it back at the head, in
			// front of its predecessor again: a copy goes to the back of
			// the queue after the delay instead (retryLater). Not counted
			// as a failure.
			s.m.Inc(inbox.DeliveryRetried)
			if parking {
				if s.park.Gen() != gen && rerun < 3 {
					rerun++ // another message was applied meanwhile: at once again
					outage--
					continue
				}
				if s.park.Park(key, d) {
					s.log.Debug("amqpinbox: message came early, parked", "id", id, "err", err)
					return Parked, err
				}
			}
			s.park.Forget(key)
			delay := s.cfg.TransientBackoffFunc(s.early.Add(key))
			s.log.Info("amqpinbox: message came early, queued again at the back", "id", id, "delay", delay, "err", err)
			return s.retryLater(ctx, d, delay, err)
		case verdict == adapter.Permanent || errors.Is(err, ErrNoMessageID):
			s.log.Error("amqpinbox: message dead-lettered without retry", "id", id, "err", err)
			return s.deadLetter(ctx, d, key, s.fails.Add(key), err)
		}
		failures := s.fails.Add(key)
		if failures >= s.cfg.MaxDeliveries {
			s.log.Error("amqpinbox: poison message dead-lettered", "id", id, "failures", failures, "err", err)
			return s.deadLetter(ctx, d, key, failures, err)
		}
		s.m.Inc(inbox.DeliveryRetried)
		delay := s.cfg.BackoffFunc(failures)
		s.log.Warn("amqpinbox: processing failed, redelivery after backoff", "id", id, "failures", failures, "delay", delay, "err", err)
		return s.retryLater(ctx, d, delay, err)
	}
}

// keepParked sends the deliveries parked longer than ParkTimeout to the
// back of the queue (after their early backoff); on Stop it requeues every
// parked delivery at once.
func (s *Subscriber) keepParked(ctx context.Context, workersDone <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(max(min(s.cfg.ParkTimeout/4, time.Second), 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.quit:
		case <-workersDone:
		case <-ctx.Done():
		case <-t.C:
			for _, p := range s.park.Sweep(time.Now().Add(-s.cfg.ParkTimeout), func(*amqp.Delivery) {}) {
				delay := s.cfg.TransientBackoffFunc(s.early.Add(p.Key))
				s.log.Info("amqpinbox: parked delivery still early, queued again at the back", "message_id", p.Msg.MessageId, "parked", time.Since(p.Since), "delay", delay)
				_, _ = s.retryLater(ctx, p.Msg, delay, nil)
			}
			continue
		}
		for _, p := range s.park.Close() {
			s.settle("nack", p.Msg.Nack(false, true))
		}
		return
	}
}

// errStopping is the reason for a delivery requeued unattempted.
var errStopping = errors.New("amqpinbox: stopping during an infrastructure failure; delivery requeued without an attempt")

func (s *Subscriber) stopping() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
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

// attempt extracts the ID and runs the delivery through the inbox once.
func (s *Subscriber) attempt(ctx context.Context, d *amqp.Delivery) (string, inbox.Outcome, error) {
	id, err := s.cfg.MessageIDFunc(d)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if err != nil {
		// No usable ID, no dedup: never fall back to another key.
		return "", 0, fmt.Errorf("amqpinbox: message ID: %w", err)
	}
	out, err := s.p.Process(ctx, s.cfg.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
		return adapter.CallHandler("amqpinbox", func() error { return s.h(ctx, tx, d) })
	})
	return id, out, err
}

// retryLater hands d back to the tail of the queue after delay, through
// RetryQueue (confirmed, then d is acked), so that the worker moves on at
// once. Without a retry queue, or when the copy cannot be published, it
// falls back to requeueAfter.
func (s *Subscriber) retryLater(ctx context.Context, d *amqp.Delivery, delay time.Duration, cause error) (Action, error) {
	if !s.usesRetryQueue() {
		return s.requeueAfter(ctx, d, delay, cause)
	}
	ms := max(delay.Milliseconds(), 0)
	if err := s.publish(ctx, "", s.cfg.RetryQueue, d, nil, strconv.FormatInt(ms, 10)); err != nil {
		s.log.Warn("amqpinbox: could not park the delivery in the retry queue; holding it for its backoff", "message_id", d.MessageId, "err", err)
		return s.requeueAfter(ctx, d, delay, cause)
	}
	s.settle("ack", d.Ack(false))
	return Requeued, cause
}

// requeueAfter holds d for delay (cut short by Stop), then hands it back to
// the broker: a failing message never loops faster than its backoff.
func (s *Subscriber) requeueAfter(ctx context.Context, d *amqp.Delivery, delay time.Duration, cause error) (Action, error) {
	adapter.Sleep(ctx, delay, s.quit)
	s.settle("nack", d.Nack(false, true))
	return Requeued, cause
}

// deadLetter moves d to the dead-letter exchange or queue (confirmed
// before the original is acked), or rejects it to the queue's own DLX.
// When the publish fails, d is requeued after the backoff: never dropped.
func (s *Subscriber) deadLetter(ctx context.Context, d *amqp.Delivery, fkey string, failures int, cause error) (Action, error) {
	if s.cfg.RejectToQueueDLX {
		s.settle("reject", d.Reject(false))
		s.fails.Forget(fkey)
		s.m.Inc(inbox.DeliveryDeadLettered)
		return DeadLettered, cause
	}
	exchange, key := s.cfg.DeadLetterExchange, s.cfg.DeadLetterRoutingKey
	if exchange == "" {
		key = s.cfg.DeadLetterQueue
	} else if key == "" {
		key = d.RoutingKey
	}
	if err := s.publish(ctx, exchange, key, d, amqp.Table{
		FailuresHeader: int32(failures),
		QueueHeader:    s.cfg.Queue,
		ErrorHeader:    adapter.Truncate(cause.Error(), adapter.MaxErrorBytes),
	}, ""); err != nil {
		s.m.Inc(inbox.DeliveryRetried)
		delay := s.cfg.BackoffFunc(max(failures, 1))
		s.log.Error("amqpinbox: dead-letter publish failed; requeue after backoff", "message_id", d.MessageId, "delay", delay, "err", err)
		return s.requeueAfter(ctx, d, delay, errors.Join(cause, err))
	}
	s.settle("ack", d.Ack(false))
	s.fails.Forget(fkey)
	s.early.Forget(fkey)
	s.m.Inc(inbox.DeliveryDeadLettered)
	return DeadLettered, cause
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

func (s *Subscriber) settle(what string, err error) {
	if err != nil {
		s.log.Warn("amqpinbox: "+what+" failed; the broker will redeliver", "err", err)
	}
}

// configError is the *idem.ConfigError of package amqpinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "amqpinbox", Field: field, Reason: reason}
}
