package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/sqlerr"
)

// Publisher hands a batch of messages to a broker. Publish returns one error
// per message, in order: nil only once the broker has confirmed that
// message (a JetStream ack, a RabbitMQ publisher confirm, a Kafka produce
// response). An error wrapped with Permanent parks the message; any other
// error retries it later. The batch holds at most one message per ordering
// key, so the publisher may send them concurrently.
type Publisher interface {
	Publish(ctx context.Context, batch []Message) []error
}

// Permanent marks a broker's refusal that no retry will change (the
// message is too large, nothing routes it): the relay parks the message
// instead of retrying it. Its reason class is ReasonRejected; PermanentAs
// names a more precise one.
func Permanent(err error) error {
	return PermanentAs(ReasonRejected, err)
}

// The reason classes of a parked message: a small fixed set, so that a
// metric labelled with them stays small (ReasonClass maps anything else
// to ReasonRejected).
const (
	ReasonTooLarge           = "too_large"           // over the broker's size limit
	ReasonInvalidDestination = "invalid_destination" // a subject or topic name the broker refuses
	ReasonInvalidHeader      = "invalid_header"      // a header the broker refuses
	ReasonNoRoute            = "no_route"            // RabbitMQ: no queue bound for the routing key
	ReasonMissingExchange    = "missing_exchange"    // RabbitMQ: the exchange does not exist
	ReasonNotAuthorized      = "not_authorized"      // the broker denies the destination
	ReasonRejected           = "rejected"            // any other refusal for good
)

var reasonClasses = map[string]bool{ReasonTooLarge: true, ReasonInvalidDestination: true, ReasonInvalidHeader: true,
	ReasonNoRoute: true, ReasonMissingExchange: true, ReasonNotAuthorized: true, ReasonRejected: true}

// PermanentAs is Permanent with a reason class, one of the Reason
// constants (another becomes ReasonRejected). The stored reason, which
// Info.Reason and Observer.Parked carry, starts with "permanent (class): ".
func PermanentAs(class string, err error) error {
	if err == nil {
		return nil
	}
	if !reasonClasses[class] {
		class = ReasonRejected
	}
	return &permanentError{class: class, err: err}
}

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ReasonClass returns the class of a parked message's reason (the string
// Observer.Parked receives, or Info.Reason): one of the Reason constants,
// ReasonRejected for a reason stored without one.
func ReasonClass(reason string) string {
	rest, ok := strings.CutPrefix(reason, "permanent (")
	if !ok {
		return ReasonRejected
	}
	class, _, ok := strings.Cut(rest, "): ")
	if !ok || !reasonClasses[class] {
		return ReasonRejected
	}
	return class
}

// parkReason is the stored reason of a message parked with err (a
// Permanent error, perhaps wrapped again): it starts with its class,
// moved to the front when the publisher wrapped it.
func parkReason(err error) string {
	s := err.Error()
	var p *permanentError
	if errors.As(err, &p) && !strings.HasPrefix(s, "permanent (") {
		prefix := "permanent (" + p.class + "): "
		s = prefix + strings.Replace(s, prefix, "", 1)
	}
	return truncate(s)
}

type permanentError struct {
	class string
	err   error
}

