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

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/internal/adapter"
)

// Processor is what the subscriber needs from the inbox: *inbox.Inbox
// implements it. Declared here so tests (and users) can wrap or fake it.
type Processor interface {
	Process(ctx context.Context, consumer, messageID string, h inbox.Handler) (inbox.Outcome, error)
}

var _ Processor = (*inbox.Inbox)(nil)

// Handler does the business work for one record inside the inbox
// transaction.
type Handler func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error

// DefaultMessageIDHeader is the record header read for the business
// message ID unless Config says otherwise.
const DefaultMessageIDHeader = "idem-message-id"

// Headers set on a dead-lettered copy.
const (
	ErrorHeader    = "idem-error"    // the last processing error
	SourceHeader   = "idem-source"   // topic/partition/offset of the original
	AttemptsHeader = "idem-attempts" // how many times it was tried
)

// ErrStopped is returned by Start on a subscriber already started or stopped.
var ErrStopped = errors.New("kafkainbox: subscriber already started or stopped")

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

	// MessageIDFunc replaces the default ID extraction: the header, and
	// when a record has none, "topic/partition/offset". The fallback
	// deduplicates redeliveries of the same record (rebalances, restarts,
	// lost commits) but NOT a producer that sent the same event twice (that
	// is a new offset): give business events an ID header. An empty ID from
	// MessageIDFunc also falls back to topic/partition/offset.
	MessageIDFunc func(r *kgo.Record) (string, error)

	// MaxAttempts is how often a failing record is tried before it goes to
	// DeadLetterTopic. Default 5. Without a DeadLetterTopic a failing record
	// is retried (with backoff) until it succeeds or the subscriber stops:
	// the partition waits behind it, because skipping would lose it and
	// processing past it would break the partition's order.
	MaxAttempts int

	// DeadLetterTopic receives records that failed MaxAttempts times (same
	// key, value and headers, plus ErrorHeader, SourceHeader and
	// AttemptsHeader); the partition then moves on. Empty: never skip.
	DeadLetterTopic string

	// BackoffFunc gives the wait before retrying after the attempt-th
	// failure. Default: 100ms doubling, at most 10s.
	BackoffFunc func(attempt int) time.Duration

	// MaxPollRecords bounds one poll. Default 500.
	MaxPollRecords int

	// ClientOpts are extra franz-go options (TLS, SASL, timeouts, …). The
	// subscriber sets the group, topics, seeds, DisableAutoCommit,
	// BlockRebalanceOnPoll and the partition callbacks after them.
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
	if out.MaxAttempts == 0 {
		out.MaxAttempts = 5
	}
	if out.BackoffFunc == nil {
		out.BackoffFunc = DefaultBackoff
	}
	if out.MaxPollRecords == 0 {
		out.MaxPollRecords = 500
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafkainbox: Config.Brokers is required")
	case c.Group == "":
		return errors.New("kafkainbox: Config.Group is required")
	case len(c.Topics) == 0:
		return errors.New("kafkainbox: Config.Topics is required")
	case c.MaxAttempts < 1:
		return fmt.Errorf("kafkainbox: Config.MaxAttempts must be >= 1, got %d", c.MaxAttempts)
	case c.MaxPollRecords < 1:
		return fmt.Errorf("kafkainbox: Config.MaxPollRecords must be >= 1, got %d", c.MaxPollRecords)
	}
	for _, t := range c.Topics {
		if t == c.DeadLetterTopic {
			return fmt.Errorf("kafkainbox: DeadLetterTopic %q is also consumed", t)
		}
	}
	return adapter.CheckConsumer("kafkainbox", c.Consumer)
}

// DefaultBackoff waits 100ms after the first failure, doubling, at most 10s.
func DefaultBackoff(attempt int) time.Duration {
	return adapter.Doubling(100*time.Millisecond, 10*time.Second, uint64(max(attempt, 0)))
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionWorker processes one partition's records, in order.
type partitionWorker struct {
	tp   topicPartition
	recs chan []*kgo.Record
	quit chan struct{} // closed on revoke/lost/stop: finish the current record, commit, exit
	done chan struct{}
	lost atomic.Bool // set before quit is closed: skip the final commit
}

// Subscriber consumes Kafka topics as a consumer group through an inbox.
// Each partition is processed by its own goroutine, one record at a time
// and in offset order; partitions run concurrently. Offsets are committed
// only for records whose transaction committed (or that were
// dead-lettered).
type Subscriber struct {
	p   Processor
	h   Handler
	cfg Config
	log *slog.Logger

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
}

// New returns a subscriber; it connects on Start.
func New(p Processor, h Handler, cfg *Config) (*Subscriber, error) {
	if p == nil || h == nil {
		return nil, errors.New("kafkainbox: New needs a Processor and a Handler")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{
		p: p, h: h, cfg: c,
		log:     c.Logger.With("group", c.Group, "consumer", c.Consumer),
		workers: map[topicPartition]*partitionWorker{},
	}, nil
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
			select {
			case w.recs <- p.Records:
			case <-w.quit:
			case <-ctx.Done():
			}
		})
		// Rebalances wait for this: a revoke can only happen between
		// polls, and it waits for the partition's worker (release).
		s.cl.AllowRebalance()
	}
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
			w := &partitionWorker{tp: tp, recs: make(chan []*kgo.Record, 4), quit: make(chan struct{}), done: make(chan struct{})}
			s.workers[tp] = w
			s.wg.Add(1)
			go s.work(w)
		}
	}
}

