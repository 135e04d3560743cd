package natsinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Handler does the business work for one message inside the inbox
// transaction. Everything it writes through tx commits together with the
// dedup row, or not at all. It must not ack the message itself.
type Handler func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error

// Action is what the subscriber did with a delivery.
type Action uint8

const (
	Acked        Action = iota + 1 // processed and committed, then acked
	AckedDup                       // already processed before: handler skipped, acked
	Nacked                         // failed: negatively acked (Nak) for a later redelivery, or we are stopping
	DeadLettered                   // poison: its copy stored in the dead-letter subject's stream, then terminated
	Parked                         // came early (inbox.ErrNotYet): kept aside, in progress, until another message is applied
)

func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case AckedDup:
		return "acked-duplicate"
	case Nacked:
		return "nacked"
	case DeadLettered:
		return "dead-lettered"
	case Parked:
		return "parked"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Headers of a dead-lettered copy (see the package doc, "Dead letters").
// The original's own headers are kept, except that a publish-control
// header (any name starting with "Nats-") travels as OriginalHeaderPrefix
// + the rest of its name: Nats-Msg-Id becomes Idem-Original-Msg-Id,
// Nats-Rollup Idem-Original-Rollup. (The new name must not contain
// "Nats-Msg-Id": some servers read the first occurrence of that text as
// the header.)
const (
	ErrorHeader      = adapter.ErrorHeader    // "Idem-Error": the last processing error, at most 1 KiB
	FailuresHeader   = adapter.FailuresHeader // "Idem-Failures": attempts that failed with an ordinary error
	StreamHeader     = "Idem-Stream"          // the original's stream
	ConsumerHeader   = "Idem-Consumer"        // the JetStream consumer that gave up
	SequenceHeader   = "Idem-Stream-Sequence" // the original's stream sequence
	SubjectHeader    = "Idem-Subject"         // the original's subject
	DeliveriesHeader = "Idem-Deliveries"      // how often the server delivered it (NumDelivered)
	TimestampHeader  = "Idem-Timestamp"       // when it was stored, RFC 3339 with nanoseconds

	// OriginalHeaderPrefix prefixes the original's publish-control headers.
	OriginalHeaderPrefix = "Idem-Original-"
)

// DeadLetterID is the Nats-Msg-Id of the dead-lettered copy of the message
// at sequence seq of stream, given up by the JetStream consumer consumer:
// "idem-dl/<stream>/<consumer>/<seq>". The dead-letter stream's duplicate
// window drops a second copy of the same message from the same consumer
// (after a lost Term), and keeps the copies of two consumers apart.
func DeadLetterID(stream, consumer string, seq uint64) string {
	return "idem-dl/" + stream + "/" + consumer + "/" + strconv.FormatUint(seq, 10)
}

// ErrNoMessageID is returned by Handle (and logged) for a message that
// carries no message ID: it cannot be deduplicated, so it is dead-lettered.
var ErrNoMessageID = errors.New("natsinbox: message has no message ID")

// ErrStopped is returned by Start on a subscriber that was already started.
var ErrStopped = errors.New("natsinbox: subscriber already started or stopped")

