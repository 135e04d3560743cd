package natsinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Processor is what the subscriber needs from the inbox: *inbox.Inbox
// implements it. Declared here so tests (and users) can wrap or fake it.
type Processor interface {
	Process(ctx context.Context, consumer, messageID string, h inbox.Handler) (inbox.Outcome, error)
}

var _ Processor = (*inbox.Inbox)(nil)

// Handler does the business work for one message inside the inbox
// transaction. Everything it writes through tx commits together with the
// dedup row, or not at all. It must not ack the message itself.
type Handler func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error

// Action is what the subscriber did with a delivery.
type Action uint8

const (
	Acked      Action = iota + 1 // processed and committed, then acked
	AckedDup                     // already processed before: handler skipped, acked
	Naked                        // processing failed: negatively acked for a later redelivery
	Terminated                   // poison or no message ID: terminated, never redelivered
)

func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case AckedDup:
		return "acked-duplicate"
	case Naked:
		return "naked"
	case Terminated:
		return "terminated"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// ErrNoMessageID is returned by Handle (and logged) for a message that
// carries no message ID: it cannot be deduplicated, so it is terminated.
var ErrNoMessageID = errors.New("natsinbox: message has no message ID")

// ErrStopped is returned by Start on a subscriber that was already started.
var ErrStopped = errors.New("natsinbox: subscriber already started or stopped")

// Config tunes a Subscriber. The zero value (or nil) works.
type Config struct {
	// Consumer is the inbox consumer name: the scope of the dedup rows.
	// Default: the JetStream consumer's name. Keep it stable across
	// deployments, or every old message becomes new again.
	Consumer string

	// MessageIDFunc extracts the business message ID. Default: the
	// Nats-Msg-Id header (see HeaderID). An empty ID (with a nil error)
	// or ErrNoMessageID terminates the message.
	MessageIDFunc func(msg jetstream.Msg) (string, error)

	// MaxDeliveries terminates a message whose processing failed on its
	// MaxDeliveries-th delivery (TermWithReason). Default: the consumer's
	// MaxDeliver when it is set, else 5.
	MaxDeliveries int

	// BackoffFunc gives the NakWithDelay delay after the numDelivered-th
	// delivery failed. Default: 1s, doubling per delivery, capped at 1m.
	BackoffFunc func(numDelivered uint64) time.Duration

	// Concurrency is the number of messages processed at once. Default 1.
	Concurrency int

	// MessagesOpts are passed to Consumer.Messages (batch size, heartbeat, …).
	MessagesOpts []jetstream.PullMessagesOpt

	// TermWithReason terminates with TermWithReason, so the reason shows in
	// the server's advisory. Only for servers >= 2.10.4: older servers
	// silently ignore it and the message would stay pending until AckWait
	// and be redelivered. Default false: plain Term; the reason is logged.
	TermWithReason bool

	// Logger receives one record per failure (and Debug per message).
	// Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults(cons jetstream.Consumer) Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Consumer == "" {
		if info := cons.CachedInfo(); info != nil {
			out.Consumer = info.Name
		}
	}
	if out.MessageIDFunc == nil {
		out.MessageIDFunc = HeaderID(nats.MsgIdHdr)
	}
	if out.MaxDeliveries == 0 {
		out.MaxDeliveries = 5
		if info := cons.CachedInfo(); info != nil && info.Config.MaxDeliver > 0 {
			out.MaxDeliveries = info.Config.MaxDeliver
		}
	}
	if out.BackoffFunc == nil {
		out.BackoffFunc = DefaultBackoff
	}
	if out.Concurrency == 0 {
		out.Concurrency = 1
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Consumer == "":
		return errors.New("natsinbox: Config.Consumer is empty and the consumer has no name")
	case c.MaxDeliveries < 1:
		return fmt.Errorf("natsinbox: Config.MaxDeliveries must be >= 1, got %d", c.MaxDeliveries)
	case c.Concurrency < 1:
		return fmt.Errorf("natsinbox: Config.Concurrency must be >= 1, got %d", c.Concurrency)
	}
	return adapter.CheckConsumer("natsinbox", c.Consumer)
}

// DefaultBackoff waits 1s after the first failed delivery, doubling each
// time, at most one minute.
func DefaultBackoff(numDelivered uint64) time.Duration {
	return adapter.Doubling(time.Second, time.Minute, numDelivered)
}

// HeaderID returns a MessageIDFunc that reads the named header.
func HeaderID(name string) func(jetstream.Msg) (string, error) {
	return func(msg jetstream.Msg) (string, error) {
		if h := msg.Headers(); h != nil {
			return h.Get(name), nil
		}
		return "", nil
	}
}

// Subscriber consumes a JetStream pull consumer through an inbox: each
// message is processed in one database transaction and acked only after
// that transaction committed.
type Subscriber struct {
	p    Processor
	cons jetstream.Consumer
	h    Handler
	cfg  Config
	log  *slog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	iter    jetstream.MessagesContext
	cancel  context.CancelFunc // cancels handler contexts (hard stop)
	wg      sync.WaitGroup
	done    chan struct{}
}