func (e *permanentError) Error() string { return "permanent (" + e.class + "): " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Observer receives the relay's events. Its methods are called from the
// relay's goroutines — at the same time from its concurrent passes
// (RelayConfig.Concurrency), so they must be safe for concurrent use —
// after the outcome is committed, and must not block.
type Observer interface {
	// Published: n messages were confirmed by the broker and marked sent.
	Published(n int)
	// Retried: publishing m failed with a transient error; it is retried
	// after a backoff.
	Retried(m Message, err error)
	// Parked: the broker refused m for good; it waits for an operator.
	// ReasonClass(reason) is its class, for a metric's label.
	Parked(m Message, reason string)
	// Lag: the oldest pending message was enqueued age ago (0 when none is
	// pending). Reported after passes, at most once a second.
	Lag(age time.Duration)
}

// BacklogObserver is an Observer that also receives the size of the
// backlog, for an alert on a relay that has stopped publishing: the
// relay calls Backlog with Lag when the Observer has this method.
type BacklogObserver interface {
	Observer
	// Backlog: pending messages are waiting (committed, not yet
	// confirmed, parked ones not counted), the oldest enqueued oldest ago
	// (0 when none is pending). Reported with Lag.
	Backlog(pending int64, oldest time.Duration)
}

type nopObserver struct{}

func (nopObserver) Published(int)          {}
func (nopObserver) Retried(Message, error) {}
func (nopObserver) Parked(Message, string) {}
func (nopObserver) Lag(time.Duration)      {}

// RelayConfig configures a Relay. The zero value (or nil) gives the defaults.
type RelayConfig struct {
	// BatchSize is how many messages one pass claims and publishes
	// (default 500). A pass costs a claim, an UPDATE and a commit
	// whatever its size, so larger batches raise the throughput; a
	// pass's messages wait for its slowest confirm.
	BatchSize int
	// Concurrency is how many passes run at once, each in its own
	// transaction (default 2): while one pass waits for the broker's
	// confirms, the next claims the following heads (SKIP LOCKED keeps
	// the claims apart) and publishes them. Per-key order is unchanged:
	// a message is claimed only once its predecessor is marked sent. On
	// SQLite it is always 1 (no row locks keep two claims apart).
	Concurrency int
	// PollInterval is the wait after a pass that found nothing due
	// (default 200 ms).
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the waits after failures: a message
	// that failed n times waits about MinBackoff·2ⁿ, capped at MaxBackoff;
	// a pass that failed altogether (database away, every publish failed)
	// makes the relay itself wait the same way (defaults 100 ms and 30 s).
	MinBackoff, MaxBackoff time.Duration
	// PublishTimeout bounds one Publish call (default 10 s). The claimed
	// rows stay locked meanwhile.
	PublishTimeout time.Duration
	// PassTimeout bounds one whole pass — claim, publish and marks — and
	// each lag query and sweep (default PublishTimeout + 20 s). A database
	// that stops answering fails the pass after it, and the relay backs off.
	PassTimeout time.Duration
	// Retention is how long sent and discarded rows are kept before the
	// sweeper deletes them (default 7 days; negative: no sweeping).
	Retention time.Duration
	// SweepInterval is the time between sweeps (default 1 min) and
	// SweepBatch the rows one DELETE removes (default 1000).
	SweepInterval time.Duration
	SweepBatch    int
	// Lease is how long a relay on SQLite holds the single-relay lease
	// without renewing it (default 15 s); a relay that died is replaced
	// after it.
	Lease time.Duration
	// Observer receives metrics events (default: none).
	Observer Observer
	// Logger receives failures (default slog.Default()).
	Logger *slog.Logger
}

func (c *RelayConfig) withDefaults() RelayConfig {
	var out RelayConfig
	if c != nil {
		out = *c
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if out.BatchSize <= 0 {
		out.BatchSize = 500
	}
	if out.Concurrency <= 0 {
		out.Concurrency = 2
	}
	def(&out.PollInterval, 200*time.Millisecond)
	def(&out.MinBackoff, 100*time.Millisecond)
	def(&out.MaxBackoff, 30*time.Second)
	def(&out.PublishTimeout, 10*time.Second)
	def(&out.PassTimeout, out.PublishTimeout+20*time.Second)
	def(&out.Retention, 7*24*time.Hour)
	def(&out.SweepInterval, time.Minute)
	def(&out.Lease, 15*time.Second)
	if out.SweepBatch <= 0 {
		out.SweepBatch = 1000
	}
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

// Relay publishes committed messages and marks them sent once the broker
// has confirmed them. Several relays may run on one outbox (see the package
// documentation for SQLite).
type Relay struct {
	o      *Outbox
	pub    Publisher
	cfg    RelayConfig
	holder string

	mu      sync.Mutex
	started bool
	stop    chan struct{} // closed by Stop: finish the pass in hand
	cancel  context.CancelFunc
	done    chan struct{}
	lastLag time.Time // the first loop's only

	failMu       sync.Mutex
	failingSince time.Time // zero while publishing works
	failedPasses int
}

// NewRelay returns a relay that publishes o's messages through pub.
func (o *Outbox) NewRelay(pub Publisher, cfg *RelayConfig) (*Relay, error) {
	if pub == nil {
		return nil, configError("pub", "nil Publisher")
	}
	c := cfg.withDefaults()
	if o.cfg.Dialect == SQLite {
		c.Concurrency = 1
	}
	if c.MinBackoff > c.MaxBackoff {
		return nil, configError("RelayConfig.MinBackoff", fmt.Sprintf("%v is above MaxBackoff (%v)", c.MinBackoff, c.MaxBackoff))
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Relay{o: o, pub: pub, cfg: c, holder: hex.EncodeToString(b[:])}, nil
}

// ErrNotLeader is returned by RunOnce on SQLite while another relay holds
// the single-relay lease.
var ErrNotLeader = errors.New("outbox: another relay holds the lease")

// Start runs the relay (and its sweeper) in the background until Stop, or
// until ctx is cancelled. It fails if the relay was started before.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("outbox: relay already started")
	}
	r.started = true
	runCtx, cancel := context.WithCancel(ctx)
	r.stop, r.cancel, r.done = make(chan struct{}), cancel, make(chan struct{})
	var wg sync.WaitGroup
	for i := range r.cfg.Concurrency {
		wg.Add(1)
		go func() { defer wg.Done(); r.loop(runCtx, i == 0) }()
	}
	if r.cfg.Retention > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.sweepLoop(runCtx) }()
	}
	go func() { wg.Wait(); close(r.done) }()
	return nil
}