// Config tunes a Subscriber. The zero value (or nil) works; set
// DeadLetterSubject and JetStream so that poison has somewhere to go.
type Config struct {
	// Consumer is the inbox consumer name: the scope of the dedup rows.
	// Default: "<stream>/<consumer>", the stream and the JetStream
	// consumer's name (a durable name is unique only within its stream).
	// Keep it stable across deployments, or every old message becomes new
	// again.
	Consumer string

	// MessageIDFunc extracts the business message ID. Default: the
	// Nats-Msg-Id header (see HeaderID). An empty ID (with a nil error) or
	// ErrNoMessageID dead-letters the message; any other error is a failed
	// attempt, judged like a handler's (see inbox.Permanent): it is never
	// replaced by another dedup key.
	MessageIDFunc func(msg jetstream.Msg) (string, error)

	// MaxDeliveries dead-letters a message after this many attempts failed
	// with an ordinary error. Infrastructure failures (inbox.IsTransient)
	// are retried in place and do not count, and neither do redeliveries
	// after AckWait ran out: the count is kept in the subscriber's memory
	// per stream sequence, not taken from NumDelivered (a restart starts it
	// again). Keep the consumer's own MaxDeliver unlimited (-1), or the
	// server gives up first, silently. Default: the consumer's MaxDeliver
	// when it is set, else 5.
	MaxDeliveries int

	// BackoffFunc gives the NakWithDelay delay after the failures-th failed
	// attempt. Default DefaultBackoff: 1s, doubling per failure, capped at 1m.
	BackoffFunc func(failures int) time.Duration

	// TransientBackoffFunc gives the wait before the attempt-th in-place
	// retry of an infrastructure failure. Default: 100ms doubling, at most
	// 5s. While it waits the subscriber keeps the message (InProgress), so
	// the server does not redeliver it.
	TransientBackoffFunc func(attempt int) time.Duration

	// ProcessTimeout bounds one attempt (MessageIDFunc, Process and the
	// handler); its expiry counts as an infrastructure failure, so a
	// black-holed database connection cannot hold a worker forever.
	// Default 30s; negative: no bound.
	ProcessTimeout time.Duration

	// DeadLetterSubject receives poison messages, published through
	// JetStream in the envelope of the package doc ("Dead letters"): the
	// original's data and headers (publish-control headers renamed), the
	// Idem-* headers, and Nats-Msg-Id DeadLetterID. A stream must capture
	// the subject; the original is terminated only once the copy is known
	// to be stored. Empty: a poison message is not terminated but naked
	// with BackoffFunc's delay again and again, logged at Error: never
	// dropped, never a hot loop.
	DeadLetterSubject string

	// JetStream publishes the dead letters. Required with DeadLetterSubject.
	JetStream jetstream.JetStream

	// MaxParked is how many early messages (inbox.ErrNotYet, such as
	// watermark.ErrGap in Strict mode) the subscriber keeps aside at once:
	// a parked message stays unacked (reported InProgress) and runs again
	// as soon as another message was applied, so that a gap fills in one
	// pass. Beyond it, and for messages parked longer than ParkTimeout, an
	// early message is naked with TransientBackoffFunc's delay. Default
	// 100; negative: park nothing. Parked messages count against the
	// consumer's MaxAckPending.
	MaxParked int

	// ParkTimeout is how long a message stays parked. Default 30s.
	ParkTimeout time.Duration

	// Concurrency is the number of messages processed at once. Default 1.
	Concurrency int

	// MessagesOpts are passed to Consumer.Messages (batch size, heartbeat, …).
	MessagesOpts []jetstream.PullMessagesOpt

	// TermWithReason terminates with TermWithReason, so the reason shows in
	// the server's advisory. Only for servers >= 2.10.4: older servers
	// silently ignore it and the message would stay pending until AckWait
	// and be redelivered. Default false: plain Term; the reason is in the
	// dead letter's ErrorHeader.
	TermWithReason bool

	// Observer, when set, is told every delivery's outcome (Adapter
	// "nats"); promidem.NewInboxObserver counts them as
	// idem_inbox_messages_total. Stats counts them either way.
	Observer inbox.Observer

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
		if info := cons.CachedInfo(); info != nil && info.Name != "" {
			out.Consumer = info.Stream + "/" + info.Name
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
	if out.TransientBackoffFunc == nil {
		out.TransientBackoffFunc = adapter.TransientBackoff
	}
	if out.ProcessTimeout == 0 {
		out.ProcessTimeout = 30 * time.Second
	}
	if out.Concurrency == 0 {
		out.Concurrency = 1
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
	case c.Consumer == "":
		return configError("Config.Consumer", "empty, and the consumer has no name")
	case c.MaxDeliveries < 1:
		return configError("Config.MaxDeliveries", fmt.Sprintf("must be at least 1, got %d", c.MaxDeliveries))
	case c.Concurrency < 1:
		return configError("Config.Concurrency", fmt.Sprintf("must be at least 1, got %d", c.Concurrency))
	case c.DeadLetterSubject != "" && c.JetStream == nil:
		return configError("Config.DeadLetterSubject", "needs Config.JetStream to publish with")
	}
	return adapter.CheckConsumer("natsinbox", c.Consumer)
}

// DefaultBackoff is the redelivery delay after the failures-th failed
// attempt: 1s, doubling each time, at most one minute.
func DefaultBackoff(failures int) time.Duration {
	return adapter.Doubling(time.Second, time.Minute, uint64(max(failures, 0)))
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

// Stats are a subscriber's counters since New.
type Stats struct {
	Processed    uint64 // handler ran and committed; acked
	Duplicates   uint64 // processed before; acked without running the handler
	Retried      uint64 // attempts that failed and will be tried again (in place or by redelivery)
	DeadLettered uint64 // poison published to the dead-letter subject and terminated
}

// Subscriber consumes a JetStream pull consumer through an inbox: each
// message is processed in one database transaction and acked only after
// that transaction committed.
type Subscriber struct {
	p    inbox.Processor
	cons jetstream.Consumer
	h    Handler
	cfg  Config
	log  *slog.Logger
	m    *adapter.Metrics
	// fails counts ordinary failures per stream sequence (the poison
	// budget), in memory: NumDelivered also grows when AckWait runs out
	// while a message waits in a buffer, an outage included.
	fails *adapter.FailureCounts
	// inProgress is how often a message held through an outage is
	// reported InProgress: a third of the consumer's AckWait.
	inProgress time.Duration

	mu      sync.Mutex
	started bool
	stopped bool
	iter    jetstream.MessagesContext
	cancel  context.CancelFunc // cancels handler contexts (hard stop)
	wg      sync.WaitGroup
	done    chan struct{}

	// quit is closed by the first Stop: in-place retries end, and after
	// the first infrastructure failure seen while stopping (down is set)
	// the buffered messages are handed back without an attempt.
	quit chan struct{}
	down atomic.Bool

	park *adapter.Parking[jetstream.Msg] // early messages, keyed by stream sequence
}

// New returns a subscriber that feeds cons's messages to h through p.
// It does nothing until Start.
func New(p inbox.Processor, cons jetstream.Consumer, h Handler, cfg *Config) (*Subscriber, error) {
	switch {
	case p == nil:
		return nil, configError("p", "nil inbox.Processor")
	case cons == nil:
		return nil, configError("cons", "nil jetstream.Consumer")
	case h == nil:
		return nil, configError("h", "nil Handler")
	}
	c := cfg.withDefaults(cons)
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := adapter.NewMetrics(c.Observer, "nats", c.Consumer)
	if info := cons.CachedInfo(); info != nil && info.Config.MaxDeliver > 0 {
		c.Logger.Warn("natsinbox: the consumer has MaxDeliver set: the server drops a message after that many deliveries, silently, "+
			"and an outage or AckWait expiries count too; use MaxDeliver -1 and let the subscriber dead-letter poison",
			"consumer", c.Consumer, "max_deliver", info.Config.MaxDeliver)
	}
	ackWait := 30 * time.Second // the server's default
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait
	}
	return &Subscriber{
		p: p, cons: cons, h: h, cfg: c, m: m, fails: adapter.NewFailureCounts(),
		log:        c.Logger.With("consumer", c.Consumer),
		inProgress: max(ackWait/3, 10*time.Millisecond),
		done:       make(chan struct{}),
		quit:       make(chan struct{}),
		park:       adapter.NewParking[jetstream.Msg](c.MaxParked),
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
	if s.cfg.MaxParked > 0 {
		s.wg.Add(1)
		go s.keepParked()
	}
	go func() { s.wg.Wait(); close(s.done) }()
	return nil
}

// Stop stops pulling, lets the workers finish the messages already
// buffered, and returns when they are done. If ctx ends first, running
// handlers are cancelled (their transactions roll back and the messages are
// naked for an immediate redelivery) and Stop returns ctx's error once the
// workers have exited. Stop is safe to call twice and before Start.
//
// How long it takes (the Stop bound): once Stop is called, no message is
// held for an in-place retry any more; the first infrastructure failure
// after that hands its message back, and every message still buffered is
// handed back without an attempt. So during a database outage
// Stop(context.Background()) returns after at most about two
// ProcessTimeouts (the attempt running when Stop was called, and one more
// per worker), not when the outage ends. Give ctx a deadline for a hard
// bound.
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
// dead-letters it; it is what the workers call, exported for callers that
// run their own consume loop (Consumer.Consume, Fetch). The error is the
// reason for a Nacked or DeadLettered action, nil otherwise.
//
// An infrastructure failure (inbox.IsTransient, or ProcessTimeout expired)
// is retried here, in place, with TransientBackoffFunc, for as long as it
// lasts; the message is kept InProgress meanwhile. Handle returns when the
// message is settled, ctx ends, or the subscriber is stopping (then the
// message is naked at once; see Stop).
func (s *Subscriber) Handle(ctx context.Context, msg jetstream.Msg) (Action, error) {
	act, err := s.handle(ctx, msg)
	if act == Acked {
		// Applied: a parked message may have been waiting for this one.
		s.park.Applied(func(p adapter.Parked[jetstream.Msg]) bool {
			act, _ := s.handle(ctx, p.Msg)
			return act == Acked
		})
	}
	return act, err
}

func (s *Subscriber) handle(ctx context.Context, msg jetstream.Msg) (Action, error) {
	var delivered uint64 = 1
	seq := ""
	if md, err := msg.Metadata(); err == nil {
		delivered = max(md.NumDelivered, 1)
		seq = md.Stream + "/" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	if s.down.Load() {
		// Stopping during an outage: an attempt would only wait for the
		// database. Hand the message back at once.
		s.settle(msg, "nak", msg.Nak())
		return Nacked, errStopping
	}
	parking := s.parking()
	rerun := 0
	for outage := 1; ; outage++ {
		gen := s.park.Gen()
		actx, cancel := adapter.AttemptContext(ctx, s.cfg.ProcessTimeout)
		if parking {
			actx = inbox.WithoutEarlyWait(actx) // parked instead, below
		}
		id, out, err := s.attempt(actx, msg)
		verdict := adapter.Classify(actx, err)
		cancel()
		if err == nil {
			// The transaction has committed: only now may the broker forget
			// the message. If this ack is lost, the redelivery is a Duplicate.
			s.settle(msg, "ack", msg.Ack())
			s.fails.Forget(seq)
			s.park.Forget(seq)
			if out == inbox.Duplicate {
				s.m.Inc(inbox.DeliveryDuplicate)
				s.log.Debug("natsinbox: duplicate acked", "id", id)
				return AckedDup, nil
			}
			s.m.Inc(inbox.DeliveryProcessed)
			s.log.Debug("natsinbox: processed", "id", id)
			return Acked, nil
		}
		if ctx.Err() != nil {
			// We are stopping: not the message's fault. Hand it back now.
			s.settle(msg, "nak", msg.Nak())
			return Nacked, err
		}
		if verdict == adapter.Transient {
			s.m.Inc(inbox.DeliveryRetried)
			if s.stopping() {
				s.down.Store(true)
				s.log.Warn("natsinbox: infrastructure failure while stopping: handed back", "id", id, "err", err)
				s.settle(msg, "nak", msg.Nak())
				return Nacked, err
			}
			d := s.cfg.TransientBackoffFunc(outage)
			s.log.Warn("natsinbox: infrastructure failure, retrying in place", "id", id, "attempt", outage, "delay", d, "err", err)
			if !s.hold(ctx, msg, d) {
				s.settle(msg, "nak", msg.Nak())
				return Nacked, err
			}
			continue
		}
		if verdict == adapter.NotYet {
			// Its predecessor has not been applied yet; it may be right
			// behind this message. Park it until another message is applied
			// (at once again if one was applied meanwhile), or redeliver it
			// later; never counted as a failure.
			s.m.Inc(inbox.DeliveryRetried)
			if parking {
				if s.park.Gen() != gen && rerun < 3 {
					rerun++
					outage--
					continue
				}
				if s.park.Park(seq, msg) {
					s.log.Debug("natsinbox: message came early, parked", "id", id, "err", err)
					return Parked, err
				}
			}
			s.park.Forget(seq)
			delay := s.cfg.TransientBackoffFunc(int(min(delivered, 64)))
			s.log.Info("natsinbox: message came early, redelivery scheduled", "id", id, "deliveries", delivered, "delay", delay, "err", err)
			s.settle(msg, "nak", msg.NakWithDelay(delay))
			return Nacked, err
		}
		if verdict == adapter.Permanent || errors.Is(err, ErrNoMessageID) {
			return s.deadLetter(ctx, msg, seq, delivered, s.fails.Add(seq), err)
		}
		failures := s.fails.Add(seq)
		if failures >= s.cfg.MaxDeliveries {
			return s.deadLetter(ctx, msg, seq, delivered, failures, err)
		}
		s.m.Inc(inbox.DeliveryRetried)
		delay := s.cfg.BackoffFunc(failures)
		s.log.Warn("natsinbox: processing failed, redelivery scheduled", "id", id, "failures", failures, "deliveries", delivered, "delay", delay, "err", err)
		s.settle(msg, "nak", msg.NakWithDelay(delay))
		return Nacked, err
	}
}

// attempt extracts the ID and runs the message through the inbox once.
func (s *Subscriber) attempt(ctx context.Context, msg jetstream.Msg) (string, inbox.Outcome, error) {
	id, err := s.cfg.MessageIDFunc(msg)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if err != nil {
		// No usable ID, no dedup: processing it could repeat an effect on
		// every redelivery. Never fall back to another key.
		return "", 0, fmt.Errorf("natsinbox: message ID: %w", err)
	}
	out, err := s.p.Process(ctx, s.cfg.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
		return adapter.CallHandler("natsinbox", func() error { return s.h(ctx, tx, msg) })
	})
	return id, out, err
}

// hold waits d while keeping msg InProgress (so the server does not
// redeliver it); false if ctx ended or Stop was called first.
func (s *Subscriber) hold(ctx context.Context, msg jetstream.Msg, d time.Duration) bool {
	deadline := time.Now().Add(d)
	// The failed attempt itself may have taken a good part of AckWait.
	if err := msg.InProgress(); err != nil {
		s.log.Debug("natsinbox: in-progress failed; the server may redeliver (a Duplicate then)", "err", err)
	}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		if !adapter.Sleep(ctx, min(left, s.inProgress), s.quit) {
			return false
		}
		if err := msg.InProgress(); err != nil {
			s.log.Debug("natsinbox: in-progress failed; the server may redeliver (a Duplicate then)", "err", err)
		}
	}
}

// deadLetter publishes msg's envelope to the dead-letter subject and
// terminates msg once the copy is known to be stored; when there is no
// dead-letter subject, or the copy is not known to be stored, msg is naked
// with backoff instead: never dropped.
func (s *Subscriber) deadLetter(ctx context.Context, msg jetstream.Msg, seq string, delivered uint64, failures int, cause error) (Action, error) {
	delay := s.cfg.BackoffFunc(failures)
	if s.cfg.DeadLetterSubject == "" {
		s.m.Inc(inbox.DeliveryRetried)
		s.log.Error("natsinbox: poison message kept (no Config.DeadLetterSubject): redelivery scheduled",
			"subject", msg.Subject(), "failures", failures, "delay", delay, "err", cause)
		s.settle(msg, "nak", msg.NakWithDelay(delay))
		return Nacked, cause
	}
	reason := adapter.Truncate(cause.Error(), adapter.MaxErrorBytes)
	dl := s.envelope(msg, reason, delivered, failures)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := s.publishDeadLetter(pctx, dl)
	cancel()
	if err != nil {
		s.m.Inc(inbox.DeliveryRetried)
		s.log.Error("natsinbox: dead letter not stored; poison message kept, redelivery scheduled",
			"subject", msg.Subject(), "dead_letter_subject", s.cfg.DeadLetterSubject, "delay", delay, "err", err, "cause", cause)
		s.settle(msg, "nak", msg.NakWithDelay(delay))
		return Nacked, errors.Join(cause, err)
	}
	s.m.Inc(inbox.DeliveryDeadLettered)
	s.fails.Forget(seq)
	s.log.Error("natsinbox: poison message dead-lettered", "subject", msg.Subject(),
		"dead_letter_subject", s.cfg.DeadLetterSubject, "failures", failures, "deliveries", delivered, "err", cause)
	// A lost Term only means a redelivery, dead-lettered again: its copy
	// has the same DeadLetterID, which the stream's duplicate window drops
	// (and publishDeadLetter then finds the first copy).
	s.settle(msg, "term", s.term(msg, "idem: dead-lettered to "+s.cfg.DeadLetterSubject+": "+reason))
	return DeadLettered, cause
}

// envelope builds the dead-lettered copy of msg (see the package doc).
func (s *Subscriber) envelope(msg jetstream.Msg, reason string, delivered uint64, failures int) *nats.Msg {
	dl := nats.NewMsg(s.cfg.DeadLetterSubject)
	for k, v := range msg.Headers() {
		if isControlHeader(k) {
			k = OriginalHeaderPrefix + k[len("Nats-"):]
		}
		dl.Header[k] = append([]string(nil), v...)
	}
	consumer := s.consumerName()
	dl.Header.Set(ErrorHeader, reason)
	dl.Header.Set(SubjectHeader, msg.Subject())
	dl.Header.Set(ConsumerHeader, consumer)
	dl.Header.Set(DeliveriesHeader, strconv.FormatUint(delivered, 10))
	dl.Header.Set(FailuresHeader, strconv.Itoa(failures))
	if md, err := msg.Metadata(); err == nil {
		dl.Header.Set(StreamHeader, md.Stream)
		dl.Header.Set(SequenceHeader, strconv.FormatUint(md.Sequence.Stream, 10))
		dl.Header.Set(TimestampHeader, md.Timestamp.UTC().Format(time.RFC3339Nano))
		dl.Header.Set(jetstream.MsgIDHeader, DeadLetterID(md.Stream, consumer, md.Sequence.Stream))
	}
	dl.Data = msg.Data()
	return dl
}

// isControlHeader: JetStream reads every header named Nats-… (any case) as
// an instruction to the publish (dedup id, expected stream or sequence,
// rollup, TTL, …); none of the original's may reach the copy's publish.
func isControlHeader(name string) bool {
	return len(name) >= 5 && strings.EqualFold(name[:5], "Nats-")
}

// errDeadLetterGone: the dead-letter stream reports our copy as a
// duplicate, but no longer holds it (purged, or removed by a limit).
var errDeadLetterGone = errors.New("natsinbox: the dead-letter stream calls the copy a duplicate but no longer holds it; retrying after the duplicate window")

// publishDeadLetter publishes dl and returns nil only when a stream holds
// it: a fresh acknowledgement, or a Duplicate whose first copy (by the same
// DeadLetterID) is still stored.
func (s *Subscriber) publishDeadLetter(ctx context.Context, dl *nats.Msg) error {
	ack, err := s.cfg.JetStream.PublishMsg(ctx, dl)
	if err != nil {
		return err
	}
	if !ack.Duplicate {
		return nil
	}
	id := dl.Header.Get(jetstream.MsgIDHeader)
	st, err := s.cfg.JetStream.Stream(ctx, ack.Stream)
	if err != nil {
		return fmt.Errorf("natsinbox: dead letter acked as a duplicate; checking stream %q for the first copy: %w", ack.Stream, err)
	}
	first, err := st.GetMsg(ctx, ack.Sequence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return errDeadLetterGone
	}
	if err != nil {
		return fmt.Errorf("natsinbox: dead letter acked as a duplicate; reading the first copy (%s #%d): %w", ack.Stream, ack.Sequence, err)
	}
	if got := first.Header.Get(jetstream.MsgIDHeader); got != id {
		return fmt.Errorf("%w (sequence %d holds %q, not %q)", errDeadLetterGone, ack.Sequence, got, id)
	}
	return nil
}

// parking reports whether early messages are parked now: the workers run
// (the keeper reports them in progress) and Stop has not been called.
func (s *Subscriber) parking() bool {
	if s.cfg.MaxParked < 1 || s.stopping() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// keepParked reports the parked messages InProgress (so the server does
// not redeliver them) and hands back those parked longer than ParkTimeout,
// with a delay; on Stop it hands back every parked message at once.
func (s *Subscriber) keepParked() {
	defer s.wg.Done()
	t := time.NewTicker(s.inProgress)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			for _, p := range s.park.Close() {
				s.settle(p.Msg, "nak", p.Msg.Nak())
			}
			return
		case <-t.C:
		}
		for _, p := range s.park.Sweep(time.Now().Add(-s.cfg.ParkTimeout), func(m jetstream.Msg) {
			if err := m.InProgress(); err != nil {
				s.log.Debug("natsinbox: in-progress failed; the server may redeliver (a Duplicate then)", "err", err)
			}
		}) {
			var delivered uint64 = 1
			if md, err := p.Msg.Metadata(); err == nil {
				delivered = max(md.NumDelivered, 1)
			}
			delay := s.cfg.TransientBackoffFunc(int(min(delivered, 64)))
			s.log.Info("natsinbox: parked message still early, redelivery scheduled", "subject", p.Msg.Subject(), "parked", time.Since(p.Since), "delay", delay)
			s.settle(p.Msg, "nak", p.Msg.NakWithDelay(delay))
		}
	}
}

// errStopping is the reason for a message handed back unattempted.
var errStopping = errors.New("natsinbox: stopping during an infrastructure failure; message handed back without an attempt")

func (s *Subscriber) stopping() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

func (s *Subscriber) consumerName() string {
	if info := s.cons.CachedInfo(); info != nil {
		return info.Name
	}
	return ""
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

// configError is the *idem.ConfigError of package natsinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "natsinbox", Field: field, Reason: reason}
}
