package kafkainbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Handler does the business work for one record inside the inbox
// transaction.
type Handler func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error

// DefaultMessageIDHeader is the record header read for the business
// message ID unless Config says otherwise.
const DefaultMessageIDHeader = "idem-message-id"

// Headers set on a dead-lettered copy, after the original's own.
const (
	ErrorHeader    = adapter.ErrorHeader    // "Idem-Error": the last processing error, at most 1 KiB
	FailuresHeader = adapter.FailuresHeader // "Idem-Failures": attempts that failed with an ordinary error
	SourceHeader   = "Idem-Source"          // topic/partition/offset of the original
	AttemptsHeader = "Idem-Attempts"        // how many times it was tried, infrastructure failures included
)

// ErrStopped is returned by Start on a subscriber already started or stopped.
var ErrStopped = errors.New("kafkainbox: subscriber already started or stopped")

// ErrNoMessageID fails an attempt whose MessageIDFunc returned an empty ID.
var ErrNoMessageID = errors.New("kafkainbox: MessageIDFunc returned an empty message ID")

// Config configures a Subscriber. Brokers, Group and Topics are required.
type Config struct {
	Brokers []string // seed brokers
	Group   string   // consumer group; commits are the group's
	Topics  []string

	// Consumer is the inbox consumer name: the scope of the dedup rows.
	// Default: Group.
	Consumer string

	// MessageIDHeader names the header holding the business message ID.
	// Default DefaultMessageIDHeader.
	MessageIDHeader string

	// MessageIDFunc replaces the default ID extraction (the header, and
	// when a record has none, "topic/partition/offset"). The fallback
	// deduplicates redeliveries of the same record (rebalances, restarts,
	// lost commits) but NOT a producer that sent the same event twice (that
	// is a new offset): give business events an ID header. An error or an
	// empty ID from MessageIDFunc fails the attempt like a handler error
	// (retried; inbox.Permanent dead-letters it); it never falls back to
	// another key, which would apply the same event twice.
	MessageIDFunc func(r *kgo.Record) (string, error)

	// MaxFailures is how often a record failing with an ordinary error is
	// tried before it goes to DeadLetterTopic. Default 5. Infrastructure
	// failures (inbox.IsTransient) are retried with TransientBackoffFunc
	// and never count. While a record fails, its partition is paused and
	// the others flow. Without a DeadLetterTopic a poison record is retried
	// (with backoff) until it succeeds or the partition is reassigned, and a
	// permanent failure (inbox.Permanent) holds the partition without
	// further attempts; Failing reports both: skipping would lose the
	// record, and processing past it would break the partition's order.
	MaxFailures int

	// DeadLetterTopic receives poison records: records that failed
	// MaxFailures times, or once with inbox.Permanent (same key, value and
	// headers, plus ErrorHeader, SourceHeader and AttemptsHeader); the
	// partition then moves on. Empty: never skip.
	DeadLetterTopic string

	// BackoffFunc gives the wait before retrying after the failures-th
	// ordinary failure. Default DefaultBackoff: 100ms doubling, at most 10s.
	BackoffFunc func(failures int) time.Duration

	// TransientBackoffFunc gives the wait before the attempt-th retry of
	// an infrastructure failure. Default: 100ms doubling, at most 5s.
	TransientBackoffFunc func(attempt int) time.Duration

	// ProcessTimeout bounds one attempt (MessageIDFunc, Process and the
	// handler); its expiry counts as an infrastructure failure. Default
	// 30s; negative: no bound.
	ProcessTimeout time.Duration

	// Observer, when set, is told every delivery's outcome (Adapter
	// "kafka"); promidem.NewInboxObserver counts them as
	// idem_inbox_messages_total. Stats counts them either way.
	Observer inbox.Observer

	// MaxPollRecords bounds one poll. Default 500.
	MaxPollRecords int

	// MaxParked is how many early records (inbox.ErrNotYet, such as
	// watermark.ErrGap in Strict mode) this member parks: a parked record
	// is set aside, its partition moves on, and it runs again as soon as
	// another record was applied on any of the member's partitions (and
	// every ParkRetry), so a gap fills in one pass. The group's offset is
	// never committed past a parked record: after a crash, restart or
	// rebalance it is read again (the records after it as Duplicates).
	// When MaxParked records are parked, an early record is retried in
	// place, its partition paused. Default 100; negative: park nothing.
	MaxParked int

	// ParkRetry is how often parked records run again when nothing else
	// was applied (their predecessor may be applied by another member of
	// the group). Default 1s.
	ParkRetry time.Duration

	// ClientOpts are extra franz-go options (TLS, SASL, timeouts, …). The
	// subscriber sets the group, topics, seeds, ReadCommitted isolation,
	// DisableAutoCommit, BlockRebalanceOnPoll and the partition callbacks
	// after them.
	ClientOpts []kgo.Opt

	// Logger receives one record per failure (and Debug per record).
	// Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Consumer == "" {
		out.Consumer = out.Group
	}
	if out.MessageIDHeader == "" {
		out.MessageIDHeader = DefaultMessageIDHeader
	}
	if out.MaxPollRecords == 0 {
		out.MaxPollRecords = 500
	}
	if out.ParkRetry <= 0 {
		out.ParkRetry = time.Second
	}
	adapter.Knobs{
		MaxFailures: &out.MaxFailures, BackoffFunc: &out.BackoffFunc, TransientBackoffFunc: &out.TransientBackoffFunc,
		ProcessTimeout: &out.ProcessTimeout, MaxParked: &out.MaxParked, Logger: &out.Logger,
	}.Defaults(DefaultBackoff)
	return out
}