// Stop lets the passes in hand finish (their messages are marked) and
// waits for the relay to end. When ctx ends first it cancels the passes —
// their messages stay pending and are published again later — and still
// waits for the goroutines to return. Stop may be called more than once, and before Start.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started || r.done == nil {
		r.mu.Unlock()
		return nil
	}
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	done, cancel := r.done, r.cancel
	r.mu.Unlock()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	<-done
	if r.o.cfg.Dialect == SQLite {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = r.o.db.ExecContext(c, `DELETE FROM `+r.o.cfg.Table+`_lease WHERE holder = ?`, r.holder)
		cancel()
	}
	return err
}

// loop runs passes until Stop; one of the Concurrency loops reports the
// lag.
func (r *Relay) loop(ctx context.Context, reportsLag bool) {
	failures := 0
	for {
		n, pubErr, err := r.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case errors.Is(err, ErrNotLeader):
			failures = 0
			wait = r.cfg.Lease / 4
		case err != nil || pubErr != nil:
			if err != nil {
				r.cfg.Logger.Warn("outbox relay: pass failed", "err", err, "failures", failures+1)
				r.noteFailing(err)
			} else {
				r.noteFailing(pubErr)
			}
			wait = r.backoff(failures)
			failures++
		case n == 0:
			failures = 0
			wait = r.cfg.PollInterval
		default:
			failures = 0
			r.noteWorking()
		}
		if reportsLag {
			r.reportLag(ctx, n == 0)
		}
		if wait == 0 {
			select {
			case <-r.stop:
				return
			default:
				continue
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// failingAfter is how many passes in a row must fail altogether (the
// database, or every publish of the pass) before the relay says that
// publishing is failing: one message's transient refusal, or a pass that
// was in flight when the broker came back, is not an outage.
const failingAfter = 3

// noteFailing counts a pass that failed altogether and logs, once, that
// publishing is failing; noteWorking logs, once, that a pass has
// published again. In between the relay says nothing more than its
// per-pass database warnings, so an outage of any length costs two lines.
func (r *Relay) noteFailing(err error) {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	r.failedPasses++
	if !r.failingSince.IsZero() || r.failedPasses < failingAfter {
		return
	}
	r.failingSince = time.Now()
	r.cfg.Logger.Warn("outbox relay: publishing is failing; retrying with backoff", "err", err, "failed_passes", r.failedPasses)
}

func (r *Relay) noteWorking() {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	n := r.failedPasses
	r.failedPasses = 0
	if r.failingSince.IsZero() {
		return
	}
	r.cfg.Logger.Info("outbox relay: publishing recovered", "failing_for", time.Since(r.failingSince).Round(time.Millisecond), "failed_passes", n)
	r.failingSince = time.Time{}
}

// backoff returns MinBackoff·2ⁿ capped at MaxBackoff, with jitter: a
// uniformly random time in its upper half.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.MaxBackoff
	if n < 32 {
		if x := r.cfg.MinBackoff << n; x > 0 && x < d {
			d = x
		}
	}
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

func (r *Relay) reportLag(ctx context.Context, idle bool) {
	if !idle && time.Since(r.lastLag) < time.Second {
		return
	}
	r.lastLag = time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PassTimeout)
	defer cancel()
	lag, err := r.o.Lag(ctx)
	if err != nil {
		return
	}
	r.cfg.Observer.Lag(lag)
	if bo, ok := r.cfg.Observer.(BacklogObserver); ok {
		n, err := r.o.Pending(ctx)
		if err == nil {
			bo.Backlog(n, lag)
		}
	}
}

// Pending returns how many messages are pending (committed, not yet
// confirmed by the broker; parked ones are not counted).
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRowContext(ctx, o.st.pending).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: pending: %w", err)
	}
	return n, nil
}