// release stops the workers of m's partitions (all when m is nil): each
// finishes its current record, commits (unless lost) and exits; release
// returns when they have.
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

func (s *Subscriber) work(w *partitionWorker) {
	defer s.wg.Done()
	defer close(w.done)
	var last *kgo.Record // processed, not yet committed
	commit := func() {
		if last == nil || w.lost.Load() {
			return
		}
		// The group may be rebalancing; a commit that fails only means the
		// next owner sees these records again, as Duplicates.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), 10*time.Second)
		defer cancel()
		if err := s.cl.CommitRecords(ctx, last); err != nil {
			s.log.Warn("kafkainbox: commit failed; records will be redelivered as duplicates",
				"topic", w.tp.topic, "partition", w.tp.partition, "offset", last.Offset, "err", err)
		}
		last = nil
	}
	defer commit()
	for {
		select {
		case <-w.quit:
			return
		case recs := <-w.recs:
			for _, r := range recs {
				if !s.handle(w, r) {
					return // stopping before r was done: r stays uncommitted
				}
				last = r
				select {
				case <-w.quit:
					return
				default:
				}
			}
			commit()
		}
	}
}

// handle processes r until it is done (true) or the worker must stop (false).
func (s *Subscriber) handle(w *partitionWorker, r *kgo.Record) bool {
	id := s.messageID(r)
	for attempt := 1; ; attempt++ {
		out, err := s.p.Process(s.runCtx, s.cfg.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
			return s.h(ctx, tx, r)
		})
		if err == nil {
			s.log.Debug("kafkainbox: "+out.String(), "id", id, "partition", r.Partition, "offset", r.Offset)
			return true
		}
		if s.runCtx.Err() != nil {
			return false
		}
		if s.cfg.DeadLetterTopic != "" && attempt >= s.cfg.MaxAttempts {
			s.log.Error("kafkainbox: poison record dead-lettered", "id", id, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempts", attempt, "err", err)
			if s.deadLetter(r, attempt, err) {
				return true
			}
		} else {
			s.log.Warn("kafkainbox: processing failed, retrying", "id", id, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempt", attempt, "err", err)
		}
		t := time.NewTimer(s.cfg.BackoffFunc(attempt))
		select {
		case <-t.C:
		case <-w.quit:
			t.Stop()
			return false
		case <-s.runCtx.Done():
			t.Stop()
			return false
		}
	}
}

func (s *Subscriber) deadLetter(r *kgo.Record, attempts int, cause error) bool {
	dl := &kgo.Record{
		Topic: s.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value,
		Headers: append(append([]kgo.RecordHeader{}, r.Headers...),
			kgo.RecordHeader{Key: ErrorHeader, Value: []byte(cause.Error())},
			kgo.RecordHeader{Key: SourceHeader, Value: []byte(sourceID(r))},
			kgo.RecordHeader{Key: AttemptsHeader, Value: []byte(strconv.Itoa(attempts))}),
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 30*time.Second)
	defer cancel()
	if err := s.cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
		s.log.Error("kafkainbox: dead-letter produce failed; retrying the record", "err", err)
		return false
	}
	return true
}

func (s *Subscriber) messageID(r *kgo.Record) string {
	if s.cfg.MessageIDFunc != nil {
		id, err := s.cfg.MessageIDFunc(r)
		if err != nil {
			s.log.Warn("kafkainbox: MessageIDFunc failed; using topic/partition/offset", "err", err)
		}
		if id != "" && err == nil {
			return id
		}
		return sourceID(r)
	}
	for _, h := range r.Headers {
		if h.Key == s.cfg.MessageIDHeader && len(h.Value) > 0 {
			return string(h.Value)
		}
	}
	return sourceID(r)
}

// sourceID is the record's position: stable across redeliveries of the
// same record, different for a re-produced copy.
func sourceID(r *kgo.Record) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}