// New returns a subscriber that feeds cons's messages to h through p.
// It does nothing until Start.
func New(p Processor, cons jetstream.Consumer, h Handler, cfg *Config) (*Subscriber, error) {
	if p == nil || cons == nil || h == nil {
		return nil, errors.New("natsinbox: New needs a Processor, a Consumer and a Handler")
	}
	c := cfg.withDefaults(cons)
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{
		p: p, cons: cons, h: h, cfg: c,
		log:  c.Logger.With("consumer", c.Consumer),
		done: make(chan struct{}),
	}, nil
}

// Start begins pulling messages with Config.Concurrency workers. The
// workers run until Stop; ctx is only used for starting (cancelling it later
// does not stop the subscriber). A Subscriber runs once.
func (s *Subscriber) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return ErrStopped
	}
	iter, err := s.cons.Messages(s.cfg.MessagesOpts...)
	if err != nil {
		return fmt.Errorf("natsinbox: consume: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.started, s.iter, s.cancel = true, iter, cancel
	for range s.cfg.Concurrency {
		s.wg.Add(1)
		go s.work(runCtx)
	}
	go func() { s.wg.Wait(); close(s.done) }()
	return nil
}

// Stop stops pulling, lets the workers finish the messages already
// buffered, and returns when they are done. If ctx ends first, running
// handlers are cancelled (their transactions roll back and the messages are
// naked for an immediate redelivery) and Stop returns ctx's error once the
// workers have exited. Stop is safe to call twice and before Start.
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
		s.iter.Drain()
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.iter.Stop()
		s.cancel()
		<-s.done
		return ctx.Err()
	}
}

func (s *Subscriber) work(ctx context.Context) {
	defer s.wg.Done()
	for {
		msg, err := s.iter.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return
		}
		if err != nil { // heartbeat loss and the like: the iterator keeps trying
			s.log.Warn("natsinbox: next message", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		_, _ = s.Handle(ctx, msg)
	}
}

// Handle processes one delivery through the inbox and acks, naks or
// terminates it; it is what the workers call, exported for callers that
// run their own consume loop (Consumer.Consume, Fetch). The error is the
// reason for a Naked or Terminated action, nil otherwise.
func (s *Subscriber) Handle(ctx context.Context, msg jetstream.Msg) (Action, error) {
	id, err := s.cfg.MessageIDFunc(msg)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if err != nil {
		// No ID, no dedup: processing it could repeat an effect on every
		// redelivery, and redelivering cannot produce an ID. Terminate it
		// (the advisory and this log record are the trail).
		s.log.Error("natsinbox: message without usable ID terminated", "subject", msg.Subject(), "err", err)
		s.settle(msg, "term", s.term(msg, "idem: no message id"))
		return Terminated, err
	}
	out, err := s.p.Process(ctx, s.cfg.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
		return s.h(ctx, tx, msg)
	})
	if err == nil {
		// The transaction has committed: only now may the broker forget the
		// message. If this ack is lost, the redelivery is a Duplicate.
		s.settle(msg, "ack", msg.Ack())
		if out == inbox.Duplicate {
			s.log.Debug("natsinbox: duplicate acked", "id", id)
			return AckedDup, nil
		}
		s.log.Debug("natsinbox: processed", "id", id)
		return Acked, nil
	}
	if ctx.Err() != nil {
		// We are stopping: not the message's fault. Hand it back now.
		s.settle(msg, "nak", msg.Nak())
		return Naked, err
	}
	var delivered uint64 = 1
	if md, mdErr := msg.Metadata(); mdErr == nil {
		delivered = md.NumDelivered
	}
	if delivered >= uint64(s.cfg.MaxDeliveries) {
		s.log.Error("natsinbox: poison message terminated", "id", id, "deliveries", delivered, "err", err)
		s.settle(msg, "term", s.term(msg, "idem: failed "+strconv.FormatUint(delivered, 10)+" deliveries: "+err.Error()))
		return Terminated, err
	}
	delay := s.cfg.BackoffFunc(delivered)
	s.log.Warn("natsinbox: processing failed, redelivery scheduled", "id", id, "deliveries", delivered, "delay", delay, "err", err)
	s.settle(msg, "nak", msg.NakWithDelay(delay))
	return Naked, err
}

func (s *Subscriber) term(msg jetstream.Msg, reason string) error {
	if s.cfg.TermWithReason {
		return msg.TermWithReason(adapter.Truncate(reason, 256))
	}
	return msg.Term()
}

func (s *Subscriber) settle(msg jetstream.Msg, what string, err error) {
	if err != nil {
		s.log.Warn("natsinbox: "+what+" failed; the message will be redelivered", "subject", msg.Subject(), "err", err)
	}
}