func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return configError("Config.Brokers", "empty: it is required")
	case c.Group == "":
		return configError("Config.Group", "empty: it is required")
	case len(c.Topics) == 0:
		return configError("Config.Topics", "empty: it is required")
	case c.MaxPollRecords < 1:
		return configError("Config.MaxPollRecords", fmt.Sprintf("must be at least 1, got %d", c.MaxPollRecords))
	}
	for _, t := range c.Topics {
		if t == c.DeadLetterTopic {
			return configError("Config.DeadLetterTopic", fmt.Sprintf("%q is also consumed", t))
		}
	}
	return adapter.Check("kafkainbox", c.Consumer, c.MaxFailures)
}

// DefaultBackoff is the wait after the failures-th failed attempt: 100ms,
// doubling, at most 10s.
func DefaultBackoff(failures int) time.Duration {
	return adapter.Doubling(100*time.Millisecond, 10*time.Second, uint64(max(failures, 0)))
}

type topicPartition struct {
	topic     string
	partition int32
}

// FailingPartition is a partition whose current record keeps failing: it
// is paused (PauseFetchPartitions) while the subscriber retries the record
// or, for a permanent failure without a DeadLetterTopic, holds it.
type FailingPartition struct {
	Topic     string
	Partition int32
	Offset    int64 // the failing record
	Attempts  int   // failed attempts so far, infrastructure failures included
	Parked    bool  // true: no more attempts until the partition is reassigned (restart, rebalance)
	Err       error // the last failure
}

// partitionWorker processes one partition's records, in order.
type partitionWorker struct {
	tp   topicPartition
	wake chan struct{} // capacity 1: records were queued
	quit chan struct{} // closed on revoke/lost/stop: finish the current record, commit, exit
	done chan struct{}
	lost atomic.Bool // set before quit is closed: skip the final commit

	mu      sync.Mutex
	queue   []*kgo.Record     // fetched, not yet handled
	failing *FailingPartition // the current record's failure, nil while it flows
	paused  bool              // what the client was last told
	gone    bool              // released: records for it are dropped
}

