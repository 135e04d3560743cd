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

	// MaxFailures dead-letters a message after this many attempts failed
	// with an ordinary error. Infrastructure failures (inbox.IsTransient)
	// are retried in place and do not count, and neither do redeliveries
	// after AckWait ran out: the count is kept in the subscriber's memory
	// per stream sequence, not taken from NumDelivered (a restart starts it
	// again). Keep the consumer's own MaxDeliver unlimited (-1), or the
	// server gives up first, silently. Default: the consumer's MaxDeliver
	// when it is set, else 5.
	MaxFailures int

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
	if info := cons.CachedInfo(); out.MaxFailures == 0 && info != nil && info.Config.MaxDeliver > 0 {
		out.MaxFailures = info.Config.MaxDeliver
	}
	adapter.Knobs{
		MaxFailures: &out.MaxFailures, BackoffFunc: &out.BackoffFunc, TransientBackoffFunc: &out.TransientBackoffFunc,
		ProcessTimeout: &out.ProcessTimeout, MaxParked: &out.MaxParked, Logger: &out.Logger,
		Concurrency: &out.Concurrency, ParkTimeout: &out.ParkTimeout,
	}.Defaults(DefaultBackoff)
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Consumer == "":
		return configError("Config.Consumer", "empty, and the consumer has no name")
	case c.Concurrency < 1:
		return configError("Config.Concurrency", fmt.Sprintf("must be at least 1, got %d", c.Concurrency))
	case c.DeadLetterSubject != "" && c.JetStream == nil:
		return configError("Config.DeadLetterSubject", "needs Config.JetStream to publish with")
	}
	return adapter.Check("natsinbox", c.Consumer, c.MaxFailures)
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
	// e decides what becomes of each message. Its poison budget is
	// counted per stream sequence, in memory: NumDelivered also grows when
	// AckWait runs out while a message waits in a buffer, an outage
	// included.
	e *adapter.Engine[jetstream.Msg]
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
	// the first infrastructure failure seen while stopping the buffered
	// messages are handed back without an attempt (adapter.Engine).
	quit chan struct{}

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
	s := &Subscriber{
		p: p, cons: cons, h: h, cfg: c, m: m,
		log:        c.Logger.With("consumer", c.Consumer),
		inProgress: max(ackWait/3, 10*time.Millisecond),
		done:       make(chan struct{}),
		quit:       make(chan struct{}),
		park:       adapter.NewParking[jetstream.Msg](c.MaxParked),
	}
	s.e = &adapter.Engine[jetstream.Msg]{
		Package: "natsinbox", Processor: p, Consumer: c.Consumer, Handler: h,
		Broker: broker{s}, Lot: s.park, Metrics: m, Log: s.log,
		MaxFailures: c.MaxFailures, Backoff: c.BackoffFunc, TransientBackoff: c.TransientBackoffFunc,
		ProcessTimeout: c.ProcessTimeout, DeadLetters: c.DeadLetterSubject != "", Quit: s.quit,
	}
	return s, nil
}

// Stats returns a snapshot of the subscriber's counters.
func (s *Subscriber) Stats() inbox.DeliveryStats { return s.m.Stats(s.park.Len()) }

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
		s.park.Open()
		s.wg.Add(1)
		go func() {
			// Parked messages are reported InProgress (so the server does
			// not redeliver them); on Stop every one is handed back at once.
			defer s.wg.Done()
			s.e.KeepParked(runCtx, s.park, s.inProgress, s.cfg.ParkTimeout, s.keepAlive, nil)
		}()
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
// reason for any action but inbox.Acked and inbox.AckedDuplicate.
//
// An infrastructure failure (inbox.IsTransient, or ProcessTimeout expired)
// is retried here, in place, with TransientBackoffFunc, for as long as it
// lasts; the message is kept InProgress meanwhile. Handle returns when the
// message is settled, ctx ends, or the subscriber is stopping (then the
// message is naked at once; see Stop).
func (s *Subscriber) Handle(ctx context.Context, msg jetstream.Msg) (inbox.Action, error) {
	return s.e.Handle(ctx, msg)
}