// Lag returns how long ago the oldest pending message was enqueued, by the
// database clock (0 when nothing is pending).
func (o *Outbox) Lag(ctx context.Context) (time.Duration, error) {
	var us int64
	err := o.db.QueryRowContext(ctx, o.st.lag).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: lag: %w", err)
	}
	return max(0, time.Duration(us)*time.Microsecond), nil
}

type claimed struct {
	seq      int64
	attempts int
	msg      Message
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// RunOnce runs one pass: it claims up to BatchSize due messages (the head
// of each ordering key), publishes them and records each outcome. It
// returns how many it claimed. It is what each of a started Relay's
// Concurrency loops does, for tests and for callers with a scheduler of
// their own (who may call it from several goroutines at once on
// PostgreSQL and MySQL); it must not run while the relay is started.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	n, _, err := r.pass(ctx)
	return n, err
}

// pass returns the messages claimed, the first publish error when every
// one of them failed with a transient error, and a database error.
func (r *Relay) pass(ctx context.Context) (n int, allFailed error, err error) {
	ctx, cancelPass := context.WithTimeout(ctx, r.cfg.PassTimeout)
	defer cancelPass()
	o := r.o
	var q querier = o.db
	var tx *sql.Tx
	if o.cfg.Dialect == SQLite {
		if err := r.renewLease(ctx); err != nil {
			return 0, nil, err
		}
	} else {
		var release func()
		tx, release, err = r.beginClaim(ctx)
		if err != nil {
			return 0, nil, err
		}
		defer release()
		defer func() {
			if tx != nil {
				_ = tx.Rollback()
			}
		}()
		q = tx
	}
	// First the keys whose heads finished earlier (a key a business
	// transaction held, an operator's Discard): a head they promote is
	// claimed in this pass.
	if err := r.advanceLeftovers(ctx, tx); err != nil {
		return 0, nil, err
	}
	batch, err := claim(ctx, q, o.st.claim, r.cfg.BatchSize)
	if err != nil {
		return 0, nil, err
	}
	if len(batch) == 0 {
		if tx != nil {
			err = tx.Commit()
			tx = nil
		}
		return 0, nil, err
	}
	msgs := make([]Message, len(batch))
	for i, c := range batch {
		msgs[i] = c.msg
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	errs := r.pub.Publish(pctx, msgs)
	cancel()
	if len(errs) != len(msgs) {
		bad := fmt.Errorf("outbox: publisher returned %d results for %d messages", len(errs), len(msgs))
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = bad
		}
	}

	if tx == nil { // SQLite: the outcomes in one short write transaction
		if tx, err = o.db.BeginTx(ctx, nil); err != nil {
			return len(batch), nil, fmt.Errorf("outbox: begin: %w", err)
		}
		defer func() {
			if tx != nil {
				_ = tx.Rollback()
			}
		}()
	}
	var sent []any
	var retried, parked []int
	finished := map[int64]string{}
	for i, e := range errs {
		c := batch[i]
		switch {
		case e == nil:
			sent = append(sent, c.seq)
			if c.msg.OrderingKey != "" {
				finished[c.seq] = c.msg.OrderingKey
			}
		case IsPermanent(e):
			parked = append(parked, i)
			if _, err := tx.ExecContext(ctx, o.st.park, parkReason(e), c.seq); err != nil {
				return len(batch), nil, fmt.Errorf("outbox: park: %w", err)
			}
		default:
			retried = append(retried, i)
			delay := r.backoff(c.attempts)
			if _, err := tx.ExecContext(ctx, o.st.retry, delay.Microseconds(), truncate(e.Error()), c.seq); err != nil {
				return len(batch), nil, fmt.Errorf("outbox: retry: %w", err)
			}
		}
	}
	if len(sent) > 0 {
		if _, err := tx.ExecContext(ctx, o.st.markSentQuery(len(sent)), sent...); err != nil {
			return len(batch), nil, fmt.Errorf("outbox: mark sent: %w", err)
		}
	}
	if err := r.advance(ctx, tx, finished); err != nil {
		return len(batch), nil, err
	}
	err = tx.Commit()
	tx = nil
	if err != nil {
		return len(batch), nil, fmt.Errorf("outbox: commit: %w", err)
	}
	if len(sent) > 0 {
		r.cfg.Observer.Published(len(sent))
	}
	for _, i := range retried {
		r.cfg.Observer.Retried(batch[i].msg, errs[i])
	}
	for _, i := range parked {
		r.cfg.Observer.Parked(batch[i].msg, parkReason(errs[i]))
	}
	if len(retried) == len(batch) {
		return len(batch), errs[retried[0]], nil
	}
	return len(batch), nil, nil
}