// Subscriber consumes Kafka topics as a consumer group through an inbox.
// Each partition is processed by its own goroutine, one record at a time
// and in offset order; partitions run concurrently, and a partition whose
// record keeps failing is paused while the others flow. Offsets are
// committed only for records whose transaction committed (or that were
// dead-lettered).
type Subscriber struct {
	p   inbox.Processor
	h   Handler
	cfg Config
	log *slog.Logger
	m   *adapter.Metrics
	e   *adapter.Engine[record] // decides what becomes of each record
	// quit is closed by the first Stop (adapter.Engine's Stop bound).
	quit chan struct{}

	mu       sync.Mutex
	started  bool
	stopping bool
	cl       *kgo.Client
	workers  map[topicPartition]*partitionWorker
	runCtx   context.Context // handler contexts; cancelled on a hard stop
	cancel   context.CancelFunc
	pollStop context.CancelFunc
	pollDone chan struct{}
	stopDone chan struct{}
	wg       sync.WaitGroup // partition workers

	applied atomic.Uint64 // records applied (Processed) so far: parked records run again when it moves
	parked  atomic.Int64  // records parked now, all partitions
}

// New returns a subscriber; it connects on Start.
func New(p inbox.Processor, h Handler, cfg *Config) (*Subscriber, error) {
	switch {
	case p == nil:
		return nil, configError("p", "nil inbox.Processor")
	case h == nil:
		return nil, configError("h", "nil Handler")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := adapter.NewMetrics(c.Observer, "kafka", c.Consumer)
	s := &Subscriber{
		p: p, h: h, cfg: c, m: m,
		log:     c.Logger.With("group", c.Group, "consumer", c.Consumer),
		workers: map[topicPartition]*partitionWorker{},
		quit:    make(chan struct{}),
	}
	s.e = &adapter.Engine[record]{
		Package: "kafkainbox", Processor: p, Consumer: c.Consumer,
		Handler: func(ctx context.Context, tx *sql.Tx, r record) error { return h(ctx, tx, r.r) },
		Broker:  broker{s}, Lot: lot{s}, Metrics: m, Log: s.log,
		MaxFailures: c.MaxFailures, Backoff: c.BackoffFunc, TransientBackoff: c.TransientBackoffFunc,
		ProcessTimeout: c.ProcessTimeout, DeadLetters: c.DeadLetterTopic != "", InPlace: true, Quit: s.quit,
	}
	return s, nil
}

// Stats returns a snapshot of the subscriber's counters; Parked counts
// the early records this member has parked now.
func (s *Subscriber) Stats() inbox.DeliveryStats { return s.m.Stats(int(s.parked.Load())) }

// Failing returns the partitions of this member that are paused on a
// failing record, with the failure: what to alert on.
func (s *Subscriber) Failing() []FailingPartition {
	s.mu.Lock()
	ws := make([]*partitionWorker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	var out []FailingPartition
	for _, w := range ws {
		w.mu.Lock()
		if w.failing != nil {
			out = append(out, *w.failing)
		}
		w.mu.Unlock()
	}
	return out
}

// Start creates the franz-go client, joins the group and starts polling.
// ctx is only used for starting. A Subscriber runs once.
func (s *Subscriber) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopping {
		return ErrStopped
	}
	opts := append(append([]kgo.Opt{}, s.cfg.ClientOpts...),
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.cfg.Topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.release(m, false) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.release(m, true) }),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafkainbox: client: %w", err)
	}
	s.runCtx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	pollCtx, pollStop := context.WithCancel(s.runCtx)
	s.started, s.cl, s.pollStop, s.pollDone = true, cl, pollStop, make(chan struct{})
	go s.poll(pollCtx)
	return nil
}

// Stop stops polling, lets each partition finish the record it is on,
// commits what was processed, leaves the group and closes the client. If
// ctx ends first, running handlers are cancelled (their transactions roll
// back; those records are not committed and will be consumed again) and
// Stop returns ctx's error. Safe to call twice and before Start.
func (s *Subscriber) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		close(s.quit)
	}
	if !s.started {
		s.stopping = true
		s.mu.Unlock()
		return nil
	}
	if !s.stopping {
		s.stopping = true
		s.stopDone = make(chan struct{})
		go func() {
			defer close(s.stopDone)
			s.pollStop()
			<-s.pollDone
			s.release(nil, false) // every partition: finish, commit, exit
			s.cl.Close()          // leave the group; the revoke callback finds nothing left
			s.cancel()
			s.wg.Wait()
		}()
	}
	done := s.stopDone
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.cancel()
		<-done
		return ctx.Err()
	}
}