// broker is the JetStream side of the subscriber's adapter.Engine.
type broker struct{ s *Subscriber }

func (b broker) MessageID(msg jetstream.Msg) (string, error) {
	id, err := b.s.cfg.MessageIDFunc(msg)
	if err == nil && id == "" {
		err = ErrNoMessageID
	}
	if errors.Is(err, ErrNoMessageID) {
		return "", inbox.Permanent(err) // no dedup possible: dead-letter it
	}
	return id, err
}

// Key is the message's stream sequence: its poison budget and parking
// lot entry.
func (broker) Key(msg jetstream.Msg, _ string) string {
	if md, err := msg.Metadata(); err == nil {
		return md.Stream + "/" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return ""
}

func (broker) Ack(msg jetstream.Msg, _ bool) error { return msg.Ack() }

func (broker) HandBack(_ context.Context, msg jetstream.Msg, after time.Duration) error {
	if after <= 0 {
		return msg.Nak()
	}
	return msg.NakWithDelay(after)
}

func (broker) Redeliver(_ context.Context, msg jetstream.Msg, after time.Duration) error {
	return msg.NakWithDelay(after)
}

// Wait waits d while keeping msg InProgress (so the server does not
// redeliver it).
func (b broker) Wait(ctx context.Context, msg jetstream.Msg, d time.Duration, _ adapter.Failure) bool {
	return adapter.HoldAlive(ctx, d, b.s.inProgress, b.s.quit, func() { b.s.keepAlive(msg) })
}

// DeadLetter publishes msg's envelope to the dead-letter subject; nil
// only once the copy is known to be stored.
func (b broker) DeadLetter(ctx context.Context, msg jetstream.Msg, e adapter.Envelope) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return b.s.publishDeadLetter(pctx, b.s.envelope(msg, e))
}

// Discard terminates msg. A lost Term only means a redelivery,
// dead-lettered again: its copy has the same DeadLetterID, which the
// stream's duplicate window drops (and publishDeadLetter then finds the
// first copy).
func (b broker) Discard(msg jetstream.Msg, reason string) error {
	if b.s.cfg.TermWithReason {
		return msg.TermWithReason(adapter.Truncate("idem: dead-lettered to "+b.s.cfg.DeadLetterSubject+": "+reason, 256))
	}
	return msg.Term()
}

func (s *Subscriber) keepAlive(msg jetstream.Msg) {
	if err := msg.InProgress(); err != nil {
		s.log.Debug("natsinbox: in-progress failed; the server may redeliver (a Duplicate then)", "err", err)
	}
}

// envelope builds the dead-lettered copy of msg (see the package doc).
func (s *Subscriber) envelope(msg jetstream.Msg, e adapter.Envelope) *nats.Msg {
	dl := nats.NewMsg(s.cfg.DeadLetterSubject)
	for k, v := range msg.Headers() {
		if isControlHeader(k) {
			k = OriginalHeaderPrefix + k[len("Nats-"):]
		}
		dl.Header[k] = append([]string(nil), v...)
	}
	consumer := s.consumerName()
	dl.Header.Set(ErrorHeader, e.Reason)
	dl.Header.Set(SubjectHeader, msg.Subject())
	dl.Header.Set(ConsumerHeader, consumer)
	dl.Header.Set(FailuresHeader, strconv.Itoa(e.Failures))
	dl.Header.Set(DeliveriesHeader, "1")
	if md, err := msg.Metadata(); err == nil {
		dl.Header.Set(DeliveriesHeader, strconv.FormatUint(max(md.NumDelivered, 1), 10))
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

func (s *Subscriber) consumerName() string {
	if info := s.cons.CachedInfo(); info != nil {
		return info.Name
	}
	return ""
}

// configError is the *idem.ConfigError of package natsinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "natsinbox", Field: field, Reason: reason}
}