// advanceLeftovers moves on the keys whose heads finished in earlier
// passes, in tx (PostgreSQL, MySQL). On SQLite (tx nil) it looks first,
// and writes, in a transaction of its own, only when there is something
// to do.
func (r *Relay) advanceLeftovers(ctx context.Context, tx *sql.Tx) error {
	finished := map[int64]string{}
	if tx != nil {
		if err := r.finishedHeads(ctx, tx, finished); err != nil {
			return err
		}
		return r.advance(ctx, tx, finished)
	}
	if err := r.finishedHeads(ctx, r.o.db, finished); err != nil || len(finished) == 0 {
		return err
	}
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	clear(finished)
	err = r.finishedHeads(ctx, tx, finished)
	if err == nil {
		err = r.advance(ctx, tx, finished)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	return nil
}

// finishedHeads adds to into the finished heads (sent or discarded
// messages whose key has not moved on), oldest first, up to BatchSize.
func (r *Relay) finishedHeads(ctx context.Context, q querier, into map[int64]string) error {
	rows, err := q.QueryContext(ctx, r.o.st.finished, r.cfg.BatchSize)
	if err != nil {
		return fmt.Errorf("outbox: finished heads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var key string
		if err := rows.Scan(&seq, &key); err != nil {
			return fmt.Errorf("outbox: finished heads: %w", err)
		}
		into[seq] = key
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("outbox: finished heads: %w", err)
	}
	return nil
}

// advanceChunk bounds the keys of one advance's statements (their
// placeholders) on MySQL and SQLite.
const advanceChunk = 200

// advance moves on the head of each key of finished (finished heads, seq
// → key) in q, the pass's transaction: the key's lowest open message
// becomes its head and head_seq follows it (or passes last_seq when
// nothing is open), and the finished messages stop being heads. The
// keys' rows are locked first, skipping those a business transaction
// holds (statements.lockKeys): their finished heads stay, and a later
// pass moves them on. Every statement is bound to primary keys and the
// key index.
func (r *Relay) advance(ctx context.Context, q querier, finished map[int64]string) error {
	if len(finished) == 0 {
		return nil
	}
	st := &r.o.st
	byKey := map[string][]int64{}
	for seq, k := range finished {
		byKey[k] = append(byKey[k], seq)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	size := advanceChunk
	if st.arrays {
		size = len(keys) // constant statements with array parameters
	}
	for chunk := range slices.Chunk(keys, size) {
		last := map[string]int64{}
		query, args := st.lockKeysFor(chunk, r.o.cfg.Dialect != SQLite)
		if err := scanRows(ctx, q, query, args, func(rows *sql.Rows) error {
			var k string
			var n int64
			err := rows.Scan(&k, &n)
			last[k] = n
			return err
		}); err != nil {
			return fmt.Errorf("outbox: advance: lock keys: %w", err)
		}
		if len(last) == 0 {
			continue
		}
		locked := make([]string, 0, len(last))
		for _, k := range chunk {
			if _, ok := last[k]; ok {
				locked = append(locked, k)
			}
		}
		type head struct{ seq, keySeq int64 }
		next := map[string]head{}
		query, args = st.nextHeadsFor(locked)
		if err := scanRows(ctx, q, query, args, func(rows *sql.Rows) error {
			var k string
			var h head
			if err := rows.Scan(&k, &h.seq, &h.keySeq); err != nil {
				return err
			}
			if old, ok := next[k]; !ok || h.keySeq < old.keySeq {
				next[k] = h
			}
			return nil
		}); err != nil {
			return fmt.Errorf("outbox: advance: next heads: %w", err)
		}
		var nextSeqs, doneSeqs, headSeqs []int64
		for _, k := range locked {
			doneSeqs = append(doneSeqs, byKey[k]...)
			h, ok := next[k]
			if ok {
				nextSeqs = append(nextSeqs, h.seq)
			} else {
				h.keySeq = last[k] + 1
			}
			headSeqs = append(headSeqs, h.keySeq)
		}
		query, args = st.promoteFor(nextSeqs, doneSeqs)
		if _, err := q.ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("outbox: advance: heads: %w", err)
		}
		query, args = st.headSeqFor(locked, headSeqs)
		if _, err := q.ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("outbox: advance: head_seq: %w", err)
		}
	}
	return nil
}

// scanRows runs query and calls scan for each row.
func scanRows(ctx context.Context, q querier, query string, args []any, scan func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// beginClaim begins a pass's transaction on PostgreSQL or MySQL, bounded
// on the server: a relay whose host vanished (its close never reaches the
// server) leaves it idle, and the server ends it, releasing its row locks
// for the other relays, once it has been idle for PassTimeout — which no
// live pass is, since PassTimeout bounds the whole pass. release must be
// called after the transaction ends.
//
// READ COMMITTED: on MySQL no gap locks, so Enqueue never waits for a
// relay; on both, each statement sees what is committed when it starts.
func (r *Relay) beginClaim(ctx context.Context) (*sql.Tx, func(), error) {
	o := r.o
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	ms := (r.cfg.PassTimeout + time.Millisecond - 1).Milliseconds()
	if o.cfg.Dialect == Postgres {
		tx, err := o.db.BeginTx(ctx, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: begin: %w", err)
		}
		// SET LOCAL: for this transaction only.
		if _, err := tx.ExecContext(ctx, `SET LOCAL idle_in_transaction_session_timeout = `+strconv.FormatInt(ms, 10)); err != nil {
			_ = tx.Rollback()
			return nil, nil, fmt.Errorf("outbox: begin: %w", err)
		}
		return tx, func() {}, nil
	}
	if o.noIdleTimeout.Load() { // MySQL, which has no such variable
		tx, err := o.db.BeginTx(ctx, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: begin: %w", err)
		}
		return tx, func() {}, nil
	}
	// MariaDB's idle_transaction_timeout is a session variable: it is set
	// on a connection of the pool's for the pass, and reset before the
	// connection goes back (the pool is the application's too); a
	// connection that cannot be reset is discarded.
	conn, err := o.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: begin: %w", err)
	}
	secs := (ms + 999) / 1000
	_, err = conn.ExecContext(ctx, `SET SESSION idle_transaction_timeout = `+strconv.FormatInt(secs, 10))
	if n, ok := sqlerr.MySQLNumber(err); ok && n == 1193 { // unknown system variable: MySQL
		o.noIdleTimeout.Store(true)
		err = nil
		secs = 0
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("outbox: begin: %w", err)
	}
	release := func() {
		if secs > 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, err := conn.ExecContext(rctx, `SET SESSION idle_transaction_timeout = DEFAULT`)
			cancel()
			if err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		_ = conn.Close()
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("outbox: begin: %w", err)
	}
	return tx, release, nil
}

func claim(ctx context.Context, q querier, query string, limit int) ([]claimed, error) {
	rows, err := q.QueryContext(ctx, query, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	defer rows.Close()
	var out []claimed
	for rows.Next() {
		var c claimed
		var headers string
		if err := rows.Scan(&c.seq, &c.msg.ID, &c.msg.Destination, &c.msg.OrderingKey, &c.msg.Payload, &headers, &c.attempts); err != nil {
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		if headers != "{}" && headers != "" {
			if err := json.Unmarshal([]byte(headers), &c.msg.Headers); err != nil {
				return nil, fmt.Errorf("outbox: message %q: headers: %w", c.msg.ID, err)
			}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	return out, nil
}

// renewLease takes or renews the SQLite single-relay lease.
func (r *Relay) renewLease(ctx context.Context) error {
	res, err := r.o.db.ExecContext(ctx, r.o.st.lease, r.holder, r.cfg.Lease.Microseconds())
	if err != nil {
		return fmt.Errorf("outbox: lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return ErrNotLeader
	}
	return nil
}

// truncate keeps a stored reason short (1 KiB), on a rune boundary.
func truncate(s string) string {
	const max = 1024
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func (r *Relay) sweepLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.PassTimeout)
		_, err := r.o.Sweep(sctx, r.cfg.Retention, r.cfg.SweepBatch)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("outbox sweeper: pass failed", "err", err)
		}
		select {
		case <-r.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep deletes sent and discarded rows finished more than age ago, batch
// rows per statement (through the index on the finishing time) until fewer
// remain, and returns how many it deleted. Pending and parked rows are
// never deleted.
func (o *Outbox) Sweep(ctx context.Context, age time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		res, err := o.db.ExecContext(ctx, o.st.sweep, age.Microseconds(), batch)
		if err != nil {
			return total, fmt.Errorf("outbox: sweep: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("outbox: sweep: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