// poll never blocks on a partition: records are queued to their
// partition's worker, and a partition whose queue is full or whose record
// is failing is paused instead. So one record never stalls the others,
// and rebalances (which wait for AllowRebalance) always get their turn.
func (s *Subscriber) poll(ctx context.Context) {
	defer close(s.pollDone)
	for {
		fetches := s.cl.PollRecords(ctx, s.cfg.MaxPollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			s.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("kafkainbox: fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			s.mu.Lock()
			w := s.workers[topicPartition{p.Topic, p.Partition}]
			s.mu.Unlock()
			if w == nil {
				return // not ours any more: the new owner reads from the committed offset
			}
			w.mu.Lock()
			if !w.gone {
				w.queue = append(w.queue, p.Records...)
				s.updatePause(w)
			}
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		})
		// Rebalances wait for this: a revoke can only happen between
		// polls, and it waits for the partition's worker (release).
		s.cl.AllowRebalance()
	}
}

// updatePause pauses w's partition while its record fails or its queue
// holds a poll's worth of records, and resumes it otherwise. w.mu held.
// Records the client had buffered for a paused partition are dropped by
// the client and fetched again from the same offset on resume.
func (s *Subscriber) updatePause(w *partitionWorker) {
	want := w.failing != nil || len(w.queue) >= s.cfg.MaxPollRecords
	if want == w.paused {
		return
	}
	m := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		s.cl.PauseFetchPartitions(m)
	} else {
		s.cl.ResumeFetchPartitions(m)
	}
	w.paused = want
}

// assigned starts a worker per new partition, before fetching begins.
func (s *Subscriber) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	for topic, parts := range m {
		for _, p := range parts {
			tp := topicPartition{topic, p}
			if s.workers[tp] != nil {
				continue
			}
			w := &partitionWorker{tp: tp, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
			s.workers[tp] = w
			s.wg.Add(1)
			go s.work(w)
		}
	}
}

// release stops the workers of m's partitions (all when m is nil): each
// finishes its current record, commits (unless lost) and exits; release
// returns when they have. A partition a worker had paused is resumed, so
// that it is fetched again if it comes back to this member.
func (s *Subscriber) release(m map[string][]int32, lost bool) {
	s.mu.Lock()
	var ws []*partitionWorker
	for tp, w := range s.workers {
		if m != nil && !contains(m[tp.topic], tp.partition) {
			continue
		}
		delete(s.workers, tp)
		w.lost.Store(lost)
		close(w.quit)
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		<-w.done
		w.mu.Lock()
		w.failing, w.queue, w.gone = nil, nil, true
		s.updatePause(w)
		w.mu.Unlock()
	}
}

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// result is what handle did with a record.
type result uint8

const (
	done   result = iota + 1 // processed, duplicate or dead-lettered: may be committed past
	parked                   // early and set aside (or, retried from the lot, still early)
	halted                   // the worker must stop; the record is not done
)

func (s *Subscriber) work(w *partitionWorker) {
	defer s.wg.Done()
	defer close(w.done)
	var (
		last      *kgo.Record        // the highest record done
		lot       []*kgo.Record      // parked records, in offset order: the commit stays at the first
		committed int64         = -1 // the offset last committed by this worker
		seen      uint64             // s.applied when the lot last ran
	)
	uncommitted := 0
	commit := func() {
		if w.lost.Load() {
			return
		}
		// The next record to read: the first parked one, else the one after
		// the last done.
		var at *kgo.Record
		switch {
		case len(lot) > 0:
			at = &kgo.Record{Topic: lot[0].Topic, Partition: lot[0].Partition, LeaderEpoch: lot[0].LeaderEpoch, Offset: lot[0].Offset - 1}
		case last != nil:
			at = last
		default:
			return
		}
		if at.Offset+1 <= committed {
			return
		}
		// The group may be rebalancing; a commit that fails only means the
		// next owner sees these records again, as Duplicates.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 10*time.Second)
		defer cancel()
		if err := s.cl.CommitRecords(ctx, at); err != nil {
			s.log.Warn("kafkainbox: commit failed; records will be redelivered as duplicates",
				"topic", w.tp.topic, "partition", w.tp.partition, "offset", at.Offset+1, "err", err)
			return
		}
		committed, uncommitted = at.Offset+1, 0
	}
	defer func() {
		commit()
		s.parked.Add(-int64(len(lot))) // read again by the partition's next owner
	}()
	// runLot runs the parked records again, newest first (a reversed run
	// applies in one pass), and again while any of them applied.
	runLot := func() bool {
		for len(lot) > 0 {
			seen = s.applied.Load()
			progress := false
			for i := len(lot) - 1; i >= 0; i-- {
				select {
				case <-w.quit:
					return false
				default:
				}
				switch s.handle(record{r: lot[i], w: w, commit: commit, fromLot: true}) {
				case halted:
					return false
				case done:
					if last == nil || lot[i].Offset > last.Offset {
						last = lot[i]
					}
					lot = append(lot[:i], lot[i+1:]...)
					s.parked.Add(-1)
					progress = true
				}
			}
			if !progress {
				break
			}
		}
		commit()
		return true
	}
	retry := time.NewTimer(s.cfg.ParkRetry)
	defer retry.Stop()
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		if len(lot) > 0 && s.applied.Load() != seen && !runLot() {
			return
		}
		w.mu.Lock()
		var r *kgo.Record
		if len(w.queue) > 0 {
			r = w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			s.updatePause(w)
		}
		w.mu.Unlock()
		if r == nil {
			commit()
			var tick <-chan time.Time
			if len(lot) > 0 {
				retry.Reset(s.cfg.ParkRetry)
				tick = retry.C
			}
			select {
			case <-w.quit:
				return
			case <-w.wake:
			case <-tick:
				if !runLot() {
					return
				}
			}
			continue
		}
		switch s.handle(record{r: r, w: w, commit: commit}) {
		case halted:
			return // stopping before r was done: r stays uncommitted
		case parked:
			lot = append(lot, r)
			continue
		}
		last = r
		if uncommitted++; uncommitted >= s.cfg.MaxPollRecords {
			commit()
		}
	}
}

// mayPark reports whether an early record can be parked now.
func (s *Subscriber) mayPark() bool {
	if s.cfg.MaxParked < 1 || s.parked.Load() >= int64(s.cfg.MaxParked) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stopping
}

// appliedOne counts an applied record and wakes the workers holding
// parked records: one of them may have waited for it.
func (s *Subscriber) appliedOne() {
	s.applied.Add(1)
	if s.parked.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// record is one record as the engine handles it: with its partition's
// worker, and the worker's commit (to save the progress made before the
// record, once it fails).
type record struct {
	r       *kgo.Record
	w       *partitionWorker
	commit  func()
	fromLot bool // it was parked: if it is still early it stays so, without waiting
}

// handle processes r until it is done, parked or the worker must stop.
// While r fails, its partition is paused.
func (s *Subscriber) handle(r record) result {
	act, _ := s.e.Handle(s.runCtx, r)
	switch act {
	case inbox.Parked:
		return parked
	case inbox.HandedBack:
		return halted // stopping, or the partition revoked: r stays uncommitted
	}
	return done
}

// broker is the Kafka side of the subscriber's adapter.Engine: a record
// is never handed back (that would break its partition's order) but
// retried in place, its partition paused.
type broker struct{ s *Subscriber }

func (b broker) MessageID(r record) (string, error) { return b.s.messageID(r.r) }

func (broker) Key(r record, _ string) string { return sourceID(r.r) }

// Ack marks the partition flowing again; the worker commits past r.
func (b broker) Ack(r record, applied bool) error {
	if applied {
		b.s.appliedOne()
	}
	b.s.setFailing(r.w, nil)
	return nil
}

// HandBack leaves r uncommitted: the partition's next owner (or this
// member after a restart) reads it again.
func (broker) HandBack(context.Context, record, time.Duration) error { return nil }

// Redeliver is never called: the engine runs in place.
func (broker) Redeliver(context.Context, record, time.Duration) error { return nil }

// Wait pauses r's partition and reports it failing for d (for good when
// f.Held: until the partition is released).
func (b broker) Wait(ctx context.Context, r record, d time.Duration, f adapter.Failure) bool {
	r.commit()
	b.s.setFailing(r.w, &FailingPartition{Topic: r.r.Topic, Partition: r.r.Partition, Offset: r.r.Offset, Attempts: f.Attempts, Parked: f.Held, Err: f.Err})
	if f.Held {
		select {
		case <-r.w.quit:
		case <-ctx.Done():
		}
		return false
	}
	return adapter.Sleep(ctx, d, r.w.quit)
}

// DeadLetter produces r's copy to DeadLetterTopic.
func (b broker) DeadLetter(ctx context.Context, r record, e adapter.Envelope) error {
	r.commit()
	dl := &kgo.Record{
		Topic: b.s.cfg.DeadLetterTopic, Key: r.r.Key, Value: r.r.Value,
		Headers: append(append([]kgo.RecordHeader{}, r.r.Headers...),
			kgo.RecordHeader{Key: ErrorHeader, Value: []byte(e.Reason)},
			kgo.RecordHeader{Key: FailuresHeader, Value: []byte(strconv.Itoa(e.Failures))},
			kgo.RecordHeader{Key: SourceHeader, Value: []byte(sourceID(r.r))},
			kgo.RecordHeader{Key: AttemptsHeader, Value: []byte(strconv.Itoa(e.Attempts))}),
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return b.s.cl.ProduceSync(ctx, dl).FirstErr()
}

// Discard marks the partition flowing again; the worker commits past r.
func (b broker) Discard(r record, _ string) error {
	b.s.setFailing(r.w, nil)
	return nil
}

// lot is the engine's view of the partition workers' parking lots.
type lot struct{ s *Subscriber }

func (l lot) MayPark(r record) bool { return r.fromLot || l.s.mayPark() }

// Gen is the count of records applied: parked records run again when it
// moves.
func (l lot) Gen() uint64 { return l.s.applied.Load() }

// Park counts r as parked (the worker keeps it in its lot) and lets its
// partition flow.
func (l lot) Park(_ string, r record) bool {
	if !r.fromLot {
		l.s.parked.Add(1)
	}
	l.s.setFailing(r.w, nil)
	return true
}

func (lot) Forget(string) {}

func (s *Subscriber) setFailing(w *partitionWorker, f *FailingPartition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f == nil && w.failing == nil {
		return
	}
	w.failing = f
	s.updatePause(w)
}

// messageID is MessageIDFunc's answer, or else the ID header, or else the
// record's position. An error or an empty ID from MessageIDFunc fails the
// attempt: falling back to another key would let the same event be applied
// twice, once under each key.
func (s *Subscriber) messageID(r *kgo.Record) (string, error) {
	if s.cfg.MessageIDFunc != nil {
		id, err := s.cfg.MessageIDFunc(r)
		if err != nil {
			return "", fmt.Errorf("MessageIDFunc: %w", err)
		}
		if id == "" {
			return "", ErrNoMessageID
		}
		return id, nil
	}
	for _, h := range r.Headers {
		if h.Key == s.cfg.MessageIDHeader && len(h.Value) > 0 {
			return string(h.Value), nil
		}
	}
	return sourceID(r), nil
}

// sourceID is the record's position: stable across redeliveries of the
// same record, different for a re-produced copy.
func sourceID(r *kgo.Record) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}

// configError is the *idem.ConfigError of package kafkainbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "kafkainbox", Field: field, Reason: reason}
}
